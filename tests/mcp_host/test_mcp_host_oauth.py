"""OAuth 2.1 against an in-repo authorization server + protected MCP server (the SDK's server auth).

The test plays the browser: it follows the authorization URL with an HTTP client
to the auto-approving authorization server and hands the redirect's code and
state back. The server records every Authorization header it received, so
"never sent" is checked on the server's side of the wire.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
import trio
from mcp.shared.auth import AuthorizationCodeResult
from mcp.shared.auth_utils import resource_url_from_server_url
from mcp_host_helpers import PYTHON, SERVERS, _read_line, _stop, manifest, non_loopback_address

from ringfence.mcp_host import connect_servers, parse_manifest
from ringfence.mcp_host.oauth._login import login
from ringfence.mcp_host.oauth._provider import (
    MAX_STEP_UPS,
    LoginFlow,
    auth_status,
    build_auth,
    login_flow,
)
from ringfence.mcp_host.oauth._tokens import SealedStore
from ringfence.runtime import ApprovalAnswer, Denied, InvalidArguments, Unavailable, use_places
from ringfence.runtime._redact import Redactor

REDIRECT = "http://127.0.0.1:9/callback"  # never contacted: the test browser stops at the redirect


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    h = tmp_path / "rfhome"
    monkeypatch.setenv("RINGFENCE_HOME", str(h))  # for a command-line child
    monkeypatch.setenv("RINGFENCE_NO_KEYRING", "1")
    with use_places(home=h):
        yield h


@pytest.fixture
async def oauth_server() -> AsyncIterator[Callable[..., object]]:
    """Start tests/mcp_host/servers/oauth_serve.py; returns the MCP URL."""
    procs: list[trio.Process] = []

    async def start(**env: str) -> str:
        proc = await trio.lowlevel.open_process(
            [PYTHON, str(SERVERS / "oauth_serve.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
        procs.append(proc)
        port = int((await _read_line(proc.stdout)).strip())
        return f"http://127.0.0.1:{port}/mcp"

    try:
        yield start
    finally:
        for p in procs:
            await _stop(p)


async def server_log(url: str) -> dict:
    async with httpx2.AsyncClient() as c:
        r = await c.get(url.replace("/mcp", "/test/log"))
    return r.json()


class Browser:
    """Follows the authorization URL to the auto-approving server and reads the redirect."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    async def redirect(self, url: str) -> None:
        self.urls.append(url)

    async def callback(self) -> AuthorizationCodeResult:
        async with httpx2.AsyncClient() as c:
            r = await c.get(self.urls[-1])
        assert r.status_code == 302, r.text
        q = parse_qs(urlsplit(r.headers["location"]).query)
        return AuthorizationCodeResult(
            code=q["code"][0], state=q["state"][0], iss=q.get("iss", [None])[0]
        )

    def flow(self) -> LoginFlow:
        return LoginFlow(REDIRECT, self.redirect, self.callback)


def block(url: str, extra: str = "") -> str:
    return (
        f'[[server]]\nname = "prot"\ntransport = "http"\nurl = "{url}"\nauth = "oauth"\n{extra}\n'
    )


def bearer_values(log: dict) -> list[str]:
    return [h[7:] for h in log["authorization"] if h and h.startswith("Bearer ")]


async def test_login_then_a_tool_call_with_the_sealed_token(
    home: Path, oauth_server, make_kernel, sink
) -> None:
    url = await oauth_server()
    config = manifest(block(url)).servers[0]
    browser = Browser()
    status = await login(config, Redactor(), browser.flow())
    assert status["logged_in"] and status["scopes"] == ["read"] and status["refreshable"]
    auth_url = browser.urls[0]
    q = parse_qs(urlsplit(auth_url).query)
    assert q["code_challenge_method"] == ["S256"] and q["resource"] == [url]  # PKCE, RFC 8707
    # Sealed at rest: the key file is 0600; neither token appears in any file under the home.
    (token,) = set(bearer_values(await server_log(url)))
    assert (home / "keys" / "mcp-oauth.key").stat().st_mode & 0o777 == 0o600
    for f in home.rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes()
            assert f.stat().st_mode & 0o077 == 0

    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert not cs.failures
        out = await kernel.call("mcp.prot.whoami", {})
        assert "hello, authorized caller" in out["text"]
    # The token never reaches the event stream, and no interactive login happened in the session.
    assert token not in json.dumps(sink.records())
    assert len(browser.urls) == 1


