"""Clients that declare a body and close before sending it, against a real ``ringfence serve``.

hypercorn answers such a request at once (401 without the token, 413 for a declared body
over the bound), then closes the connection (``send_eof``, which holds trio's send side
across a checkpoint) while its protocol sends an error answer to the request the client
cut: trio refused the second sender with ``BusyResourceError``, which left hypercorn's
connection task and ended the whole server, after a few dozen such connections from any
local process, token or not. serve now runs the one worker the review page runs
(``serve._connections.serve_bounded``), whose connections send in turn.
"""

from __future__ import annotations

from pathlib import Path

import trio
from serve_helpers import http_serve_process, http_session, real_command, records

from ringfence.runtime import verify_file
from ringfence.serve._defaults import MAX_REQUEST_BYTES

ROUNDS = 60


def _cut_requests(port: int, token: str) -> list[tuple[bytes, bool]]:
    """(request head, whether the server answers it before its body): with and without the
    token, with and without an Origin, a small body and one over the bound."""
    host = f"127.0.0.1:{port}"
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
    )
    small, large = "Content-Length: 200000\r\n", f"Content-Length: {MAX_REQUEST_BYTES + 1}\r\n"
    bearer, origin = f"Authorization: Bearer {token}\r\n", f"Origin: http://{host}\r\n"
    return [
        ((head + small + "\r\n").encode(), True),  # 401
        ((head + small + origin + "\r\n").encode(), True),  # 401
        ((head + small + bearer + "\r\n").encode(), False),  # waits for its body
        ((head + small + origin + bearer + "\r\n").encode(), False),
        ((head + large + bearer + "\r\n").encode(), True),  # 413
        ((head + large + origin + bearer + "\r\n").encode(), True),  # 413
    ]


async def test_clients_closing_mid_body_never_end_the_server(workspace: Path, events: Path) -> None:
    """60 rounds of cut requests (every other round reading the start of the early answer):
    the process stays up, prints no error, answers a real MCP client's ``initialize`` and a
    call afterwards, and still drains and seals its events on SIGTERM."""
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    async with http_serve_process(argv) as server:
        assert server.token is not None
        port = int(server.url.split(":")[2].split("/")[0])
        with trio.fail_after(180):
            for round_ in range(ROUNDS):
                for head, answered_early in _cut_requests(port, server.token):
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    try:
                        await stream.send_all(head)
                        if round_ % 2 and answered_early:
                            assert (await stream.receive_some(100)).startswith(b"HTTP/1.1 4")
                    finally:
                        await trio.aclose_forcefully(stream)
                assert server.process.returncode is None, server.stderr_lines[-40:]
            async with http_session(server.url, server.token) as client:
                assert client.server_info is not None and client.server_info.name == "ringfence"
                result = await client.call_tool("read_file", {"path": "hello.txt"})
                assert not result.is_error, result
        assert server.process.returncode is None, server.stderr_lines[-40:]
        assert await server.stop() == 0
    said = "\n".join(server.stderr_lines)
    for bad in ("BusyResourceError", "unexpected error", "Traceback"):
        assert bad not in said, said[-3000:]
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems
    refused = [r for r in records(events) if r["kind"].startswith("serve_refused")]
    assert refused  # the 401s were audited, within the bound


def test_a_flood_of_idle_connections_without_the_token_leaves_the_kernel_its_descriptors(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    """Through the real command under an open-file limit of 128: 300 connections that send
    half a request line and nothing more, no token, held open. serve held every one (each for
    its 5 s header deadline, a flood renewing them for ever), so the process ran out of
    descriptors: accept looped on EMFILE and the kernel could open no file. Now connections
    are at most the admitted requests' bound plus 16, the oldest never admitted closed first:
    the process keeps descriptors, and a call made during the flood writes its file."""
    import json
    import os
    import resource
    import socket
    import subprocess
    import sys
    import time

    import httpx2
    from serve_helpers import subprocess_env
    from test_serve_http import MCP_HEADERS, rpc

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    stderr = (tmp_path / "serve.stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=stderr,
        env={**os.environ, **subprocess_env()},
        preexec_fn=limited,
    )
    flood: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        announced = json.loads(proc.stdout.readline())["result"]
        url, token = announced["url"], announced["token"]
        port = int(url.split(":")[2].split("/")[0])
        for _ in range(300):
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            conn.sendall(b"POST /mcp HTT")
            flood.append(conn)
        assert proc.poll() is None
        # Connections closed to make room are closed by their own tasks: a moment on a
        # loaded machine, well within the 5 s the old server held each of them.
        deadline = time.monotonic() + 3
        while len(os.listdir(f"/proc/{proc.pid}/fd")) >= 120 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(os.listdir(f"/proc/{proc.pid}/fd")) < 120
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "flood-test", "version": "0"},
        }
        with httpx2.Client(timeout=30) as http:
            response = http.post(url, content=rpc("initialize", init), headers=headers)
            assert response.status_code == 200, response.text
            sid = response.headers["mcp-session-id"]
            session = {**headers, "MCP-Session-Id": sid}
            http.post(url, content=rpc("notifications/initialized", id=None), headers=session)
            call = {"name": "write_file", "arguments": {"path": "flood.txt", "content": "x"}}
            response = http.post(url, content=rpc("tools/call", call, id=3), headers=session)
        assert "Too many open files" not in response.text, response.text
        assert (workspace / "flood.txt").read_text() == "x"
    finally:
        for conn in flood:
            conn.close()
        proc.terminate()
        proc.wait(timeout=30)
        stderr.close()
        if proc.stdout is not None:
            proc.stdout.close()
    said = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in said and "EMFILE" not in said, said[-2000:]
