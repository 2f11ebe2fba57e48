def _raw(port: int, data: bytes, timeout: float = 20.0) -> tuple[bytes, float]:
    """Send ``data`` on a fresh connection; the status line answered and when (or b"")."""
    import socket

    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0], time.monotonic() - started


def test_huge_and_slow_requests_are_cut_off_and_the_page_goes_on(
    workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        port = int(base.split(":")[2].split("/")[0])
        token = base.split("/")[3]
        host = f"127.0.0.1:{port}"
        form = (f"POST /{token}/confirm HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n")  # fmt: skip
        # A megabyte of headers: 431 at once.
        status, _ = _raw(port, f"GET /{token}/ HTTP/1.1\r\nHost: {host}\r\nX: {'a' * (1 << 20)}"
                         "\r\n\r\n".encode())  # fmt: skip
        assert status.startswith(b"HTTP/1.1 431"), status
        # A form body over 64 KiB, declared or streamed: 413, nothing read past the limit.
        status, _ = _raw(port, (form + "Content-Length: 200000\r\n\r\n").encode() + b"a" * 200_000)
        assert status.startswith(b"HTTP/1.1 413"), status
        chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
        status, _ = _raw(port, (form + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunk * 3)
        assert status.startswith(b"HTTP/1.1 413"), status
        # Headers never finished (without the token): the connection is closed within seconds.
        status, took = _raw(port, f"GET /{token}/ HTTP/1.1\r\nHost: {host}\r\n".encode())
        assert status == b"" and took < 15, (status, took)
        # A body promised without the token: refused before a byte of it is awaited.
        status, took = _raw(port, f"POST /x/confirm HTTP/1.1\r\nHost: {host}\r\n"
                            "Content-Length: 60000\r\n\r\n".encode())  # fmt: skip
        assert status.startswith(b"HTTP/1.1 401") and took < 5, (status, took)
        status, _, _ = get(base + "calls")
        assert status == 200  # the page goes on
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert not any(r["kind"] == "review_action" for r in records(events))