async def test_a_session_without_a_login_names_the_login_command(
    home: Path, oauth_server, make_kernel
) -> None:
    url = await oauth_server()
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block(url))) as cs:
        error = cs.failures["prot"]
        assert "ringfence mcp login prot" in error.message, error.message
    assert bearer_values(await server_log(url)) == []


async def test_an_expired_token_is_refreshed_before_use(
    home: Path, oauth_server, make_kernel
) -> None:
    url = await oauth_server(RF_OAUTH_TTL="1")
    config = manifest(block(url)).servers[0]
    await login(config, Redactor(), Browser().flow())
    before = await server_log(url)
    first = set(bearer_values(before))
    await trio.sleep(1.2)  # the stored expiry (1 s) passes; the SDK alone would forget it
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert not cs.failures, cs.failures
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    log = await server_log(url)
    assert [g["grant"] for g in log["grants"]] == ["authorization_code", "refresh_token"]
    # The expired token was never sent again after it expired: only the refreshed one was.
    later = bearer_values({"authorization": log["authorization"][len(before["authorization"]) :]})
    assert later and not set(later) & first
    assert auth_status(config)["logged_in"]


async def test_step_up_on_insufficient_scope(home: Path, oauth_server, make_kernel) -> None:
    url = await oauth_server()
    config = manifest(block(url)).servers[0]
    await login(config, Redactor(), Browser().flow())
    browser = Browser()
    kernel = make_kernel([ApprovalAnswer.once(), ApprovalAnswer.once()])
    with login_flow(browser.flow()):
        async with kernel, connect_servers(kernel, manifest(block(url))):
            out = await kernel.call("mcp.prot.write_note", {"text": "hi"})
            assert "wrote hi" in out["text"]
    (auth_url,) = browser.urls
    assert parse_qs(urlsplit(auth_url).query)["scope"] == ["read write"]
    assert auth_status(config)["scopes"] == ["read", "write"]


async def test_step_up_without_a_login_flow_is_refused_naming_the_login(
    home: Path, oauth_server, make_kernel
) -> None:
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))):
        with trio.fail_after(20):
            out = await kernel.invoke("mcp.prot.write_note", {"text": "hi"})
    assert not out.ok
    assert "ringfence mcp login prot" in out.error.message, out.error.message
    assert [g["grant"] for g in (await server_log(url))["grants"]] == ["authorization_code"]


async def test_a_wrong_audience_token_is_never_stored_or_sent(home: Path, oauth_server) -> None:
    url = await oauth_server(RF_OAUTH_AUD="https://other.example/mcp")
    config = manifest(block(url)).servers[0]
    with pytest.raises(Denied) as caught:
        await login(config, Redactor(), Browser().flow())
    assert "another audience" in caught.value.message
    log = await server_log(url)
    assert log["grants"][0]["grant"] == "authorization_code"  # it was issued ...
    assert bearer_values(log) == []  # ... and never presented
    assert not auth_status(config)["logged_in"]


async def test_a_token_for_another_url_is_never_sent(home: Path, oauth_server, make_kernel) -> None:
    first = await oauth_server()
    await login(manifest(block(first)).servers[0], Redactor(), Browser().flow())
    (token,) = set(bearer_values(await server_log(first)))
    # The manifest entry now points at another server: the sealed token is bound to the first.
    second = await oauth_server()
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block(second))) as cs:
        assert "ringfence mcp login prot" in cs.failures["prot"].message
    assert bearer_values(await server_log(second)) == []
    assert auth_status(manifest(block(second)).servers[0])["logged_in"] is False
    assert token


