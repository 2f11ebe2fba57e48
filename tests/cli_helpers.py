"""Test helpers for driving the ``ringfence`` command: in-process, as a subprocess, on a pty.

Importable from any test module as ``cli_helpers`` (pytest puts ``tests/`` on
``sys.path`` for its ``conftest.py``), like ``kernel_helpers``. A module that
wants the :func:`isolated` fixture imports it by name; pytest then applies it
(it is autouse) to that module's tests only.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ringfence.cli._main import main

__all__ = [
    "PtyRun",
    "cli_json",
    "commands",
    "isolated",
    "ringfence_json",
    "ringfence_process",
    "run_on_pty",
    "uncovered",
]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No managed policy rules, and no posture, debug or roots from the caller's environment."""
    managed = tmp_path / "managed-policy.toml"
    managed.write_text("# no managed rules\n")
    monkeypatch.setenv("RINGFENCE_MANAGED_POLICY", str(managed))
    for name in ("RINGFENCE_POSTURE", "RINGFENCE_DEBUG", "RINGFENCE_WORKSPACE_ROOTS"):
        monkeypatch.delenv(name, raising=False)


def commands(parser: argparse.ArgumentParser | None = None) -> list[tuple[str, ...]]:
    """Every runnable (sub)command of the real parser, as its words: ``("mcp", "login")``.

    Walks the subparsers of :func:`ringfence.cli._main.build_parser` (all verbs
    loaded), so a verb or subcommand added there appears here without a list to update.
    """
    from ringfence.cli._main import build_parser

    def walk(p: argparse.ArgumentParser, words: tuple[str, ...]) -> list[tuple[str, ...]]:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [words]
        return [
            c
            for a in subs
            for name, child in a.choices.items()
            for c in walk(child, (*words, name))
        ]

    return walk(parser or build_parser(), ())


def uncovered(argvs: Iterable[Sequence[str]]) -> list[str]:
    """The commands of :func:`commands` that none of ``argvs`` runs (its first words)."""
    seen = [tuple(argv) for argv in argvs]
    return [" ".join(c) for c in commands() if not any(argv[: len(c)] == c for argv in seen)]


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Run ``ringfence *argv --json`` in-process: the exit code and the one JSON document."""
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def ringfence_process(
    *argv: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ringfence *argv`` as a real process, text in and out.

    The environment is this process's, with ``env`` laid over it and ``unset``
    removed. Never raises on a non-zero exit; times out after 60 s.
    """
    full_env = {**os.environ, **(env or {})}
    for name in unset:
        full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "ringfence", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=full_env,
        check=False,
    )


def ringfence_json(
    *argv: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> tuple[int, Any, str]:
    """:func:`ringfence_process`: exit code, stdout as JSON (``None`` if empty or not JSON), stderr."""
    proc = ringfence_process(*argv, cwd=cwd, env=env)
    try:
        body = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        body = None
    return proc.returncode, body, proc.stderr


@dataclass(frozen=True)
class PtyRun:
    """What a run on a pty showed: its exit code, its output, whether the prompt was answered."""

    code: int
    output: str
    answered: bool


def run_on_pty(
    args: list[str],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
    prompt: bytes | None = None,
    answer: bytes = b"",
    answers: Sequence[bytes] = (),
) -> PtyRun:
    """Run ``python -m ringfence *args`` with a pty as stdin, stdout and stderr.

    Reads until the child closes the terminal or exits (30 s at the most); the
    first time ``prompt`` appears in the output it writes ``answer`` once; with
    ``answers``, the n-th appearance gets the n-th answer (``d`` once they run
    out, so an unexpected question is denied rather than left hanging).
    ``new_session`` makes the pty a terminal the child can prompt on. The child
    is killed if still running.
    """
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringfence", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        close_fds=True,
        env={**os.environ, **(env or {})},
        start_new_session=new_session,
    )
    os.close(slave)
    seen = b""
    answered = False
    queue = list(answers) if answers else [answer]
    asked = 0
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
                while prompt is not None and seen.count(prompt) > asked:
                    if answers or not answered:
                        os.write(master, queue[asked] if asked < len(queue) else b"d\n")
                    asked += 1
                    answered = True
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return PtyRun(code, seen.decode(errors="replace"), answered)
