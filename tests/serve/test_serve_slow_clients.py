"""Clients that send their request body slowly, or promise big ones, over Streamable HTTP.

An authenticated client once held a connection and everything it had sent for as long as it
liked: ``ringfence serve`` read an admitted body with no deadline and no bound on how many
were being read at once (20 connections promising 32 MiB and sending 8 MiB each took the
server from 84 to 245 MiB resident, and nothing ever let it go; a hundred such clients, 3 GiB).
Now a body must be whole within ``body_seconds`` of its headers (408 with a JSON-RPC error
naming the limit), the bodies being read at once hold at most 128 MiB together (a declared
length counted before a byte arrives) and number at most 64 (503 at once past either), and the
server keeps serving. Each test checks that nothing the cut-off requests carried ran.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import trio
from serve_helpers import (
    bearer_client,
    http_serve_process,
    real_command,
    serve_in_process,
)
from test_serve_http import MCP_HEADERS, open_session, rpc

from ringfence.serve._defaults import (
    MAX_PENDING_BODIES,
    MAX_PENDING_BODY_BYTES,
    MAX_REQUEST_BYTES,
)

MIB = 1 << 20


def _head(port: int, token: str, session: str, length: int) -> bytes:
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: {session}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def _status_and_body(stream: trio.SocketStream) -> tuple[bytes, dict]:
    """The response's status line and its JSON body (the server closes the connection)."""
    answer = b""
    while chunk := await stream.receive_some(65536):
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], json.loads(body)


async def test_a_trickled_body_is_cut_off_at_its_deadline_and_nothing_runs(
    workspace: Path,
) -> None:
    """A ``tools/call`` whose body stops short of its Content-Length: 408 after
    ``body_seconds``, naming the limit; the call never reaches the Gate; the server goes on."""
    async with (
        serve_in_process(workspace, body_seconds=2.0) as served,
        bearer_client(served.token) as http,
    ):
        session = await open_session(http, served.url, served.token)
        call = rpc(
            "tools/call",
            {"name": "note_file", "arguments": {"path": "slow.txt", "content": "x"}},
            id=5,
        )
        stream = await trio.open_tcp_stream("127.0.0.1", served.port)
        started = trio.current_time()
        await stream.send_all(_head(served.port, served.token, session, len(call)))
        await stream.send_all(call[:-3])  # all but the last bytes, then nothing more
        with trio.fail_after(15):
            status, body = await _status_and_body(stream)
        took = trio.current_time() - started
        await stream.aclose()
        assert status.startswith(b"HTTP/1.1 408"), status
        assert 1.5 < took < 10, took
        error = body["error"]
        assert error["code"] == -32600 and "2 s" in error["message"], error
        assert error["data"] == {"max_seconds": 2.0}
        assert not (workspace / "slow.txt").exists()
        assert not [r for r in served.proposed() if r.get("tool") == "note_file"]
        # The server keeps serving, on the same session.
        response = await http.post(
            served.url,
            content=rpc("tools/call", {"name": "peek_file", "arguments": {"path": "hello.txt"}}, 6),
            headers={**MCP_HEADERS, "MCP-Session-Id": session},
        )
        assert response.status_code == 200 and "hello" in response.text


