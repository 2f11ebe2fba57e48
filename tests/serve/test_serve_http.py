"""``ringfence serve --transport http``: the SDK client over Streamable HTTP, and the request guard.

The guard tests attack a server whose posture would run the call without
asking (allow-all) on an MCP session that was opened legitimately, so the
only thing between the request and a written file is the guard; each checks
the status, that the file was not written, and that the Gate never saw a call.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from serve_helpers import (
    PEER,
    Asker,
    check_test_tools_scenario,
    error_code,
    http_serve_process,
    http_session,
    records,
    serve_in_process,
    text_of,
)

from ringfence.runtime import InvalidArguments, verify_file
from ringfence.serve import HttpOptions
from ringfence.serve._defaults import TOKEN_ENV
from ringfence.serve._http import check_bind

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-11-25",
}


def rpc(method: str, params: dict[str, Any] | None = None, id: int | None = 1) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id is not None:
        message["id"] = id
    return json.dumps(message).encode()


async def open_session(http: httpx2.AsyncClient, url: str, token: str) -> str:
    """initialize + initialized with valid credentials; the MCP session id."""
    auth = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw-http", "version": "0"},
    }
    response = await http.post(url, content=rpc("initialize", init), headers=auth)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    done = await http.post(
        url,
        content=rpc("notifications/initialized", id=None),
        headers={**auth, "MCP-Session-Id": session},
    )
    assert done.status_code == 202
    return session


def write_call(path: str) -> bytes:
    return rpc("tools/call", {"name": "note_file", "arguments": {"path": path, "content": "pwned"}})


ATTACKS = {
    "wrong Host": (421, {"Host": "evil.example:{port}"}),
    "right name, wrong port": (421, {"Host": "127.0.0.1:1"}),
    "wrong Origin": (403, {"Origin": "http://evil.example"}),
    "null Origin": (403, {"Origin": "null"}),
    "missing token": (401, {"Authorization": None}),
    "wrong token": (401, {"Authorization": "Bearer {wrong}"}),
    "token without scheme": (401, {"Authorization": "{token}"}),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_guard_refuses_and_nothing_runs(workspace: Path, attack: str) -> None:
    status, changes = ATTACKS[attack]
    async with serve_in_process(workspace) as served, httpx2.AsyncClient() as http:
        session = await open_session(http, served.url, served.token)
        wrong = served.token[:-1] + ("A" if served.token[-1] != "A" else "B")
        headers = {
            **MCP_HEADERS,
            "Authorization": f"Bearer {served.token}",
            "MCP-Session-Id": session,
        }
        for name, value in changes.items():
            if value is None:
                headers.pop(name)
            else:
                headers[name] = value.format(port=served.port, wrong=wrong, token=served.token)
        refused = await http.post(served.url, content=write_call("attacked.txt"), headers=headers)
        assert refused.status_code == status, refused.text
        if status == 401:
            assert refused.headers["www-authenticate"].startswith("Bearer")
        assert not (workspace / "attacked.txt").exists()
        assert served.proposed() == []
        audit = [r for r in served.sink.records() if r["kind"] == "serve_refused"]
        assert [(r["status"], r["method"], r["path"]) for r in audit] == [(status, "POST", "/mcp")]
        assert served.token not in json.dumps(audit)
        # The same session and call with the right headers does run: the guard was the only stop.
        headers = {
            **MCP_HEADERS,
            "Authorization": f"Bearer {served.token}",
            "MCP-Session-Id": session,
        }
        allowed = await http.post(served.url, content=write_call("control.txt"), headers=headers)
        assert allowed.status_code == 200, allowed.text
        assert (workspace / "control.txt").read_text() == "pwned"
        assert [r["tool"] for r in served.proposed()] == ["note_file"]


async def test_guard_covers_every_path_and_method(workspace: Path) -> None:
    async with serve_in_process(workspace) as served, httpx2.AsyncClient() as http:
        base = served.url.rsplit("/", 1)[0]
        for method, path in [("GET", "/mcp"), ("DELETE", "/mcp"), ("GET", "/"), ("POST", "/x")]:
            response = await http.request(method, base + path)
            assert response.status_code == 401, (method, path)
        evil = await http.get(base + "/", headers={"Host": "evil.example"})
        assert evil.status_code == 421
    assert served.proposed() == []


async def test_loopback_names_and_same_origin_pass(workspace: Path) -> None:
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "x", "version": "0"},
    }
    async with serve_in_process(workspace) as served, httpx2.AsyncClient() as http:
        for host in ("127.0.0.1", "localhost"):
            headers = {
                **MCP_HEADERS,
                "Host": f"{host}:{served.port}",
                "Origin": f"http://{host}:{served.port}",
                "Authorization": f"Bearer {served.token}",
            }
            response = await http.post(served.url, content=rpc("initialize", init), headers=headers)
            assert response.status_code == 200, (host, response.text)


def test_non_loopback_binds_need_a_configured_token_and_tls_in_front() -> None:
    token = HttpOptions.generate_token()
    for host in ("0.0.0.0", "192.0.2.7", "example.com", "::"):
        with pytest.raises(InvalidArguments, match="non-loopback") as refused:
            HttpOptions(token=token, host=host, token_configured=False, behind_tls_proxy=True)
        assert TOKEN_ENV in str(refused.value)
        with pytest.raises(InvalidArguments, match="--behind-tls-proxy"):
            HttpOptions(token=token, host=host, token_configured=True, behind_tls_proxy=False)
        HttpOptions(token=token, host=host, token_configured=True, behind_tls_proxy=True)
    for host in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"):
        check_bind(host, token_configured=False, behind_tls_proxy=False)
    with pytest.raises(InvalidArguments, match="at least 16"):
        HttpOptions(token="short")


def run_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ringfence", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_command_refuses_a_public_bind_before_listening(workspace: Path) -> None:
    public = [
        "--transport",
        "http",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--workspace",
        str(workspace),
    ]
    refused = run_command(*public)
    assert refused.returncode == 2, refused.stderr
    assert "non-loopback" in refused.stderr and TOKEN_ENV in refused.stderr
    assert "serving" not in refused.stderr
    token = {TOKEN_ENV: "x" * 40}
    no_tls = run_command(*public, env=token)
    assert no_tls.returncode == 2 and "--behind-tls-proxy" in no_tls.stderr
    short = run_command("--transport", "http", "--port", "0", env={TOKEN_ENV: "short"})
    assert short.returncode == 2 and TOKEN_ENV in short.stderr


def test_command_reports_a_port_in_use(workspace: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_command(
            "--transport", "http", "--port", str(port), "--workspace", str(workspace)
        )
    assert busy.returncode == 2, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    assert "Traceback" not in busy.stderr


async def test_done_when_over_http_with_the_command(workspace: Path, events: Path) -> None:
    argv = [str(PEER), "serve", "--transport", "http", "--port", "0", "--json"]
    argv += ["--workspace", str(workspace), "--events", str(events)]
    asker = Asker()
    async with http_serve_process(argv) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/mcp")
        assert server.token is not None and len(server.token) >= 32
        async with http_session(server.url, server.token, asker=asker) as client:
            assert client.protocol_version == "2025-11-25"
            await check_test_tools_scenario(client, workspace, asker)
        assert await server.stop() == 0
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems
    assert server.token not in events.read_text()
    assert {r["origin"] for r in records(events) if r["kind"] == "proposed"} == {"mcp", "script"}


async def test_token_from_the_environment(workspace: Path, events: Path) -> None:
    token = "t0ken-" + "k" * 30
    argv = [
        str(PEER),
        "serve",
        "--transport",
        "http",
        "--port",
        "0",
        "--json",
        "--posture",
        "allow-all",
    ]
    argv += ["--workspace", str(workspace), "--events", str(events)]
    async with http_serve_process(argv, env={TOKEN_ENV: token}) as server:
        assert server.token is None  # not printed: the operator chose it
        assert not any(token in line for line in server.stderr_lines)
        async with http_session(server.url, token) as client:
            result = await client.call_tool("note_file", {"path": "e.txt", "content": "env"})
        assert not result.is_error, text_of(result)
        async with httpx2.AsyncClient() as http:
            wrong = await http.post(
                server.url,
                content=rpc("initialize", {}),
                headers={**MCP_HEADERS, "Authorization": "Bearer " + "k" * 36},
            )
        assert wrong.status_code == 401
        assert await server.stop() == 0
    assert (workspace / "e.txt").read_text() == "env"


async def test_client_without_elicitation_over_http_is_refused_with_reason(workspace: Path) -> None:
    async with (
        serve_in_process(workspace, posture="ask") as served,
        http_session(served.url, served.token) as client,
    ):
        result = await client.call_tool("erase_file", {"path": "hello.txt"})
    assert error_code(result) == "denied"
    assert "cannot be asked" in text_of(result)
    assert (workspace / "hello.txt").exists()
