"""Peer: the reference MCP filesystem server (node), read/list latency and the path-attack table.

Both servers get the same root and the same attacks over MCP stdio (SDK
client): ``ringfence serve`` under ``allow-reversible`` (so a write is refused
by confinement or the git-metadata guard, not by the policy) and
``@modelcontextprotocol/server-filesystem`` from ``tests/npm``. Each attack's
row records, for both, whether the call was refused and whether it had an
effect (a secret in the answer, a file changed outside the root or in
``.git``), checked on disk after the call; the times are each call's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from .. import latency
from .._harness import Samples
from .._source import ROOT, source_file
from .._suite import Row, Scenario, Skip

SECRET = "PEER-SECRET-4b1d"


@dataclass(frozen=True)
class Attack:
    name: str
    tool: str  # read, write or list
    path: str  # relative to the root (joined to it for the node server)
    absolute: bool = False  # the path is already absolute (a place outside the root)


def _attacks(base: Path) -> list[Attack]:
    return [
        Attack("../ out of the root", "read", "../outside/secret"),
        Attack("absolute path outside", "read", str(base / "outside" / "secret"), absolute=True),
        Attack(
            "sibling with the root as prefix (CVE-2025-53110)",
            "read",
            str(base / "ws_secret" / "secret"),
            absolute=True,
        ),
        Attack("symlink to a file outside", "read", "link"),
        Attack("symlinked directory outside", "read", "linkdir/secret"),
        Attack("list outside through ..", "list", "../outside"),
        Attack("/etc/passwd", "read", "/etc/passwd", absolute=True),
        Attack("write through a symlink outside", "write", "link"),
        Attack("create through a symlinked directory", "write", "linkdir/created"),
        Attack("write .git/config", "write", ".git/config"),
        Attack("write a git hook", "write", ".git/hooks/pre-commit"),
    ]


def _tree(base: Path) -> Path:
    root = base / "ws"
    for d in (root / ".git" / "hooks", base / "outside", base / "ws_secret"):
        d.mkdir(parents=True)
    (root / "ok.txt").write_text("ok\n")
    (root / ".git" / "config").write_text("[core]\n")
    (base / "outside" / "secret").write_text(SECRET + "\n")
    (base / "ws_secret" / "secret").write_text(SECRET + "\n")
    (root / "link").symlink_to(base / "outside" / "secret")
    (root / "linkdir").symlink_to(base / "outside")
    return root


def _snapshot(base: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(base.rglob("*")):
        if p.is_file() and not p.is_symlink() and "home" not in p.relative_to(base).parts:
            out[str(p.relative_to(base))] = p.read_bytes()
    return out


async def _attempt(client: Any, node: bool, root: Path, attack: Attack) -> tuple[str, float]:
    path = attack.path if attack.absolute or not node else str(root / attack.path)
    name, args = {
        "read": ("read_text_file" if node else "read_file", {"path": path}),
        "list": ("list_directory", {"path": path}),
        "write": ("write_file", {"path": path, "content": "#!/bin/sh\necho pwned\n"}),
    }[attack.tool]
    t = time.perf_counter()
    try:
        result = await client.call_tool(name, args)
    except Exception as exc:  # a protocol error is a refusal too
        return f"refused ({type(exc).__name__})", time.perf_counter() - t
    elapsed = time.perf_counter() - t
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:  # ringfence's text starts with its error code
        return f"refused ({text.split(':', 1)[0].strip()[:24]})", elapsed
    if SECRET in text or "root:" in text or (attack.tool == "list" and "secret" in text):
        return "LEAKED", elapsed
    return "allowed", elapsed


async def run(quick: bool) -> list[Row]:
    node_fs = latency.NODE_FS.relative_to(ROOT).as_posix()
    source_file(node_fs, what="the npm MCP servers", fix="make npm-servers")
    if shutil.which("node") is None:
        raise Skip("node is not on PATH (the npm servers need Node.js)")
    rows = [
        replace(r, scenario="peer-filesystem")
        for r in await latency.run_serve(quick)
        if "node" in r.label
    ]
    with (
        tempfile.TemporaryDirectory(prefix="ringfence-peer-") as tmp,
        open(os.devnull, "w") as devnull,
    ):
        base = Path(tmp).resolve()
        rf = latency._ringfence_command()
        env = {**os.environ, "RINGFENCE_HOME": str(base / "home")}
        results: dict[str, list[tuple[str, float, bool]]] = {}
        for server in ("ringfence serve", "node server-filesystem"):
            for child in base.iterdir():  # a fresh tree for each server
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            root = _tree(base)
            params = (
                StdioServerParameters(
                    command=rf[0],
                    args=[
                        *rf[1:],
                        "serve",
                        "--workspace",
                        str(root),
                        "--posture",
                        "allow-reversible",
                    ],
                    env=env,
                )
                if server == "ringfence serve"
                else StdioServerParameters(command=str(latency.NODE_FS), args=[str(root)], env=env)
            )
            async with latency._clients({server: params}, devnull) as clients:
                client = clients[server]
                for attack in _attacks(base):
                    before = _snapshot(base)
                    outcome, seconds = await _attempt(
                        client, server.startswith("node"), root, attack
                    )
                    changed = _snapshot(base) != before
                    results.setdefault(attack.name, []).append((outcome, seconds, changed))
    for attack in _attacks(Path("/")):
        (rf_out, rf_s, rf_changed), (nd_out, nd_s, nd_changed) = results[attack.name]
        rows.append(
            Row(
                "peer-filesystem",
                f"attack: {attack.name}: ringfence {_shown(rf_out, rf_changed)}; "
                f"node {_shown(nd_out, nd_changed)}",
                Samples("ringfence", [rf_s]),
                Samples("node server-filesystem", [nd_s]),
                "ringfence refuses, no effect",
                rf_out.startswith("refused") and not rf_changed,
                {
                    "ringfence": rf_out,
                    "ringfence_changed": rf_changed,
                    "node": nd_out,
                    "node_changed": nd_changed,
                },
            )
        )
    return rows


def _shown(outcome: str, changed: bool) -> str:
    return outcome + (", CHANGED ON DISK" if changed else "")


SCENARIO = Scenario(
    "peer-filesystem",
    "reference MCP filesystem server: read/list latency and the path-attack table",
    "<= 1.3x node latency; every attack refused with no effect",
    run,
)
