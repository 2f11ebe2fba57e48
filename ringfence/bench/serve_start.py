"""``serve-start``: from spawning ``ringfence serve`` (stdio) to its first ``initialize`` answer.

A client that starts a stdio server waits for ``initialize`` before anything else,
and some start a server per call (langchain-mcp-adapters' default path), so this
wait is paid often. Goal (issue 31): at most 250 ms. The baseline is the Node
reference filesystem server (``mcp-server-filesystem``, npm) started the same way:
what a client pays for a server it already accepts. Both arms spawn a process, write
one ``initialize`` and time until its answer arrives; the process is then ended
(stdin closed) outside the timed part. Rounds alternate which starts first. A second,
informational row times the answer to the ``tools/list`` sent right after: that one
waits for the kernel and the MCP SDK (the initialize answer does not, see
``ringfence.serve._early``).

The Node arm needs the npm servers of the source tree (``make npm-servers``); without
them it is left out and the row has no baseline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import trio

from ._harness import Arm, interleave
from ._source import ROOT
from ._suite import Row, Scenario

GOAL_SECONDS = 0.250
NODE_FS = ROOT / "tests" / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
TOOLS_LIST = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "ringfence-bench", "version": "1"},
        },
    }
)


def _ringfence_command() -> list[str]:
    """The installed entry point when there is one (what a user runs), else ``-m ringfence``."""
    script = Path(sys.executable).parent / "ringfence"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ringfence"]


def _time_to_answers(argv: list[str], env: dict[str, str], *, tools: bool) -> float:
    """Seconds from spawning ``argv`` to its answer to ``initialize`` (or, with ``tools``,
    to its answer to the ``tools/list`` sent right after it)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE.encode() + b"\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if b'"result"' not in line:
            raise RuntimeError(f"{argv[0]} did not answer initialize: {line[:300]!r}")
        if tools:
            proc.stdin.write(INITIALIZED.encode() + b"\n" + TOOLS_LIST.encode() + b"\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if b'"tools"' not in line:
                raise RuntimeError(f"{argv[0]} did not answer tools/list: {line[:300]!r}")
        return time.perf_counter() - start
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _laps(
    argv: list[str], env: dict[str, str], tools: bool = False
) -> Callable[[], Awaitable[list[float]]]:
    """A self-timed arm: the time to the answer only (the process's exit is not timed)."""

    async def lap() -> list[float]:
        return [await trio.to_thread.run_sync(partial(_time_to_answers, argv, env, tools=tools))]

    return lap


async def run(quick: bool) -> list[Row]:
    rounds = 4 if quick else 12
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        env = {**os.environ, "RINGFENCE_HOME": str(Path(tmp) / "home")}
        ours = [*_ringfence_command(), "serve", "--workspace", str(workspace)]
        arms = [
            Arm("ringfence serve", _laps(ours, env), self_timed=True),
            Arm("ringfence serve, tools/list", _laps(ours, env, True), self_timed=True),
        ]
        node = NODE_FS.exists()
        if node:
            theirs = [str(NODE_FS), str(workspace)]
            arms.append(Arm("mcp-server-filesystem", _laps(theirs, env), self_timed=True))
            arms.append(
                Arm("mcp-server-filesystem, tools/list", _laps(theirs, env, True), self_timed=True)
            )
        samples = await interleave(arms, rounds=rounds, warmup=1)
    subject = samples["ringfence serve"]
    notes = {"goal_s": GOAL_SECONDS}
    if not node:
        notes["note"] = f"{NODE_FS} is missing (make npm-servers): no Node baseline"
    return [
        Row(
            "serve-start",
            "spawn `ringfence serve` (stdio) to its answer to initialize",
            subject,
            samples.get("mcp-server-filesystem"),
            "<= 250 ms",
            subject.median <= GOAL_SECONDS,
            notes,
        ),
        Row(
            "serve-start",
            "spawn `ringfence serve` (stdio) to its answer to the first tools/list",
            samples["ringfence serve, tools/list"],
            samples.get("mcp-server-filesystem, tools/list"),
            "informational (the kernel and the MCP SDK loaded)",
            None,
            {},
        ),
    ]


SCENARIO = Scenario(
    "serve-start",
    "ringfence serve: spawn to the first initialize answer, vs the Node filesystem server",
    "<= 250 ms",
    run,
)
