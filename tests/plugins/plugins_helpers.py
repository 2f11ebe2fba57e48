"""Helpers for the plugin tests: a plugin folder written from parts, a TCP listener as a witness.

A confined hook can write nowhere the host sees, so whether its command ran
at all is witnessed by the network: a hook given ``network = true`` connects
to :class:`Witness`'s loopback port before it answers, and the witness counts
the connections it accepted.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import tomlkit

PYTHON = sys.executable

# A hook command's body (Python): the event is `event`; `answer(...)` prints the answer.
HOOK_PRELUDE = """\
import json, os, socket, sys
event = json.load(sys.stdin)
def answer(decision="continue", reason="", **annotations):
    print(json.dumps({"decision": decision, "reason": reason, "annotations": annotations}))
def touch_witness(port):
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
"""


def hook_script(body: str) -> str:
    return HOOK_PRELUDE + body + "\n"


def write_plugin(
    folder: Path,
    name: str = "guard",
    *,
    hooks: Sequence[Mapping[str, Any]] = (),
    scripts: Mapping[str, str] | None = None,
    policy: str | None = None,
    mcp: str | None = None,
    skills: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
) -> Path:
    """A plugin folder: ``hooks`` as [[hook]] tables, ``scripts`` (name -> Python body) under
    ``hooks/``, a policy fragment, an mcp.toml, ``skills`` (name -> SKILL.md text), extra files."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"name": name, "version": "1.0.0", "description": "a test plugin"}
    if policy is not None:
        (folder / "policy.toml").write_text(policy)
        manifest["policy"] = "policy.toml"
    if mcp is not None:
        (folder / "mcp.toml").write_text(mcp)
        manifest["mcp"] = "mcp.toml"
    if skills:
        manifest["skills"] = "skills"
        for skill, text in skills.items():
            (folder / "skills" / skill).mkdir(parents=True, exist_ok=True)
            (folder / "skills" / skill / "SKILL.md").write_text(text)
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    for script, body in (scripts or {}).items():
        (folder / "hooks").mkdir(exist_ok=True)
        (folder / "hooks" / script).write_text(hook_script(body))
    if hooks:
        manifest["hook"] = [dict(h) for h in hooks]
    (folder / "ringfence-plugin.toml").write_text(tomlkit.dumps(manifest))
    return folder


def python_hook(
    name: str, script: str, *, points: Sequence[str] = ("pre_call",), **more: Any
) -> dict[str, Any]:
    """A [[hook]] table running ``hooks/<script>`` with this interpreter."""
    return {"name": name, "points": list(points), "command": [PYTHON, f"hooks/{script}"], **more}


class Witness:
    """A loopback TCP listener that counts the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def witness() -> Iterator[Witness]:
    w = Witness()
    try:
        yield w
    finally:
        w.close()


def events_of(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if kind is None or r["kind"] == kind]