async def test_a_tampered_record_does_not_open(home: Path, oauth_server, make_kernel) -> None:
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    sent_at_login = len(bearer_values(await server_log(url)))
    path = SealedStore(home).path("prot")
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 1
    path.write_bytes(bytes(blob))
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert "do not open" in cs.failures["prot"].message
    assert len(bearer_values(await server_log(url))) == sent_at_login  # nothing more was sent


async def test_step_ups_are_bounded(home: Path, oauth_server, make_kernel) -> None:
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    browser = Browser()
    kernel = make_kernel([ApprovalAnswer.once() for _ in range(3)])
    with login_flow(browser.flow()):
        async with kernel, connect_servers(kernel, manifest(block(url))):
            outcomes = [await kernel.invoke("mcp.prot.stubborn", {}) for _ in range(3)]
    assert not any(o.ok for o in outcomes), [(o.ok, o.error, o.value) for o in outcomes]
    assert len(browser.urls) == MAX_STEP_UPS  # the third challenge prompted nobody
    assert f"after {MAX_STEP_UPS} step-ups" in outcomes[2].error.message


async def test_a_token_the_server_echoes_is_redacted(
    home: Path, oauth_server, make_kernel, sink
) -> None:
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    (token,) = set(bearer_values(await server_log(url)))
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))):
        out = await kernel.call("mcp.prot.echo_token", {})
    assert "your token is" in out["text"] and token not in out["text"]
    assert token not in json.dumps(sink.records())


async def test_preregistered_client_does_not_register(
    home: Path, oauth_server, make_kernel
) -> None:
    url = await oauth_server()
    config = manifest(block(url, 'client_id = "pre-public"')).servers[0]
    browser = Browser()
    status = await login(config, Redactor(), browser.flow())
    assert status["logged_in"]
    assert parse_qs(urlsplit(browser.urls[0]).query)["client_id"] == ["pre-public"]
    assert (await server_log(url))["registrations"] == []


async def test_client_credentials_machine_to_machine(
    home: Path, oauth_server, make_kernel, sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await oauth_server()
    monkeypatch.setenv("M2M_SECRET", "m2m-secret")
    extra = (
        'client_id = "m2m"\nclient_secret_env = "M2M_SECRET"\n'
        'oauth_grant = "client_credentials"\nscopes = ["read"]'
    )
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url, extra))) as cs:
        assert not cs.failures, cs.failures
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    log = await server_log(url)
    assert [g["grant"] for g in log["grants"]] == ["client_credentials"]
    assert log["grants"][0]["resource"] == url
    assert "m2m-secret" not in json.dumps(sink.records())


async def test_client_credentials_with_a_missing_secret_names_the_variable(
    home: Path, oauth_server, make_kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await oauth_server()
    monkeypatch.delenv("M2M_SECRET", raising=False)
    extra = (
        'client_id = "m2m"\nclient_secret_env = "M2M_SECRET"\noauth_grant = "client_credentials"'
    )
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block(url, extra))) as cs:
        assert "M2M_SECRET" in cs.failures["prot"].message
    assert (await server_log(url))["grants"] == []


async def test_a_rejected_token_is_refreshed_once_not_sent_to_a_login(
    home: Path, oauth_server, make_kernel
) -> None:
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    async with httpx2.AsyncClient() as c:
        await c.post(url.replace("/mcp", "/test/revoke-access"))
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert not cs.failures, cs.failures
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    grants = [g["grant"] for g in (await server_log(url))["grants"]]
    assert grants == ["authorization_code", "refresh_token"]


async def test_metadata_for_another_resource_is_refused_without_repeating_the_url(
    home: Path, oauth_server
) -> None:
    url = await oauth_server(RF_OAUTH_PRM_RESOURCE="https://evil.example/mcp")
    config = manifest(block(url + "?key=hunter2-query-secret")).servers[0]
    browser = Browser()
    with pytest.raises(Unavailable) as caught:
        await login(config, Redactor(), browser.flow())
    message = caught.value.message
    assert "does not match" in message and "ringfence mcp login prot" in message
    assert "hunter2-query-secret" not in message and "127.0.0.1" not in message
    assert browser.urls == []  # no authorization was started for the lying server
    assert (await server_log(url))["grants"] == []


