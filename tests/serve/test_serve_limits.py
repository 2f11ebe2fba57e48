"""A client's oversize request: ``ringfence serve`` never holds it, says why, and keeps serving.

Issue 29, finding 7. The real command in a subprocess over stdio (raw JSON-RPC lines on
its pipes, so the test controls every byte): a 256 MiB ``tools/call`` line once took the
server from ~77 MiB to ~842 MiB resident. Now the line is dropped as it streams past
(32 MiB limit, the host side's), answered with a JSON-RPC error naming the limit, and the
next request is served. The server's resident memory is sampled with psutil while the
line is sent, and its peak (``VmHWM``) read at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from serve_helpers import real_command, subprocess_env

from ringfence.serve._defaults import MAX_REQUEST_BYTES

MIB = 1 << 20
SENT_MIB = 256


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[bytes], request_id: Any) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, "the server closed stdout"
        message = json.loads(line)
        if "id" in message and message["id"] == request_id and "method" not in message:
            return message


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_an_oversize_request_line_is_refused_unread_and_the_server_keeps_serving(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    argv = real_command(workspace, events, "--posture", "allow-all")
    stderr = (tmp_path / "serve.stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=subprocess_env(),
    )
    try:
        _send(proc, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "oversize-test", "version": "0"}},
        })  # fmt: skip
        assert _answer(proc, 1)["result"]["protocolVersion"] == "2025-11-25"
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert _answer(proc, 2)["result"]["tools"]
        server = psutil.Process(proc.pid)
        baseline = server.memory_info().rss
        samples: list[int] = []
        sending = threading.Event()
        sending.set()

        def sample() -> None:
            while sending.is_set():
                samples.append(server.memory_info().rss)
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        assert proc.stdin is not None
        try:
            head = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"write_file",'
            proc.stdin.write(head + b'"arguments":{"path":"big.txt","content":"')
            block = b"a" * MIB
            for _ in range(SENT_MIB):
                proc.stdin.write(block)
            proc.stdin.write(b'"}}}\n')
            proc.stdin.flush()
            refused = _answer(proc, 3)
        finally:
            sending.clear()
            sampler.join()
        # Refused by name, to the request's own id; nothing written.
        assert refused["error"]["code"] == -32600
        assert f"{MAX_REQUEST_BYTES:,} bytes" in refused["error"]["message"]
        assert "32 MiB" in refused["error"]["message"]
        assert refused["error"]["data"] == {"max_bytes": MAX_REQUEST_BYTES}
        assert not (workspace / "big.txt").exists()
        # Still serving: the next request is answered.
        _send(proc, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                     "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}})  # fmt: skip
        served = _answer(proc, 4)
        assert not served["result"].get("isError")
        assert "hello from the workspace" in json.dumps(served["result"])
        # Bounded: the peak is the limit's buffer plus change, never the line.
        peak = max(_peak_rss(proc.pid), *samples)
        grew = (peak - baseline) / MIB
        print(f"baseline {baseline / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB")
        assert grew < 96, f"resident memory grew by {grew:.0f} MiB for a {SENT_MIB} MiB line"
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr.close()
    said = (tmp_path / "serve.stderr").read_text()
    assert "larger than ringfence serve's limit" in said and "(id 3)" in said


async def test_an_oversize_http_body_is_refused_unread_and_the_server_keeps_serving(
    workspace: Path, events: Path
) -> None:
    """The same over Streamable HTTP: an authenticated client's 40 MiB body, declared and then
    chunked (no Content-Length), gets 413 with a JSON-RPC error naming the limit."""
    from serve_helpers import bearer_client, http_serve_process
    from test_serve_http import MCP_HEADERS, open_session, rpc

    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    async with http_serve_process(argv) as served, bearer_client(served.token) as http:
        assert served.token is not None
        session = await open_session(http, served.url, served.token)
        headers = {**MCP_HEADERS, "MCP-Session-Id": session}
        content = '{"path": "big.txt", "content": "' + "a" * (40 * MIB) + '"}'
        body = rpc("tools/call", {"name": "write_file", "arguments": {}}, id=7)
        big = body.replace(b'"arguments": {}', b'"arguments": ' + content.encode())

        async def chunked():  # no Content-Length: the limit is counted as the body arrives
            for start in range(0, len(big), MIB):
                yield big[start : start + MIB]

        for sent in (big, chunked()):
            response = await http.post(served.url, content=sent, headers=headers)
            assert response.status_code == 413, response.text[:200]
            error = response.json()["error"]
            assert error["code"] == -32600 and "32 MiB" in error["message"]
            assert error["data"] == {"max_bytes": MAX_REQUEST_BYTES}
        assert not (workspace / "big.txt").exists()
        small = rpc("tools/call", {"name": "read_file", "arguments": {"path": "hello.txt"}}, id=8)
        response = await http.post(served.url, content=small, headers=headers)
        assert response.status_code == 200 and "hello from the workspace" in response.text


def test_a_deeply_nested_request_costs_no_traceback_and_the_server_keeps_serving(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    """A first line of 5,000 nested arrays (8 KiB, far under the size limit): the command's
    early ``initialize`` reader used to crash on it (``RecursionError``, a traceback, the
    server gone). It is not an ``initialize``: the ordinary path reads it, and the client's
    real ``initialize`` after it is answered; so is a nested request later in the session."""
    argv = real_command(workspace, events, "--posture", "allow-all")
    stderr = (tmp_path / "serve.stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=subprocess_env(),
    )
    nested = b"[" * 5000 + b"]" * 5000 + b"\n"
    try:
        assert proc.stdin is not None
        proc.stdin.write(nested)
        proc.stdin.flush()
        _send(proc, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "nested-test", "version": "0"}},
        })  # fmt: skip
        assert _answer(proc, 1)["result"]["protocolVersion"] == "2025-11-25"
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        proc.stdin.write(nested)
        proc.stdin.flush()
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}})  # fmt: skip
        served = _answer(proc, 2)
        assert "hello from the workspace" in json.dumps(served["result"])
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr.close()
    said = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in said and "RecursionError" not in said, said


def test_an_unreadable_line_is_answered_with_a_json_rpc_error_and_the_server_keeps_serving(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    """A batch array, 5,000 levels of nesting, text that is not JSON, a value that is no
    message: each line is answered with JSON-RPC's error to ``null`` (``-32600`` for what is
    JSON but no message, ``-32700`` for what is not JSON), in order, and the next request is
    served. Before, the SDK logged each at debug level and the client waited for ever."""
    argv = real_command(workspace, events, "--posture", "allow-all")
    stderr = (tmp_path / "serve.stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=subprocess_env(),
    )
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": "batched.txt", "content": "x"}}}  # fmt: skip
    unreadable = [
        (json.dumps([call]).encode(), -32600, "batch"),
        (b"[" * 5000 + b"]" * 5000, -32700, "recursion"),
        (b'{"jsonrpc": "2.0", "id": 4, "method": ', -32700, "Parse error"),
        (b'"just a string"', -32600, "Invalid Request"),
    ]
    answers: list[dict[str, Any]] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        _send(proc, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "unreadable-test", "version": "0"}},
        })  # fmt: skip
        assert _answer(proc, 1)["result"]["protocolVersion"] == "2025-11-25"
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        done = threading.Event()

        def read_answers() -> None:
            while len(answers) < len(unreadable):
                line = proc.stdout.readline()
                if not line:
                    break
                answers.append(json.loads(line))
            done.set()

        threading.Thread(target=read_answers, daemon=True).start()
        for line, _code, _word in unreadable:
            proc.stdin.write(line + b"\n\n")  # a blank line after each: nothing to answer
            proc.stdin.flush()
        assert done.wait(20), f"answers so far: {answers}"
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}})  # fmt: skip
        served = _answer(proc, 2)
        assert "hello from the workspace" in json.dumps(served["result"])
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr.close()
    assert len(answers) == len(unreadable), answers
    for answer, (_line, code, word) in zip(answers, unreadable, strict=True):
        assert answer["id"] is None and answer["error"]["code"] == code, answer
        assert word in answer["error"]["message"], answer
    assert not (workspace / "batched.txt").exists()  # the batch was not run
    said = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in said, said


def test_a_request_whose_id_is_no_id_is_answered_and_not_run(
    workspace: Path, events: Path, tmp_path: Path
) -> None:
    """A request whose ``id`` is neither a string nor an integer (``1e400``, ``1.5``, ``true``,
    ``null``, an object): the SDK read it as a *notification* (its ``id`` dropped), so nothing
    answered and the client waited for ever. JSON-RPC's answer is ``-32600`` to ``null``; it is
    given, in order, nothing of the request runs, and the next request is served."""
    argv = real_command(workspace, events, "--posture", "allow-all")
    stderr = (tmp_path / "serve.stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=subprocess_env(),
    )
    ids = [b"1e400", b"1.5", b"true", b"null", b'{"n": 1}']
    answers: list[dict[str, Any]] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        _send(proc, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bad-id-test", "version": "0"}},
        })  # fmt: skip
        assert _answer(proc, 1)["result"]["protocolVersion"] == "2025-11-25"
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        done = threading.Event()

        def read_answers() -> None:
            while len(answers) < len(ids):
                line = proc.stdout.readline()
                if not line:
                    break
                answers.append(json.loads(line))
            done.set()

        threading.Thread(target=read_answers, daemon=True).start()
        for n, bad in enumerate(ids):
            params = {"name": "write_file", "arguments": {"path": f"bad{n}.txt", "content": "x"}}
            line = b'{"jsonrpc": "2.0", "id": ' + bad + b', "method": "tools/call", "params": '
            proc.stdin.write(line + json.dumps(params).encode() + b"}\n")
            proc.stdin.flush()
        assert done.wait(20), f"answers so far: {answers}"
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}})  # fmt: skip
        served = _answer(proc, 2)
        assert "hello from the workspace" in json.dumps(served["result"])
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr.close()
    assert len(answers) == len(ids), answers
    for answer in answers:
        assert answer["id"] is None and answer["error"]["code"] == -32600, answer
        assert "id" in answer["error"]["message"], answer
    assert not list(workspace.glob("bad*.txt"))
    said = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in said, said


async def test_an_http_request_whose_id_is_no_id_is_answered_and_not_run(
    workspace: Path, events: Path
) -> None:
    """The same over Streamable HTTP: a POST of a request whose ``id`` is no JSON-RPC id was
    taken for a notification (``202 Accepted``, no answer ever). Now ``400`` with ``-32600``
    to ``null``; nothing runs, and the session's next request is served."""
    from serve_helpers import bearer_client, http_serve_process
    from test_serve_http import MCP_HEADERS, open_session, rpc

    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    async with http_serve_process(argv) as served, bearer_client(served.token) as http:
        assert served.token is not None
        session = await open_session(http, served.url, served.token)
        headers = {**MCP_HEADERS, "MCP-Session-Id": session}
        for n, bad in enumerate([b"1e400", b"1.5", b"true", b"null", b'{"n": 1}']):
            params = {"name": "write_file", "arguments": {"path": f"bad{n}.txt", "content": "x"}}
            body = b'{"jsonrpc": "2.0", "id": ' + bad + b', "method": "tools/call", "params": '
            response = await http.post(
                served.url, content=body + json.dumps(params).encode() + b"}", headers=headers
            )
            assert response.status_code == 400, (bad, response.status_code, response.text[:200])
            error = response.json()
            assert error["id"] is None and error["error"]["code"] == -32600, error
        good = rpc("tools/call", {"name": "read_file", "arguments": {"path": "hello.txt"}}, id=8)
        response = await http.post(served.url, content=good, headers=headers)
        assert response.status_code == 200 and "hello from the workspace" in response.text
    assert not list(workspace.glob("bad*.txt"))
