"""A shared events file after a crash: ``ringfence serve`` killed, another session appended.

A client that kills its stdio server (pydantic-ai does; a desktop config appends every
launch to one file) leaves a session without a seal in the middle of the file. Each test
runs the real command over stdio (raw JSON-RPC lines on its pipes), kills or ends it the way
a client does, and checks the file through ``ringfence events verify``: a crash is reported
as a session that ended without a seal, with the lines no checkpoint proves, and is never
called tampering; records a checkpoint covers, removed or edited, still are.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import ringfence_process
from serve_helpers import (
    http_serve_process,
    http_session,
    real_command,
    records,
    subprocess_env,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_helpers import rechain  # the forger of tests/runtime


class StdioServer:
    """``python -m ringfence serve`` (stdio) with its pipes held by the test."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""
        self._next_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        with trio.fail_after(30):
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    message = json.loads(line)
                    if message.get("id") == self._next_id:
                        return message
                chunk = await self.process.stdout.receive_some(65536)
                assert chunk, "the server closed stdout before answering"
                self._buffer += chunk

    async def initialize(self) -> None:
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "seal-test", "version": "0"},
        }
        answer = await self.request("initialize", init)
        assert "result" in answer, answer
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def read(self, path: str = "hello.txt") -> None:
        answer = await self.request(
            "tools/call", {"name": "read_file", "arguments": {"path": path}}
        )
        assert answer["result"].get("isError") is not True, answer


async def start_serve(workspace: Path, events: Path, errlog: Path) -> StdioServer:
    with errlog.open("ab") as err:
        process = await trio.lowlevel.open_process(
            [sys.executable, *real_command(workspace, events, "--posture", "allow-all")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, **subprocess_env()},
        )
    server = StdioServer(process)
    await server.initialize()
    return server


async def finish(server: StdioServer, how: str) -> int:
    """End the server the way a client does; its exit status."""
    process = server.process
    if how == "eof":
        assert process.stdin is not None
        await process.stdin.aclose()
    else:
        signals = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT, "sighup": signal.SIGHUP}
        process.send_signal(signals.get(how, signal.SIGKILL))
    with trio.fail_after(30):
        return await process.wait()


def verify(events: Path, *options: str) -> tuple[int, str, dict[str, Any]]:
    """``events verify`` as text and as JSON: (exit code, text, the JSON report)."""
    text = ringfence_process("events", "verify", *options, str(events))
    as_json = ringfence_process("events", "verify", "--json", *options, str(events))
    assert text.returncode == as_json.returncode, (text.stdout, as_json.stdout)
    body = json.loads(as_json.stdout)
    report = body["result"] if body["ok"] else body["error"]["details"]["report"]
    return text.returncode, text.stdout, report


async def crashed_then_appended(workspace: Path, events: Path, tmp_path: Path) -> dict[str, int]:
    """A served session SIGKILLed after some calls, a second one run and closed after it.

    Returns where things are (1-based lines): the killed session's start, its last
    checkpoint, its last record, and the second session's start.
    """
    errlog = tmp_path / "serve.stderr"
    first = await start_serve(workspace, events, errlog)
    for _ in range(3):
        await first.read()
    await trio.sleep(0.6)  # idle past a checkpoint interval: the idle tail is signed
    for _ in range(2):
        await first.read()  # these end no checkpoint interval: the unproven tail
    assert await finish(first, "kill") == -signal.SIGKILL
    crashed = records(events)
    assert crashed[-1]["kind"] != "session_sealed"
    kinds = [r["kind"] for r in crashed]
    checkpoint = max(i for i, k in enumerate(kinds, 1) if k == "chain_checkpoint")
    assert checkpoint < len(crashed), "no unproven tail: the test needs one"

    second = await start_serve(workspace, events, errlog)
    await second.read()
    assert await finish(second, "eof") == 0
    assert records(events)[-1]["kind"] == "session_sealed"
    return {"start": 1, "checkpoint": checkpoint, "end": len(crashed), "next": len(crashed) + 1}