async def test_fallback_metadata_with_an_issuer_on_the_same_origin_is_used(
    home: Path, oauth_server
) -> None:
    # 2025-03-26: no protected-resource metadata, so the MCP server's origin is the
    # authorization base; its metadata may name an issuer under it (here "<origin>/oauth").
    url = await oauth_server(RF_OAUTH_NO_PRM="1", RF_OAUTH_METADATA_ISSUER="{base}/oauth")
    config = manifest(block(url)).servers[0]
    status = await login(config, Redactor(), Browser().flow())
    assert status["logged_in"]
    log = await server_log(url)
    assert "/.well-known/oauth-authorization-server" in log["discovery"]
    assert [g["grant"] for g in log["grants"]] == ["authorization_code"]


async def test_fallback_metadata_naming_another_origin_is_refused_and_nothing_goes_there(
    home: Path, oauth_server
) -> None:
    other = await oauth_server()  # a working authorization server on another origin
    other_base = other.removesuffix("/mcp")
    url = await oauth_server(
        RF_OAUTH_NO_PRM="1", RF_OAUTH_METADATA_ISSUER=other_base, RF_OAUTH_ENDPOINTS=other_base
    )
    browser = Browser()
    with pytest.raises(Unavailable) as caught:
        await login(manifest(block(url)).servers[0], Redactor(), browser.flow())
    assert "issuer mismatch" in caught.value.message, caught.value.message
    assert browser.urls == []  # no authorization was started
    assert (await server_log(other))["requests"] == []  # no registration, no token request
    assert (await server_log(url))["grants"] == []


async def test_rfc9728_metadata_with_another_issuer_on_the_same_origin_is_refused(
    home: Path, oauth_server
) -> None:
    # With protected-resource metadata naming the issuer, RFC 8414 §3.3's exact match stands.
    url = await oauth_server(RF_OAUTH_METADATA_ISSUER="{base}/oauth")
    browser = Browser()
    with pytest.raises(Unavailable) as caught:
        await login(manifest(block(url)).servers[0], Redactor(), browser.flow())
    assert "issuer mismatch" in caught.value.message, caught.value.message
    assert browser.urls == []
    log = await server_log(url)
    assert log["grants"] == [] and log["registrations"] == []
    assert not any(r.endswith(("/register", "/token")) for r in log["requests"])


def test_the_auth_keys_are_checked_together() -> None:
    base = '[[server]]\nname = "s"\ntransport = "http"\nurl = "https://x.example/mcp"\n'
    bad = {
        'auth = "bearer"': "needs api_key_env",
        'auth = "oauth"\napi_key_env = "T"': "conflicts",
        'client_id = "x"': 'only applies with auth = "oauth"',
        'auth = "oauth"\noauth_grant = "client_credentials"': "client_credentials needs",
        'auth = "oauth"\nclient_secret_env = "S"': "needs its client_id",
        'auth = "oauth"\nscopes = ["a b"]': "not a scope token",
        'auth = "oauth"\nclient_metadata_url = "http://x.example/c.json"': "https URL",
        'auth = "oauth"\nclient_id = "c"\nclient_key_env = "K"': "only applies with oauth_grant",
    }
    for extra, expected in bad.items():
        with pytest.raises(InvalidArguments) as caught:
            manifest(base + extra)
        assert expected in caught.value.message, (extra, caught.value.message)
    stdio = '[[server]]\nname = "s"\ntransport = "stdio"\ncommand = "/bin/true"\nauth = "oauth"\n'
    with pytest.raises(InvalidArguments, match="only applies to http and sse"):
        manifest(stdio)


