"""``ringfence mcp add --auth oauth``, ``mcp login`` (loopback redirect, the test plays the browser),
``mcp list`` (login state without a token) and ``mcp logout``, as subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import httpx2
import pytest
import trio
from mcp_host_helpers import PYTHON, _read_line
from test_mcp_host_oauth import (  # noqa: F401
    bearer_values,
    home,
    oauth_server,
    server_log,
    xaa_block,
)

CLI = [PYTHON, "-c", "import sys; from ringfence.cli import main; sys.exit(main(sys.argv[1:]))"]


async def cli(where: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "RINGFENCE_HOME": str(where), "RINGFENCE_NO_KEYRING": "1"}
    return await trio.run_process(
        [*CLI, *argv], capture_stdout=True, capture_stderr=True, env=env, check=False
    )


@pytest.mark.slow
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


def xaa_flags(url: str) -> list[str]:
    issuer = url.removesuffix("/mcp")
    return [
        "--transport", "http", "--url", url, "--auth", "oauth",
        "--oauth-grant", "identity_assertion", "--client-id", "xaa",
        "--client-secret-env", "XAA_SECRET", "--oauth-issuer", issuer,
        "--idp-token-endpoint", f"{issuer}/idp/token", "--idp-client-id", "idp-client",
        "--idp-id-token-env", "XAA_ID_TOKEN",
    ]  # fmt: skip


async def test_add_writes_the_identity_assertion_keys_and_checks_them(home: Path) -> None:  # noqa: F811
    from ringfence.mcp_host import load_manifest

    url = "https://x.example/mcp"
    out = await cli(home, "mcp", "add", "xaa", *xaa_flags(url), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    config = load_manifest(home / "mcp.toml").get("xaa")
    assert config.oauth_grant == "identity_assertion"
    assert (config.idp_token_endpoint, config.idp_client_id, config.idp_id_token_env) == (
        "https://x.example/idp/token", "idp-client", "XAA_ID_TOKEN",
    )  # fmt: skip
    assert config.idp_client_secret_env is None
    before = (home / "mcp.toml").read_text()

    refusals = {
        # a key the grant needs is missing (the manifest's own check, naming the key)
        "idp_id_token_env": xaa_flags(url)[:-2],
        # an idp flag with another grant
        "only applies with": [*xaa_flags(url)[:7], "authorization_code", "--idp-client-id", "c"],
        # an idp flag without --auth oauth
        "--idp-client-id needs --auth oauth": [
            "--transport", "http", "--url", url, "--idp-client-id", "c",
        ],
    }  # fmt: skip
    for text, flags in refusals.items():
        out = await cli(home, "mcp", "add", "other", *flags, "--json")
        assert out.returncode == 2, (text, out.stdout, out.stderr)
        assert text in json.loads(out.stdout)["error"]["message"], (text, out.stdout)
    assert (home / "mcp.toml").read_text() == before  # nothing written by a refused add


async def test_login_with_identity_assertion_opens_no_listener(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
    monkeypatch,
) -> None:
    url = await oauth_server()
    monkeypatch.setenv("XAA_SECRET", "xaa-secret")
    monkeypatch.setenv("XAA_ID_TOKEN", "id-token-of-the-enterprise-user")
    home.mkdir(parents=True, exist_ok=True)
    (home / "mcp.toml").write_text(xaa_block(url))
    # The login port is taken: a loopback listener could not be opened, and none is needed.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        out = await cli(home, "mcp", "login", "prot", "--port", port, "--no-browser")
    assert out.returncode == 0, out.stdout + out.stderr
    assert b"logged in" in out.stdout and b"open this URL" not in out.stdout + out.stderr
    grants = [g["grant"] for g in (await server_log(url))["grants"]]
    assert grants == ["token_exchange", "jwt_bearer"]


async def test_login_on_a_taken_port_names_the_port_and_stores_nothing(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
) -> None:
    url = await oauth_server()
    added = await cli(
        home, "mcp", "add", "prot", "--transport", "http", "--url", url, "--auth", "oauth",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = await cli(home, "mcp", "login", "prot", "--port", str(port), "--no-browser", "--json")
    error = json.loads(out.stdout)["error"]
    assert out.returncode != 0 and error["code"] == "unavailable", out.stdout
    assert f"127.0.0.1:{port}" in error["message"] and "--port" in error["message"]
    assert "cannot use a file" not in error["message"]
    assert not list(home.glob("oauth/*.sealed"))