async def test_a_killed_session_followed_by_another_is_unsealed_not_tampered(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    at = await crashed_then_appended(workspace, events, tmp_path)
    tail = f"lines {at['checkpoint'] + 1}-{at['end']}"

    # Without the flag: not proven whole (exit 1), but said for what it is.
    code, text, report = verify(events)
    assert code == 1
    assert "TAMPERED" not in text and "NOT SEALED" in text, text
    assert f"line {at['start']}: session ended without a seal" in text, text
    assert f"unauthenticated tail: {tail}" in text, text
    assert report["tampered"] is False and report["unsealed_sessions"] == 1
    assert report["sealed_sessions"] == 1
    assert report["unsealed"] == [
        {
            "line": at["start"],
            "last_line": at["end"],
            "next_session_line": at["next"],
            "proven_through": at["checkpoint"],
            "unauthenticated_lines": [at["checkpoint"] + 1, at["end"]],
        }
    ]

    # The operator accepts sessions that ended without a seal: exit 0, still reported.
    code, text, report = verify(events, "--allow-open")
    assert code == 0, text
    assert "intact" in text and "TAMPERED" not in text
    assert f"unauthenticated tail: {tail}" in text, text
    assert report["intact"] is True and report["problems"] == []
    assert report["unsealed"][0]["unauthenticated_lines"] == [at["checkpoint"] + 1, at["end"]]


def _rewrite(events: Path, lines: list[bytes]) -> None:
    events.write_bytes(b"".join(lines))


async def test_records_a_checkpoint_covers_still_count_as_tampering_after_a_crash(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    at = await crashed_then_appended(workspace, events, tmp_path)
    original = events.read_bytes().splitlines(keepends=True)
    rs = records(events)
    covered = next(i for i, r in enumerate(rs[: at["checkpoint"]], 1) if r["kind"] == "finished")

    # A covered record removed (the chain left broken): tampering, with or without the flag.
    _rewrite(events, original[: covered - 1] + original[covered:])
    for options in ((), ("--allow-open",)):
        code, text, report = verify(events, *options)
        assert code == 1 and "TAMPERED" in text and report["tampered"] is True, text

    # Removed and the chain re-hashed by a forger without the keys: the signatures fail.
    _rewrite(events, [rechain(rs[: covered - 1] + rs[covered:])])
    code, text, report = verify(events, "--allow-open")
    assert code == 1 and "TAMPERED" in text, text
    assert any("signature does not verify" in p for p in report["problems"]), report

    # A covered record edited (a result changed), the chain re-hashed: tampering.
    edited = [dict(r) for r in rs]
    edited[covered - 1]["output_chars"] = 1
    _rewrite(events, [rechain(edited)])
    code, text, _report = verify(events, "--allow-open")
    assert code == 1 and "TAMPERED" in text, text

    # The unproven tail cut off before the next session began: the next session's signed
    # head no longer matches, so that is tampering too, not a crash.
    _rewrite(events, [rechain(rs[: at["end"] - 1] + rs[at["end"] :])])
    code, text, _report = verify(events, "--allow-open")
    assert code == 1 and "TAMPERED" in text, text


@pytest.mark.parametrize("how", ["eof", "sigterm", "sigint", "sighup"])
async def test_serve_seals_its_session_however_the_client_ends_it(
    workspace: Path, events: Path, tmp_path: Path, how: str
) -> None:
    server = await start_serve(workspace, events, tmp_path / "serve.stderr")
    for _ in range(3):
        await server.read()
    assert await finish(server, how) == 0
    assert records(events)[-1]["kind"] == "session_sealed"
    code, text, report = verify(events)
    assert code == 0 and report["sealed_sessions"] == 1 and report["unsealed"] == [], text
    assert "Traceback" not in (tmp_path / "serve.stderr").read_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_serve_over_http_seals_its_session_on_a_signal(
    workspace: Path, events: Path, sig: signal.Signals
) -> None:
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    async with http_serve_process(argv) as server:
        assert server.token is not None
        async with http_session(server.url, server.token) as client:
            assert not (await client.call_tool("read_file", {"path": "hello.txt"})).is_error
        server.process.send_signal(sig)
        rest = b""
        with trio.fail_after(20):
            assert await server.process.wait() == 0
            assert server.process.stdout is not None
            while chunk := await server.process.stdout.receive_some(65536):
                rest += chunk
    assert records(events)[-1]["kind"] == "session_sealed"
    code, text, report = verify(events)
    assert code == 0 and report["unsealed"] == [], text
    said = "\n".join(server.stderr_lines) + rest.decode(errors="replace")
    assert "Traceback" not in said, said