async def test_a_stored_token_for_another_audience_is_not_attached(
    home: Path, oauth_server, make_kernel
) -> None:
    import base64

    url = await oauth_server()

    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    foreign = ".".join(
        [part({"alg": "none"}), part({"aud": "https://other.example/mcp", "sub": "x"}), "sig"]
    )
    # A record for this URL whose token names another audience (e.g. written by an older
    # version, or a mix-up at the authorization server): the send path refuses it too.
    SealedStore(home).save(
        "prot",
        {"v": 1, "resource": url, "tokens": {"access_token": foreign, "token_type": "Bearer"}},
    )
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert "ringfence mcp login prot" in cs.failures["prot"].message
    log = await server_log(url)
    assert log["authorization"] and bearer_values(log) == []


async def test_a_cached_token_is_sent_at_once_without_discovery_or_a_grant(
    home: Path, oauth_server, make_kernel
) -> None:
    """The path `ringfence bench mcp-oauth` measures: a later session's first request carries
    the sealed token; no 401 round trip, no metadata discovery, no grant, no registration."""
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    before = await server_log(url)
    assert before["discovery"]  # the login itself discovered the metadata
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert not cs.failures, cs.failures
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    after = await server_log(url)
    for key in ("discovery", "grants", "registrations"):
        assert after[key] == before[key], key
    session = after["authorization"][len(before["authorization"]) :]
    assert session and all(h and h.startswith("Bearer ") for h in session)


async def test_requests_with_a_valid_cached_token_do_not_wait_for_each_other(home: Path) -> None:
    """With a valid token in hand no request waits for another one's response (the SDK's lock
    alone serializes the transport's GET stream and POSTs: a round trip more per connect)."""
    url = "http://127.0.0.1:9/mcp"  # never contacted: the test answers for the server
    SealedStore(home).save(
        "prot",
        {
            "v": 1,
            "resource": resource_url_from_server_url(url),
            "tokens": {"access_token": "cached-opaque", "token_type": "Bearer"},
            "expires_at": time.time() + 3600,
        },
    )
    auth = build_auth(manifest(block(url)).servers[0], Redactor())
    assert auth is not None

    def request() -> httpx2.Request:
        return httpx2.Request("POST", url, content=b"{}")

    first = auth.async_auth_flow(request())
    with pytest.raises(StopAsyncIteration):  # the first request loads the sealed token
        await first.asend(httpx2.Response(200, request=await first.__anext__()))
    pending = auth.async_auth_flow(request())
    held = await pending.__anext__()  # sent; its response has not come
    other = auth.async_auth_flow(request())
    got: list[httpx2.Request] = []

    async def send_other() -> None:  # another task, as the transport's GET stream is
        got.append(await other.__anext__())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_other)
        with trio.move_on_after(2):
            while not got:
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()
    assert got, "the second request waited for the first one's response"
    sent = got[0]
    assert sent.headers["authorization"] == held.headers["authorization"] == "Bearer cached-opaque"
    for flow, req in ((other, sent), (pending, held)):
        with pytest.raises(StopAsyncIteration):
            await flow.asend(httpx2.Response(200, request=req))


