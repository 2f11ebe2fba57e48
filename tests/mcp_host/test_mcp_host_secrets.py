"""Secrets: minimal environment for stdio servers, and a leaky server leaks nothing."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import connect_servers, parse_manifest
from ringfence.runtime import InvalidArguments, MemorySink
from ringfence.runtime._redact import MARKER

SDK_DEFAULT = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "tok-" + secrets.token_hex(12)
    monkeypatch.setenv("RF_TEST_API_TOKEN", value)
    monkeypatch.setenv("RF_TEST_REGION", "eu-west-region")
    monkeypatch.setenv("RF_NOT_PASSED_SECRET", "never-" + secrets.token_hex(8))
    monkeypatch.setenv("RF_NOT_PASSED_PLAIN", "plain-value")
    return value


async def test_stdio_servers_get_only_the_minimal_env_plus_named(make_kernel, token: str) -> None:
    extra = 'inherit_env = ["RF_TEST_API_TOKEN", "RF_TEST_REGION", "RF_UNSET_VARIABLE"]'
    m = manifest(
        py_server("leaky", "secrets_echo.py", extra=extra) + '\n[server.env]\nLOG_STYLE = "plain"\n'
    )
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        out = await kernel.call("mcp.leaky.env_names", {})
        names = set(json.loads(out["text"].splitlines()[1]))
        # Python itself sets LC_CTYPE when it coerces a C locale (PEP 538); it is not from us.
        names.discard("LC_CTYPE")
        assert {"RF_TEST_API_TOKEN", "RF_TEST_REGION", "LOG_STYLE"} <= names
        assert "RF_NOT_PASSED_SECRET" not in names and "RF_NOT_PASSED_PLAIN" not in names
        assert names <= SDK_DEFAULT | {"RF_TEST_API_TOKEN", "RF_TEST_REGION", "LOG_STYLE"}
        await kernel.call("mcp.leaky.echo_env", {"name": "RF_TEST_REGION"})
        # Logging is advertised but not approved here: its messages are not used.
        assert not any(e["source"] == "server" for e in cs["leaky"].diagnostics.logs)
        # A name in inherit_env that is not set is noted, not invented.
        assert any("RF_UNSET_VARIABLE" in f["message"] for f in cs["leaky"].diagnostics.failures)


async def test_an_echoing_server_leaks_no_credential(
    make_kernel, sink: MemorySink, token: str
) -> None:
    extra = 'inherit_env = ["RF_TEST_API_TOKEN", "RF_TEST_REGION"]\napproved_capabilities = ["tools", "logging"]'
    m = manifest(py_server("leaky", "secrets_echo.py", extra=extra))
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        out = await kernel.call("mcp.leaky.echo_env", {"name": "RF_TEST_API_TOKEN"})
        assert token not in json.dumps(out) and MARKER in out["text"]
        # Only credential-named values are secrets: the region is ordinary data.
        region = await kernel.call("mcp.leaky.echo_env", {"name": "RF_TEST_REGION"})
        assert "eu-west-region" in region["text"]
        # The model cannot get it back by asking the server to echo it either.
        echoed = await kernel.call("mcp.leaky.echo", {"text": f"again: {token}"})
        assert token not in echoed["text"]
        described = json.dumps(cs["leaky"].describe())
    assert token not in described
    assert any(
        "leaking RF_TEST_API_TOKEN=" + MARKER in e["text"] for e in cs["leaky"].diagnostics.logs
    )
    assert any("log leak " + MARKER in e["text"] for e in cs["leaky"].diagnostics.logs)
    assert token not in "\n".join(sink.lines)


def test_secrets_never_live_in_the_manifest() -> None:
    text = '[[server]]\nname = "x"\ntransport = "stdio"\ncommand = "x"\n\n[server.env]\nGITHUB_TOKEN = "ghp_abc"\n'
    with pytest.raises(InvalidArguments) as info:
        parse_manifest(text, "m.toml")
    assert info.value.field == "env.GITHUB_TOKEN"
    assert "m.toml:7" in info.value.message and "inherit_env" in info.value.message
    assert "ghp_abc" not in info.value.message


async def test_http_header_credentials_are_redacted(
    make_kernel, sdk_http, monkeypatch: pytest.MonkeyPatch
) -> None:
    bearer = "bearer-" + secrets.token_hex(10)
    password = "pw-" + secrets.token_hex(10)
    basic = base64.b64encode(f"ada:{password}".encode()).decode()
    monkeypatch.setenv("RF_TEST_BEARER", bearer)
    monkeypatch.setenv("RF_TEST_BASIC", f"Basic {basic}")
    url = await sdk_http("annotated")
    text = (
        f'[[server]]\nname = "remote"\ntransport = "http"\nurl = "{url}?key=query-{bearer[-8:]}abc"\n'
        'api_key_env = "RF_TEST_BEARER"\nread_only_tools = ["request_headers"]\n\n[server.headers_env]\nX-Api-Token = "RF_TEST_BASIC"\n'
    )
    async with make_kernel() as kernel, connect_servers(kernel, manifest(text)) as cs:
        out = await kernel.call("mcp.remote.request_headers", {})
        assert f"authorization={MARKER}" in out["text"] and f"x-api-token={MARKER}" in out["text"]
        assert (
            bearer not in out["text"] and basic not in out["text"] and password not in out["text"]
        )
        assert "<query not shown>" in cs["remote"].target
        assert "query-" not in json.dumps(cs["remote"].describe())


async def test_a_missing_credential_variable_is_unavailable(
    make_kernel, sdk_http, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RF_TEST_MISSING", raising=False)
    url = await sdk_http("annotated")
    text = f'[[server]]\nname = "remote"\ntransport = "http"\nurl = "{url}"\napi_key_env = "RF_TEST_MISSING"\n'
    async with make_kernel() as kernel, connect_servers(kernel, manifest(text)) as cs:
        error = cs.failures["remote"]
        assert error.code == "unavailable" and "RF_TEST_MISSING" in error.message
        assert url not in error.message
