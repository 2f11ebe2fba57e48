"""``ringfence mcp add --auth oauth``, ``mcp login`` (loopback redirect, the test plays the browser),
``mcp list`` (login state without a token) and ``mcp logout``, as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx2
import trio
from mcp_host_helpers import PYTHON, _read_line
from test_mcp_host_oauth import bearer_values, home, oauth_server, server_log  # noqa: F401

CLI = [PYTHON, "-c", "import sys; from ringfence.cli import main; sys.exit(main(sys.argv[1:]))"]


async def cli(where: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "RINGFENCE_HOME": str(where), "RINGFENCE_NO_KEYRING": "1"}
    return await trio.run_process(
        [*CLI, *argv], capture_stdout=True, capture_stderr=True, env=env, check=False
    )


async def test_login_list_logout_through_the_cli(home: Path, oauth_server) -> None:  # noqa: F811
    url = await oauth_server()
    added = await cli(
        home, "mcp", "add", "prot", "--transport", "http", "--url", url,
        "--auth", "oauth", "--scope", "read", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert 'auth = "oauth"' in (home / "mcp.toml").read_text()

    env = {**os.environ, "RINGFENCE_HOME": str(home), "RINGFENCE_NO_KEYRING": "1"}
    proc = await trio.lowlevel.open_process(
        [*CLI, "mcp", "login", "prot", "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        auth_url = (await _read_line(proc.stdout, b"/authorize?")).decode().strip()
        async with httpx2.AsyncClient() as browser:  # the test plays the browser
            approved = await browser.get(auth_url)
            assert approved.status_code == 302
            landing = approved.headers["location"]
            assert landing.startswith("http://127.0.0.1:") and "/callback?" in landing
            page = await browser.get(landing)
            assert page.status_code == 200 and "close this window" in page.text
        with trio.fail_after(20):
            assert await proc.wait() == 0
        rest = (await proc.stdout.receive_some(65536)).decode()
        assert "logged in" in rest and "scopes read" in rest
    finally:
        proc.kill()
        await proc.wait()

    (token,) = set(bearer_values(await server_log(url)))
    listed = await cli(home, "mcp", "list", "--json")
    result = json.loads(listed.stdout)["result"]
    assert result["token_store"] == f"key file {home / 'keys' / 'mcp-oauth.key'}"
    state = result["servers"][0]["auth"]
    assert state["logged_in"] and state["scopes"] == ["read"] and state["refreshable"]
    text = await cli(home, "mcp", "list")
    assert b"oauth: logged in, expires" in text.stdout
    for out in (listed, text):
        assert token.encode() not in out.stdout + out.stderr

    out = await cli(home, "mcp", "logout", "prot")
    assert out.returncode == 0 and b"tokens deleted" in out.stdout
    after = json.loads((await cli(home, "mcp", "list", "--json")).stdout)
    assert after["result"]["servers"][0]["auth"]["logged_in"] is False


async def test_add_refuses_oauth_flags_without_auth_oauth(home: Path) -> None:  # noqa: F811
    out = await cli(
        home, "mcp", "add", "x", "--transport", "http", "--url", "https://x.example/mcp",
        "--client-id", "abc", "--json",
    )  # fmt: skip
    assert out.returncode == 2
    assert "--client-id needs --auth oauth" in json.loads(out.stdout)["error"]["message"]
    assert not (home / "mcp.toml").exists()