async def test_a_token_rejected_mid_session_is_refreshed_once(
    home: Path, oauth_server, make_kernel
) -> None:
    url = await oauth_server()
    await login(manifest(block(url)).servers[0], Redactor(), Browser().flow())
    kernel = make_kernel([ApprovalAnswer.once(), ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(block(url))) as cs:
        assert not cs.failures, cs.failures
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
        async with httpx2.AsyncClient() as c:
            await c.post(url.replace("/mcp", "/test/revoke-access"))
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    grants = [g["grant"] for g in (await server_log(url))["grants"]]
    assert grants == ["authorization_code", "refresh_token"]


def xaa_block(url: str) -> str:
    """SEP-990: the issuer and the IdP are configuration; secrets are named, never written."""
    issuer = url.removesuffix("/mcp")
    return block(
        url,
        'client_id = "xaa"\nclient_secret_env = "XAA_SECRET"\noauth_grant = "identity_assertion"\n'
        f'oauth_issuer = "{issuer}"\nidp_token_endpoint = "{issuer}/idp/token"\n'
        'idp_client_id = "idp-client"\nidp_id_token_env = "XAA_ID_TOKEN"',
    )


ENTERPRISE_ID_TOKEN = "id-token-of-the-enterprise-user"


async def test_identity_assertion_exchanges_at_the_idp_then_at_the_issuer(
    home: Path, oauth_server, make_kernel, sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await oauth_server()
    monkeypatch.setenv("XAA_SECRET", "xaa-secret")
    monkeypatch.setenv("XAA_ID_TOKEN", ENTERPRISE_ID_TOKEN)
    for _ in range(2):  # the second session uses the sealed token: no new exchange
        kernel = make_kernel([ApprovalAnswer.once()])
        async with kernel, connect_servers(kernel, manifest(xaa_block(url))) as cs:
            assert not cs.failures, cs.failures
            assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    log = await server_log(url)
    exchange, grant = log["grants"]
    assert exchange == {
        "grant": "token_exchange",
        "audience": url.removesuffix("/mcp"),  # the configured issuer, not a discovered one
        "resource": url,
        "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
    }
    assert grant["grant"] == "jwt_bearer" and grant["resource"] == url
    (token,) = set(bearer_values(log))
    assert auth_status(manifest(xaa_block(url)).servers[0])["logged_in"]
    # Neither the ID token, the client secret nor the access token reaches an event.
    text = json.dumps(sink.records())
    for secret in (ENTERPRISE_ID_TOKEN, "xaa-secret", token):
        assert secret not in text
    for f in home.rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes()  # sealed at rest


async def test_identity_assertion_token_for_another_audience_is_never_sent(
    home: Path, oauth_server, make_kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await oauth_server(RF_OAUTH_AUD="https://other.example/mcp")
    monkeypatch.setenv("XAA_SECRET", "xaa-secret")
    monkeypatch.setenv("XAA_ID_TOKEN", ENTERPRISE_ID_TOKEN)
    async with make_kernel() as kernel, connect_servers(kernel, manifest(xaa_block(url))) as cs:
        assert "another audience" in cs.failures["prot"].message
    log = await server_log(url)
    assert [g["grant"] for g in log["grants"]] == ["token_exchange", "jwt_bearer"]  # issued ...
    assert log["authorization"] and bearer_values(log) == []  # ... and never presented
    assert not auth_status(manifest(xaa_block(url)).servers[0])["logged_in"]


async def test_identity_assertion_never_attaches_a_stored_token_for_another_audience(
    home: Path, oauth_server, make_kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await oauth_server()
    monkeypatch.setenv("XAA_SECRET", "xaa-secret")
    monkeypatch.setenv("XAA_ID_TOKEN", ENTERPRISE_ID_TOKEN)
    foreign = jwt_for({"aud": "https://other.example/mcp", "sub": "x"})
    SealedStore(home).save(
        "prot",
        {"v": 1, "resource": url, "tokens": {"access_token": foreign, "token_type": "Bearer"}},
    )
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(xaa_block(url))) as cs:
        assert not cs.failures, cs.failures  # a fresh assertion replaced it
        assert "hello" in (await kernel.call("mcp.prot.whoami", {}))["text"]
    sent = bearer_values(await server_log(url))
    assert sent and foreign not in sent


def jwt_for(claims: dict) -> str:
    """An unsigned JWT-shaped token with ``claims`` (only its audience is read)."""
    import base64

    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return ".".join([part({"alg": "none"}), part(claims), "sig"])


async def test_identity_assertion_without_the_id_token_names_the_variable(
    home: Path, oauth_server, make_kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await oauth_server()
    monkeypatch.setenv("XAA_SECRET", "xaa-secret")
    monkeypatch.delenv("XAA_ID_TOKEN", raising=False)
    async with make_kernel() as kernel, connect_servers(kernel, manifest(xaa_block(url))) as cs:
        assert "XAA_ID_TOKEN" in cs.failures["prot"].message
    assert (await server_log(url))["grants"] == []  # nothing was sent to the IdP or the issuer


def test_the_identity_assertion_keys_are_named_with_their_line() -> None:
    base = (
        '[[server]]\nname = "s"\ntransport = "http"\nurl = "https://x.example/mcp"\n'
        'auth = "oauth"\n'
    )
    full = (
        'client_id = "c"\nclient_secret_env = "S"\noauth_grant = "identity_assertion"\n'
        'oauth_issuer = "https://as.example"\nidp_token_endpoint = "https://idp.example/token"\n'
        'idp_client_id = "i"\nidp_id_token_env = "IDT"\n'
    )
    assert manifest(base + full).servers[0].idp_id_token_env == "IDT"
    bad = {
        full.replace('oauth_issuer = "https://as.example"\n', ""): (
            "oauth_issuer",
            1,
        ),  # missing: the table
        full.replace('idp_id_token_env = "IDT"', 'idp_id_token_env = "not a var"'): (
            "idp_id_token_env",
            12,
        ),
        full.replace("https://idp.example", "http://idp.example"): ("idp_token_endpoint", 10),
        'idp_client_id = "i"\n': ("idp_client_id", 6),  # without the grant
        full.replace('client_secret_env = "S"\n', ""): ("client_secret_env", 1),
    }
    for extra, (key, line) in bad.items():
        with pytest.raises(InvalidArguments) as caught:
            parse_manifest(base + extra, "m.toml")
        message = caught.value.message
        assert caught.value.field == key, (extra, message)
        assert message.startswith(f"m.toml:{line}: server 's': {key}: "), (extra, message)


async def test_a_token_whose_claims_nest_past_the_parser_is_read_as_opaque(
    home: Path, oauth_server, make_kernel
) -> None:
    """The authorization server writes the access token: a JWT-shaped one whose claims are
    5,000 nested arrays made the audience check raise RecursionError, and the connect failed
    naming it. Claims that cannot be read are an opaque token's (bound by its record, sent
    only to its own resource): here the server rejects it and the failure names the login."""
    import base64

    url = await oauth_server()
    nested = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode().rstrip("=")
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').decode().rstrip("=")
    token = f"{header}.{nested}.sig"
    SealedStore(home).save(
        "prot",
        {"v": 1, "resource": url, "tokens": {"access_token": token, "token_type": "Bearer"}},
    )
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block(url))) as cs:
        message = cs.failures["prot"].message
    assert "ringfence mcp login prot" in message and "RecursionError" not in message, message
    log = await server_log(url)
    assert all(value == token for value in bearer_values(log))  # to its own resource only


@pytest.mark.parametrize("client", ["dynamic", "pre-registered"])
async def test_endpoints_over_plain_http_to_another_host_get_nothing(
    home: Path, oauth_server, client: str
) -> None:
    """Authorization-server metadata naming its registration, authorization and token
    endpoints over plain http on a host that is not loopback: the SDK followed it, so the
    client registration (its secret), the person's login in the browser, the authorization
    code with its PKCE verifier and the tokens crossed the network in clear. Refused now
    before anything goes there (the registration request; for a pre-registered client, the
    browser), naming the host and the https rule; the endpoint's server saw no request."""
    address = non_loopback_address()
    url = await oauth_server(
        RF_OAUTH_METADATA_ISSUER="{base}",
        RF_OAUTH_ENDPOINTS=f"http://{address}:{{port}}",
        RF_OAUTH_ALSO_BIND=address,
    )
    extra = 'client_id = "pre-public"' if client == "pre-registered" else ""
    browser = Browser()
    with pytest.raises(Unavailable) as caught:
        await login(manifest(block(url, extra)).servers[0], Redactor(), browser.flow())
    message = caught.value.message
    assert "not https" in message and f"http://{address}:" in message, message
    assert caught.value.field == "auth"
    assert browser.urls == []  # the person's browser was never sent there
    log = await server_log(url)
    assert log["registrations"] == [] and log["grants"] == [], log
    assert not any(r.endswith(("/register", "/token", "/authorize")) for r in log["requests"])