async def test_bodies_promised_at_once_hold_at_most_their_bound_and_the_server_goes_on(
    workspace: Path, events: Path
) -> None:
    """Through the real command: 20 clients promising 31 MiB each and sending 8 MiB are held
    only up to the pending-body bound (128 MiB: four of them); each newer one cuts the oldest
    off (503, unread, naming the bound); resident memory grows ~33 MiB (160 MiB before, all
    of it held for ever); a working client's call is served while the newest four are still
    trickling. (A MiB under the 32 MiB the running requests' bodies may hold together: a
    promise of all 32 MiB was refused by that bound while the session's own first requests
    were still running, a CI flake.)"""
    promised = MAX_REQUEST_BYTES - MIB
    admitted = MAX_PENDING_BODY_BYTES // promised
    clients = admitted + 16
    assert clients < MAX_PENDING_BODIES
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    async with http_serve_process(argv) as served, bearer_client(served.token) as http:
        assert served.token is not None
        port = int(served.url.split(":")[2].split("/")[0])
        session = await open_session(http, served.url, served.token)
        server = psutil.Process(served.process.pid)
        baseline = server.memory_info().rss
        streams: list[trio.SocketStream] = []
        for _ in range(clients):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            streams.append(stream)
            await stream.send_all(_head(port, served.token, session, promised))
            try:
                with trio.move_on_after(5):
                    await stream.send_all(b"a" * (8 * MIB))
            except trio.BrokenResourceError:
                pass  # cut off and closed while it was still sending
        grown = server.memory_info().rss - baseline
        # 8 MiB sent by each of `clients`: before, every byte of it was held.
        assert grown < (admitted + 2) * 8 * MIB + 40 * MIB, grown / MIB
        answers: list[tuple[bytes, dict] | None] = []
        for stream in streams:
            answer = None
            with trio.move_on_after(0.5):
                answer = await _status_and_body(stream)
            answers.append(answer)
        # The oldest were cut off to make room; the newest are still being read.
        assert all(a is not None for a in answers[: clients - admitted]), answers
        assert all(a is None for a in answers[clients - admitted :]), answers
        status, body = answers[0]  # type: ignore[misc]
        assert status.startswith(b"HTTP/1.1 503"), status
        error = body["error"]
        assert error["code"] == -32600 and "128 MiB" in error["message"], error
        assert error["data"]["max_pending_bytes"] == MAX_PENDING_BODY_BYTES
        # A working client's request is read (the oldest trickle makes room) and served.
        response = await http.post(
            served.url,
            content=rpc("tools/call", {"name": "read_file", "arguments": {"path": "hello.txt"}}, 9),
            headers={**MCP_HEADERS, "MCP-Session-Id": session},
        )
        assert response.status_code == 200, response.text[:300]
        assert "hello from the workspace" in response.text, response.text[:300]
        for stream in streams:
            await stream.aclose()
        await served.stop()
    said = "\n".join(served.stderr_lines)
    assert "Traceback" not in said, said[-3000:]


def test_open_requests_leave_the_kernel_its_file_descriptors(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    """Through the real command under an open-file limit of 128: clients holding 150 GET
    streams (one per session) took every descriptor, so the kernel's own ``write_file``
    failed (``EMFILE`` opening its checkpoint store) and accepting looped on EMFILE. Admitted
    requests are now at most half the open-file limit (64 here): past it a request is
    answered 503 at once, naming the limit; the process keeps descriptors for the kernel,
    and once the streams close a call writes its file."""
    import os
    import resource
    import socket
    import subprocess
    import sys

    import httpx2
    from serve_helpers import subprocess_env

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
    streams: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        announced = json.loads(proc.stdout.readline())["result"]
        url, token = announced["url"], announced["token"]
        port = int(url.split(":")[2].split("/")[0])
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "fd-test", "version": "0"},
        }
        refused: list[dict] = []
        with httpx2.Client(timeout=20) as http:

            def session() -> str | None:
                response = http.post(url, content=rpc("initialize", init), headers=headers)
                if response.status_code == 503:
                    refused.append(response.json())
                    return None
                sid = response.headers["mcp-session-id"]
                http.post(
                    url,
                    content=rpc("notifications/initialized", id=None),
                    headers={**headers, "MCP-Session-Id": sid},
                )
                return sid

            for _ in range(150):
                sid = session()
                if sid is None:
                    continue
                stream = socket.create_connection(("127.0.0.1", port))
                stream.sendall(
                    f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer "
                    f"{token}\r\nAccept: text/event-stream\r\nMCP-Protocol-Version: 2025-11-25"
                    f"\r\nMcp-Session-Id: {sid}\r\n\r\n".encode()
                )
                streams.append(stream)
            assert refused, "no request was refused"
            error = refused[0]["error"]
            assert error["code"] == -32600 and error["data"] == {"max_open_requests": 64}, error
            assert len(os.listdir(f"/proc/{proc.pid}/fd")) < 110
            for stream in streams:
                stream.close()
            streams.clear()
            written = None
            deadline = time.monotonic() + 15
            while written is None and time.monotonic() < deadline:
                sid = session()
                if sid is None:
                    time.sleep(0.2)
                    continue
                call = {"name": "write_file", "arguments": {"path": "fd.txt", "content": "x"}}
                response = http.post(
                    url,
                    content=rpc("tools/call", call, id=3),
                    headers={**headers, "MCP-Session-Id": sid},
                )
                written = response.text
        assert written is not None and "Too many open files" not in written, written
        assert (workspace / "fd.txt").read_text() == "x"
    finally:
        for stream in streams:
            stream.close()
        proc.terminate()
        proc.wait(timeout=20)
        stderr.close()
        if proc.stdout is not None:
            proc.stdout.close()
    said = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in said and "EMFILE" not in said, said[-2000:]
