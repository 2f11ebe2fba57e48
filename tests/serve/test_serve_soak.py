"""``ringfence serve --transport http`` under load: memory comes back, departures print nothing.

A real server subprocess, 20 real SDK clients over Streamable HTTP for a bounded time, some
of them cut off abruptly (mid-call, between calls) without ending their session. After they
have all gone and the server had a short settle, its resident memory must be back within
20% of what it was idle after a warm-up, and nothing it wrote to stderr may be a traceback.

What used to grow (measured with tracemalloc and live-object counts in a real run): every
result the server sent stayed in the resumable-event store (up to 4,096 events / 32 MiB of
JSON, held as message objects) after its session had ended, and every session whose client
vanished kept its SDK transport, tasks and ringfence state (about 136 KiB each) for the
SDK's 30-minute idle timeout. A session now ends after ``--session-idle-timeout`` (5 s
here) and takes its events, grants and log subscription with it; what glibc kept of the
freed memory goes back once the server is quiet (``ringfence/serve/_memory.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import psutil
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from serve_helpers import real_command, subprocess_env
from test_serve_http import MCP_HEADERS, rpc

from ringfence.runtime import verify_file

CLIENTS = 20
ABRUPT = 6  # of the CLIENTS workers, how many leave without ending their session
LOAD_SECONDS = 15.0
WARM_UP_SECONDS = 3.0
# Short, so the test can wait for it; long enough that a live client, starved of CPU on a
# busy machine, is not idle between its initialize and its GET stream.
IDLE_TIMEOUT = 5.0
SETTLE_SECONDS = IDLE_TIMEOUT + 3.0  # the timeout, its grace, the sweep, and a margin
RSS_BOUND = 1.20
# A result of this size makes a store that keeps results visible within the run.
FILE_TEXT = "a line of the file the clients read, again and again\n" * 1100


class Load:
    """Counts of what the clients did, and the sessions of those cut off."""

    def __init__(self) -> None:
        self.calls = 0
        self.errors: list[str] = []
        self.abrupt = 0
        self.cut_sessions: list[str] = []


async def one_client(url: str, token: str, load: Load, until: float, abrupt: bool) -> None:
    """One SDK client calling read_file until ``until``; an abrupt one is cut off at a random
    moment (during a call or between calls), so it never sends its DELETE."""
    headers = {"Authorization": f"Bearer {token}"}
    session: list[str] = []

    async def note_session(response: httpx2.Response) -> None:
        if not session and response.headers.get("mcp-session-id"):
            session.append(response.headers["mcp-session-id"])

    async with httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(30.0),
        event_hooks={"response": [note_session]},
    ) as http:
        with trio.CancelScope() as cut:
            if abrupt:
                cut.deadline = trio.current_time() + random.uniform(0.2, 1.5)
            async with Client(
                streamable_http_client(url, http_client=http),
                mode="legacy",
                cache=None,
                read_timeout_seconds=30.0,
            ) as client:
                while trio.current_time() < until:
                    result = await client.call_tool("read_file", {"path": "file.txt"})
                    load.calls += 1
                    if result.is_error:
                        load.errors.append(str(result.content))
                    if abrupt and random.random() < 0.3:
                        await trio.sleep(random.uniform(0, 0.3))  # cut off while idle, too
        if cut.cancelled_caught:
            load.abrupt += 1
            load.cut_sessions.extend(session)


async def worker(url: str, token: str, load: Load, seconds: float, abrupt: bool) -> None:
    until = trio.current_time() + seconds
    while trio.current_time() < until:
        await one_client(url, token, load, until, abrupt)


async def run_load(url: str, token: str, seconds: float) -> Load:
    load = Load()
    async with trio.open_nursery() as nursery:
        for n in range(CLIENTS):
            nursery.start_soon(worker, url, token, load, seconds, n < ABRUPT)
    return load


async def test_memory_returns_and_no_traceback_after_twenty_clients(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "file.txt").write_text(FILE_TEXT)
    events = tmp_path / "events.jsonl"
    stderr_path = tmp_path / "serve.stderr"
    argv = real_command(
        workspace, events, "--transport", "http", "--port", "0", "--json",
        "--posture", "allow-all", "--session-idle-timeout", str(IDLE_TIMEOUT),
    )  # fmt: skip
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **subprocess_env()},
        )
    try:
        assert process.stdout is not None
        announced = b""
        with trio.fail_after(30):
            while b"\n" not in announced:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, stderr_path.read_text()
                announced += chunk
        info = json.loads(announced.split(b"\n", 1)[0])["result"]
        server = psutil.Process(process.pid)

        def rss_mib() -> float:
            return server.memory_info().rss / 2**20

        # Warm-up: the same traffic, so imports, caches and the allocator reach their size.
        await run_load(info["url"], info["token"], WARM_UP_SECONDS)
        await trio.sleep(SETTLE_SECONDS)
        idle = rss_mib()

        load = await run_load(info["url"], info["token"], LOAD_SECONDS)
        loaded = rss_mib()
        await trio.sleep(SETTLE_SECONDS)
        after = rss_mib()
        said = f"idle {idle:.1f} MiB, end of load {loaded:.1f}, settled {after:.1f}"
        print(f"{said}; {load.calls} calls, {load.abrupt} cut off")
        assert load.calls > 20 and load.abrupt > 5, said
        assert load.errors == []
        assert after <= idle * RSS_BOUND, said
        # The sessions of clients that vanished without DELETE are over (the SDK's too).
        async with httpx2.AsyncClient(headers=MCP_HEADERS, timeout=30) as http:
            http.headers["Authorization"] = f"Bearer {info['token']}"
            for sid in load.cut_sessions[:10]:
                response = await http.post(
                    info["url"], content=rpc("tools/list"), headers={"MCP-Session-Id": sid}
                )
                assert response.status_code == 404, (sid, response.status_code)

        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    written = stderr_path.read_text()
    assert "Traceback" not in written, written
    assert "Error" not in written, written
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems
