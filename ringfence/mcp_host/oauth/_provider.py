"""OAuth 2.1 for remote MCP servers (MCP authorization), built on the SDK's own client auth.

The protocol work is the SDK's ``OAuthClientProvider`` (an ``httpx2.Auth``):
protected-resource metadata discovery (RFC 9728, from ``WWW-Authenticate`` and
the well-known URLs), authorization-server metadata and OIDC discovery with the
2025-03-26 fallbacks, dynamic client registration, client ID metadata
documents, PKCE, the ``resource`` parameter (RFC 8707), scope selection and
step-up on ``insufficient_scope``, refresh tokens, the token-endpoint auth
methods, (``ClientCredentialsOAuthProvider``) the client_credentials grant, and
(``IdentityAssertionOAuthProvider``, in :mod:`._xaa`) SEP-990 identity assertion.

Through the SDK's public interface only: its providers are built with their
constructors and used as they are (never subclassed); :class:`SealedTokenStorage`
is their ``TokenStorage``; :class:`GuardedAuth` is an ``httpx2.Auth`` of ours that
drives the provider's ``async_auth_flow`` and sees every request it sends and every
response it gets; the provider's ``context`` (the SDK's ``OAuthContext``: tokens,
expiry, discovered metadata) is read and, to restore what the SDK forgets across a
restart, written through its public fields. What a governed host adds:

- **Storage**: :class:`SealedTokenStorage` keeps tokens and client registrations
  sealed (:mod:`._tokens`), bound to the server's canonical resource URL. A
  record for another URL (the manifest entry now points elsewhere) is never
  loaded, so its token is never sent. Tokens, refresh tokens and client secrets
  are registered with the session's redactor as soon as they are loaded or
  received, so they never appear in events, diagnostics or errors.
- **Audience**: a token that is a JWT whose ``aud`` names neither this server's
  resource nor a parent of it is refused when received (not stored), and a
  request the provider would send with it goes without it (:class:`GuardedAuth`
  looks at every outgoing ``Authorization: Bearer``, whoever put it there).
- **No surprise browsers**: a session never starts an interactive login. A 401
  that refresh cannot fix, or a step-up that needs new consent, raises
  ``Unavailable`` naming ``ringfence mcp login SERVER`` - unless a login flow is
  installed (:func:`login_flow`, used by ``mcp login`` and tests).
- **Bounded step-up**: at most :data:`MAX_STEP_UPS` re-authorizations for more
  scope per provider (one connection); past that the request is refused.
- **Issuer**: the SDK's exact RFC 8414 §3.3 match stands, except on the 2025-03-26
  fallback (no protected-resource metadata), where metadata from the server's origin
  may name an issuer on that same origin (:meth:`GuardedAuth._legacy_issuer_to_accept`).
- Expiry survives a restart (the SDK forgets it), so a stored expired token is
  refreshed before use instead of being sent.

Not promised: token revocation at logout (the sealed record is deleted; the
authorization server may still honour the token until it expires).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import time
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
import trio
from mcp.client.auth import (
    OAuthClientProvider,
    OAuthFlowError,
    OAuthRegistrationError,
    OAuthTokenError,
)
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    create_oauth_metadata_request,
    extract_field_from_www_auth,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import resource_url_from_server_url
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import ValidationError

from ...runtime._errors import Denied, InvalidArguments, Unavailable
from ...runtime._net import is_loopback
from ...runtime._redact import Redactor
from .._urls import scrub_url
from ..manifest._load import AuthMode, ServerConfig
from ._tokens import SealedStore, credential_from_env, token_audience_ok

__all__ = [
    "MAX_STEP_UPS",
    "GuardedAuth",
    "LoginFlow",
    "SealedTokenStorage",
    "auth_status",
    "build_auth",
    "login_flow",
    "logout",
    "token_audience_ok",
]

MAX_STEP_UPS = 2
# Used as the registered redirect URI only when no login flow is installed; a
# session never follows it (it refuses before any authorization request).
_NO_REDIRECT = "http://127.0.0.1/ringfence-no-login"


@dataclass(frozen=True)
class LoginFlow:
    """An interactive authorization: where the browser returns, and how to get there.

    ``redirect(url)`` shows/opens the authorization URL; ``callback()`` waits for
    the redirect to ``redirect_uri`` and returns its code and state.
    """

    redirect_uri: str
    redirect: Callable[[str], Awaitable[None]]
    callback: Callable[[], Awaitable[AuthorizationCodeResult]]


_installed_flow: LoginFlow | None = None


@contextlib.contextmanager
def login_flow(flow: LoginFlow) -> Iterator[None]:
    """Allow interactive authorization through ``flow`` while the block runs (process-wide)."""
    global _installed_flow
    previous, _installed_flow = _installed_flow, flow
    try:
        yield
    finally:
        _installed_flow = previous


def _login_hint(name: str) -> str:
    return f"run `ringfence mcp login {name}`"


def _plain_http_refusal(url: str, server: str, what: str) -> Unavailable | None:
    """The refusal of sending OAuth traffic (``what``) to ``url`` over anything but TLS:
    https, or plain http to a loopback host only, as for manifest URLs. Authorization
    codes, PKCE verifiers, client secrets, tokens and the person's login must never cross
    a network in clear text, whatever URL a server's metadata names (the MCP authorization
    spec: every authorization-server endpoint MUST be https). None when it is allowed."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme == "https" or (scheme == "http" and host and is_loopback(host)):
        return None
    try:
        where = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        where = host
    return Unavailable(
        f"MCP server {server!r}: its authorization metadata sends {what} to "
        f"{scheme or 'no scheme'}://{where or '?'}, which is not https (plain http is allowed to "
        "a loopback host only); refused, nothing was sent there: OAuth endpoints must use https",
        field="auth",
    )


# How near a host is: its loopback addresses, then the other addresses that are not global
# (private, link-local, unique-local, shared, reserved, unspecified, multicast), then the rest.
_LOOPBACK, _LOCAL, _GLOBAL = 0, 1, 2
_REACH_WORDS = {
    _LOOPBACK: "a loopback host or another address of this machine",
    _LOCAL: "a private or link-local address",
}


def _address_reach(address: str) -> int:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a scope id (fe80::1%eth0) aside
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return _LOOPBACK
    return _GLOBAL if ip.is_global else _LOCAL


def _this_machine(address: str, family: int) -> bool:
    """Whether a connection to ``address`` reaches this machine itself: the kernel lets a
    socket bind only an address of this machine's own interfaces, or the unspecified one
    (``0.0.0.0``, ``::``), which a connection reaches as this machine too. Asked of the
    kernel, not of the address's class: ``0.0.0.0`` and the address of an interface
    (``docker0``'s ``172.17.0.1``) are "private" by class, yet reach every service that
    listens on this machine's every interface."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


async def host_reach(host: str, *, this_machine: bool = False) -> int | None:
    """How near ``host`` is (:data:`_LOOPBACK`, :data:`_LOCAL`, :data:`_GLOBAL`): the nearest
    address the system's resolver gives for it, as the connection would (``127.1``,
    ``2130706433`` and ``localhost`` all reach loopback). None when it does not resolve.

    ``this_machine``: an address that reaches this machine (:func:`_this_machine`) counts as
    loopback, for a URL a server's metadata names (a server's own URL is judged by class
    alone, which can only make what it may name nearer less)."""
    try:
        infos = await trio.socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return None
    reaches = []
    for info in infos:
        address = str(info[4][0])
        try:
            reach = _address_reach(address)
        except ValueError:
            continue
        if reach != _LOOPBACK and this_machine and _this_machine(address, info[0]):
            reach = _LOOPBACK
        reaches.append(reach)
    return min(reaches, default=None)


async def _reach_refusal(
    url: str, server_url: str, server: str, what: str, server_reach: int | None
) -> Unavailable | None:
    """The refusal of sending OAuth traffic (``what``) to ``url`` when its host is nearer the
    person's machine than the MCP server itself: a server on another host whose metadata
    names ``http://127.0.0.1:PORT/`` (or a private address) would otherwise have the flow's
    GETs and registration POST sent to whatever listens there, a request forged from a
    server anywhere. A local server (loopback, or a private network) may name hosts as near
    as itself. None when allowed (the same host as the server's is always allowed)."""
    host = (urlsplit(url).hostname or "").lower()
    if not host or host == (urlsplit(server_url).hostname or "").lower():
        return None
    reach = await host_reach(host, this_machine=True)
    limit = _GLOBAL if server_reach is None else server_reach
    if reach is None or reach >= limit:
        return None
    parts = urlsplit(url)
    try:
        where = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        where = host
    return Unavailable(
        f"MCP server {server!r}: its authorization metadata sends {what} to {where}, "
        f"{_REACH_WORDS[reach]}, nearer this machine than the server itself; refused, nothing "
        "was sent there (OAuth endpoints of a server on another host are never on this "
        "machine's loopback or private network)",
        field="auth",
    )


# -- storage ---------------------------------------------------------------------------------


class SealedTokenStorage:
    """The SDK's ``TokenStorage`` over a sealed record bound to one server's resource URL.

    ``fixed_client`` (a pre-registered client) is what :meth:`get_client_info`
    answers, whatever is stored: such a client never registers. ``restored``
    is called with the record whenever the SDK loads the tokens (its provider
    starts, or starts again after a failed refresh): what the SDK's own state
    does not keep across processes is put back from it there.
    """

    def __init__(
        self,
        config: ServerConfig,
        redactor: Redactor,
        store: SealedStore | None = None,
        redirect_uri: str | None = None,
        fixed_client: OAuthClientInformationFull | None = None,
    ) -> None:
        assert config.url is not None
        self.name = config.name
        self.resource = resource_url_from_server_url(config.url)
        self.redactor = redactor
        self.store = store or SealedStore.default()
        self.redirect_uri = redirect_uri
        self.fixed_client = fixed_client
        # Set by the guard: the discovery results to keep with the tokens, so a refresh
        # after a restart goes to the discovered token endpoint with the right resource;
        # and where to put them back when the tokens are loaded.
        self.discovered: Callable[[], dict[str, Any]] = dict
        self.restored: Callable[[dict[str, Any]], None] | None = None
        self._record: dict[str, Any] | None = None
        self._loaded = False

    async def _load(self) -> dict[str, Any] | None:
        # Read and opened once per provider (one connection); writes keep the copy current.
        if not self._loaded:
            self._record = await trio.to_thread.run_sync(self.store.load, self.name)
            self._loaded = True
        record = self._record
        if record is None or record.get("resource") != self.resource:
            return None  # another server's (or URL's) credentials are never used here
        return record

    async def _update(self, **changes: Any) -> None:
        record = await self._load() or {"v": 1, "resource": self.resource}
        record.update(changes)
        await trio.to_thread.run_sync(self.store.save, self.name, record)
        self._record = record

    def _register(self, *values: str | None) -> None:
        for value in values:
            if value:
                self.redactor.register_credential(value)

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, ``expires_in`` counted from now (the stored expiry, not the
        lifetime they were issued with: a provider that derives its expiry from it gets
        the right one after a restart)."""
        record = await self._load()
        if not record or not record.get("tokens"):
            return None
        tokens = OAuthToken.model_validate(record["tokens"])
        self._register(tokens.access_token, tokens.refresh_token)
        expires_at = record.get("expires_at")
        if isinstance(expires_at, int | float):
            tokens.expires_in = max(0, int(expires_at - time.time()))
        if self.restored is not None:
            self.restored({k: record.get(k) for k in ("expires_at", "as_metadata", "prm")})
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._register(tokens.access_token, tokens.refresh_token)
        if not token_audience_ok(tokens.access_token, self.resource):
            raise Denied(
                f"MCP server {self.name!r}: the authorization server issued a token for another "
                "audience; it was not stored and will not be sent",
                field="aud",
            )
        now = time.time()
        await self._update(
            **self.discovered(),
            tokens=tokens.model_dump(mode="json"),
            obtained_at=now,
            expires_at=now + tokens.expires_in if tokens.expires_in else None,
        )

    async def clear_tokens(self) -> None:
        record = await self._load()
        if record is not None:
            record.pop("tokens", None)
            await trio.to_thread.run_sync(self.store.save, self.name, record)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self.fixed_client is not None:
            self._register(self.fixed_client.client_secret)
            return self.fixed_client  # pre-registered: never registers
        record = await self._load()
        if not record or not record.get("client_info"):
            return None
        info = OAuthClientInformationFull.model_validate(record["client_info"])
        registered = [str(u) for u in info.redirect_uris or []]
        if self.redirect_uri is not None and registered and self.redirect_uri not in registered:
            return None  # registered for another loopback port: register again
        self._register(info.client_secret)
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._register(client_info.client_secret)
        await self._update(client_info=client_info.model_dump(mode="json", exclude_none=True))


# -- the guard around the SDK's providers ------------------------------------------------------


def _is_step_up(response: httpx2.Response) -> bool:
    """A 403 ``insufficient_scope``: the server asks for more scope."""
    return (
        response.status_code == 403
        and extract_field_from_www_auth(response, "error") == "insufficient_scope"
    )


def _asks_for_auth(response: httpx2.Response) -> bool:
    """A 401 or a step-up: what the SDK's flow answers with auth work."""
    return response.status_code == 401 or _is_step_up(response)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) URL with default ports filled in, else None."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _bearer(request: httpx2.Request) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, else None."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


# What the SDK's providers raise when authorization cannot be completed; each becomes
# ``Unavailable`` naming the server (ringfence's own errors, e.g. ``Denied``, pass as they are).
_FLOW_ERRORS: tuple[type[Exception], ...] = (
    OAuthFlowError,
    OAuthTokenError,
    OAuthRegistrationError,
    ValueError,
)


class GuardedAuth(httpx2.Auth):
    """An SDK provider (an ``httpx2.Auth``) driven through its public ``async_auth_flow``.

    Every request the provider sends passes :meth:`_outgoing` (a bearer token for
    another audience is taken off) and every answer to the request being
    authenticated passes the checks below before the provider acts on it.
    ``context`` is the provider's ``OAuthContext`` (None for a provider without
    one, SEP-990's: then only the audience check and the error mapping apply).
    ``interactive``: a 401 may be answered by a fresh grant (a login flow is
    installed, or the grant needs no person).
    """

    def __init__(
        self,
        provider: httpx2.Auth,
        context: OAuthContext | None,
        config: ServerConfig,
        storage: SealedTokenStorage,
        *,
        interactive: bool,
        what: str = "OAuth authorization",
        errors: tuple[type[Exception], ...] = _FLOW_ERRORS,
        hint: bool = True,
    ) -> None:
        self._provider = provider
        self._context = context
        self._config = config
        self._server_name = config.name
        self._storage = storage
        self._interactive = interactive
        self._what = what
        self._errors = errors
        self._hint = hint
        self._step_ups = 0
        self._server_reach: int | None = None  # how near the MCP server is (host_reach)
        self._server_reach_known = False
        # The issuer accepted on the 2025-03-26 fallback path, and the metadata URL it came
        # from (see _legacy_issuer_to_accept).
        self._legacy: tuple[str, str] | None = None
        if context is not None:
            storage.discovered = self._discovered
            storage.restored = self._restore

    def sync_auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response]:
        raise TypeError("ringfence's OAuth providers work with httpx2.AsyncClient only")

    # -- what the SDK does not keep across processes ----------------------------------------

    def _discovered(self) -> dict[str, Any]:
        ctx = self._context
        assert ctx is not None
        out: dict[str, Any] = {}
        if ctx.oauth_metadata is not None:
            out["as_metadata"] = ctx.oauth_metadata.model_dump(mode="json", exclude_none=True)
        if ctx.protected_resource_metadata is not None:
            out["prm"] = ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
        return out

    def _restore(self, kept: dict[str, Any]) -> None:
        """Expiry and discovery, kept with the tokens, back into the provider's context.

        Without them a stored expired token would be sent, and its refresh would go to
        the resource's own origin. Called by the storage as the SDK loads the tokens.
        """
        ctx = self._context
        assert ctx is not None
        ctx.token_expiry_time = kept.get("expires_at")
        if kept.get("as_metadata") and ctx.oauth_metadata is None:
            ctx.oauth_metadata = OAuthMetadata.model_validate(kept["as_metadata"])
        if kept.get("prm") and ctx.protected_resource_metadata is None:
            prm = ProtectedResourceMetadata.model_validate(kept["prm"])
            ctx.protected_resource_metadata = prm
            ctx.auth_server_url = str(prm.authorization_servers[0])

    # -- the flow -----------------------------------------------------------------------------

    def _cached_token(self) -> str | None:
        """The token to send without the provider's lock: valid, and for this audience."""
        ctx = self._context
        if ctx is None or not ctx.is_token_valid() or ctx.current_tokens is None:
            return None
        token = ctx.current_tokens.access_token
        return token if token_audience_ok(token, self._storage.resource) else None

    async def _check_reach(self, outgoing: httpx2.Request) -> None:
        """Raise the refusal of a request the provider would send nearer this machine than
        the MCP server is (:func:`_reach_refusal`)."""
        assert self._config.url is not None
        if not self._server_reach_known:
            host = urlsplit(self._config.url).hostname or ""
            self._server_reach = await host_reach(host) if host else None
            self._server_reach_known = True
        refusal = await _reach_refusal(
            str(outgoing.url), self._config.url, self._server_name, "a request", self._server_reach
        )
        if refusal is not None:
            raise refusal

    def _outgoing(self, outgoing: httpx2.Request) -> httpx2.Request:
        """What is sent for ``outgoing``: a bearer token for another audience taken off; on
        the accepted 2025-03-26 path, the issuer's metadata fetched where it was found."""
        refusal = _plain_http_refusal(str(outgoing.url), self._server_name, "a request")
        if refusal is not None:
            raise refusal
        token = _bearer(outgoing)
        if token is not None and not token_audience_ok(token, self._storage.resource):
            del outgoing.headers["authorization"]  # a token for another audience is never sent
        if self._legacy is not None and outgoing.method == "GET":
            issuer, fetched = self._legacy
            ctx = self._context
            assert ctx is not None
            urls = build_oauth_authorization_server_metadata_discovery_urls(issuer, ctx.server_url)
            if any(outgoing.url == httpx2.URL(url) for url in urls):
                return create_oauth_metadata_request(fetched)
        return outgoing

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        ctx = self._context
        checked = False  # the first answer to ``request`` was judged (_check_challenge)
        refreshed = False  # the one refresh tried instead of an authorization
        token = self._cached_token()
        if token is not None:
            # A valid token in hand needs no auth work, so no lock: the SDK holds its context
            # lock across the whole request, which serializes a connection's concurrent
            # requests (the transport's GET stream and its POSTs: one more round trip per
            # connect). Anything else the response asks for goes to the provider's flow,
            # which sends the request again under the lock (refresh, step-up, refusal).
            assert ctx is not None
            ctx.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
            request.headers["Authorization"] = f"Bearer {token}"
            response = yield request
            if not _asks_for_auth(response):
                return
            if self._may_refresh_instead(response):
                refreshed = self._expire()
            else:
                checked = True
                refusal = self._check_challenge(response)
                if refusal is not None:
                    await self._answer_refusal(request, response, refusal)
                    return
        flow = self._provider.async_auth_flow(request)
        try:
            outgoing = self._outgoing(await flow.__anext__())
            while True:
                if outgoing is not request:
                    await self._check_reach(outgoing)
                response = yield outgoing
                if outgoing is request and not checked:
                    if not refreshed and self._may_refresh_instead(response):
                        # A rejected token with a refresh token: refresh once, retry once
                        # (the provider's flow again, the token marked expired), rather
                        # than start an authorization nobody is there to complete.
                        refreshed = self._expire()
                        await flow.aclose()
                        flow = self._provider.async_auth_flow(request)
                        outgoing = self._outgoing(await flow.__anext__())
                        continue
                    checked = True
                    refusal = self._check_challenge(response)
                    if refusal is not None:
                        await self._answer_refusal(request, response, refusal)
                        return
                legacy = await self._legacy_issuer_to_accept(outgoing, response)
                if legacy is not None:
                    # The SDK fixed its expected issuer before this fetch and would refuse.
                    # Its flow runs again from the request with the accepted issuer as the
                    # authorization server it knows (its own field for what metadata
                    # named), whose metadata is fetched again where it was just found
                    # (_outgoing); the original request counts as sent already.
                    assert ctx is not None
                    await flow.aclose()
                    self._legacy = (legacy, str(outgoing.url))
                    ctx.auth_server_url = legacy
                    flow = self._provider.async_auth_flow(request)
                    outgoing = self._outgoing(await flow.__anext__())
                    continue
                outgoing = self._outgoing(await flow.asend(response))
        except StopAsyncIteration:
            return
        except self._errors as exc:
            hint = f"; {_login_hint(self._server_name)}" if self._hint else ""
            raise Unavailable(
                f"MCP server {self._server_name!r}: {self._what} failed "
                f"({type(exc).__name__}: {scrub_url(str(exc), self._config.url)[:300]}){hint}",
                field="auth",
            ) from None
        finally:
            await flow.aclose()

    def _expire(self) -> bool:
        """Mark the token in hand expired, so the provider's flow refreshes it first."""
        assert self._context is not None
        self._context.token_expiry_time = time.time() - 1.0
        return True

    async def _legacy_issuer_to_accept(
        self, outgoing: httpx2.Request, response: httpx2.Response
    ) -> str | None:
        """The issuer to accept from 2025-03-26 fallback metadata the SDK would refuse, else None.

        Under the 2025-03-26 spec (no protected-resource metadata) the MCP server's
        origin is the authorization base, and its metadata is fetched from
        ``<origin>/.well-known/oauth-authorization-server``. Metadata fetched there
        that names an issuer on that same origin (scheme, host, port; e.g.
        ``<origin>/oauth``) is under the same authority, so it is accepted. An
        issuer on another origin is left to the SDK, which refuses it (the mix-up
        defence of RFC 8414 §3.3); so is anything on the RFC 9728 path, where
        ``auth_server_url`` is set and the match stays exact. Once per provider.
        """
        ctx = self._context
        if (
            ctx is None
            or ctx.auth_server_url is not None
            or self._legacy is not None
            or response.status_code != 200
        ):
            return None
        # One URL on the fallback path; if the SDK ever returns more, this fails (Unavailable).
        (fallback,) = build_oauth_authorization_server_metadata_discovery_urls(None, ctx.server_url)
        fetched = str(outgoing.url)
        if _origin(fetched) != _origin(fallback) or outgoing.url.path != urlsplit(fallback).path:
            return None
        try:  # read here, kept for the SDK's own read of the same response
            issuer = str(OAuthMetadata.model_validate_json(await response.aread()).issuer)
        except ValidationError:
            return None  # the SDK reports it
        parts = urlsplit(issuer)
        if _origin(issuer) is None or _origin(issuer) != _origin(fetched):
            return None  # another origin: the SDK refuses it
        if parts.path in ("", "/"):
            return None  # the origin itself: the SDK accepts it as it is
        if parts.query or parts.fragment:
            return None  # not an issuer identifier (RFC 8414 §2): the SDK refuses it
        return issuer

    async def _answer_refusal(
        self, request: httpx2.Request, response: httpx2.Response, refusal: Exception
    ) -> None:
        """Surface a refusal without breaking the connection.

        Raising out of the auth flow during ``initialize`` fails the connect with
        this error itself. During a later request the SDK transport would treat a
        raise as a dead stream, so the 401/403's body (not read yet: nothing reads
        an answer before the flow has seen it) is replaced by a JSON-RPC error
        carrying the message (the transport surfaces such a body as the request's
        error) and the connection stays usable for calls that need no more scope.
        """
        try:
            method = json.loads(request.content or b"{}").get("method")
        except (ValueError, AttributeError):
            method = None
        if method in (None, "initialize") or response.is_stream_consumed:
            raise refusal
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32603, "message": getattr(refusal, "message", str(refusal))},
            }
        ).encode()
        stream = response.stream
        if isinstance(stream, httpx2.AsyncByteStream):
            await stream.aclose()  # the server's own body is dropped unread
        for name in ("content-encoding", "transfer-encoding"):
            response.headers.pop(name, None)
        response.headers["content-type"] = "application/json"
        response.headers["content-length"] = str(len(body))
        response.stream = httpx2.ByteStream(body)

    def _may_refresh_instead(self, response: httpx2.Response) -> bool:
        ctx = self._context
        return (
            ctx is not None
            and response.status_code == 401
            and not self._interactive
            and ctx.can_refresh_token()
        )

    def _check_challenge(self, response: httpx2.Response) -> Exception | None:
        """The refusal, decided before any authorization work, of what may not be done now."""
        if self._context is None:
            return None  # SEP-990: a fresh assertion needs no person
        step_up = _is_step_up(response)
        if step_up:
            self._step_ups += 1
            if self._step_ups > MAX_STEP_UPS:
                return Denied(
                    f"MCP server {self._server_name!r} asked for more scope again after "
                    f"{MAX_STEP_UPS} step-ups; refused (the limit bounds repeated consent prompts)",
                    field="scopes",
                    status=403,
                )
        if (response.status_code == 401 or step_up) and not self._interactive:
            what = "more scope (insufficient_scope)" if step_up else "authorization (HTTP 401)"
            return Unavailable(
                f"MCP server {self._server_name!r} needs {what} and no valid token could be "
                f"used or refreshed; {_login_hint(self._server_name)}",
                field="auth",
                status=response.status_code,
            )
        return None


# -- the providers ---------------------------------------------------------------------------


def _code_grant(
    config: ServerConfig, storage: SealedTokenStorage, flow: LoginFlow | None, secret: str | None
) -> OAuthClientProvider:
    """Authorization code + PKCE (dynamic, metadata-document or pre-registered client)."""
    assert config.url is not None
    redirect_uri = flow.redirect_uri if flow else _NO_REDIRECT
    auth_method = "client_secret_basic" if secret else "none"
    metadata = OAuthClientMetadata(
        client_name="ringfence",
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=auth_method,
        scope=" ".join(config.scopes) or None,
    )
    if config.client_id is not None:
        storage.fixed_client = OAuthClientInformationFull(
            client_id=config.client_id,
            client_secret=secret,
            redirect_uris=[redirect_uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method=auth_method,
            scope=metadata.scope,
        )

    async def redirect(url: str) -> None:
        # The person's browser goes only to an https authorization endpoint (or loopback http).
        refusal = _plain_http_refusal(url, config.name, "the person's login (the browser)")
        if refusal is None:  # nor to a host nearer this machine than the server itself
            assert config.url is not None
            host = urlsplit(config.url).hostname or ""
            refusal = await _reach_refusal(
                url,
                config.url,
                config.name,
                "the person's login (the browser)",
                await host_reach(host) if host else None,
            )
        if refusal is not None:
            raise refusal
        assert flow is not None
        await flow.redirect(url)

    return OAuthClientProvider(
        config.url,
        metadata,
        storage,
        redirect_handler=redirect if flow else None,
        callback_handler=flow.callback if flow else None,
        client_metadata_url=config.client_metadata_url,
    )


def _client_credentials(
    config: ServerConfig, storage: SealedTokenStorage, secret: str | None, key_pem: str | None
) -> OAuthClientProvider:
    """client_credentials, the client proven by its secret or (``key_pem``) by a signed JWT
    assertion (RFC 7523, private_key_jwt); machine to machine, never interactive."""
    assert config.url is not None and config.client_id is not None
    common: dict[str, Any] = {
        "server_url": config.url,
        "storage": storage,
        "client_id": config.client_id,
        "scope": " ".join(config.scopes) or None,
        "issuer": config.oauth_issuer,
    }
    if key_pem is None:
        assert secret is not None
        with warnings.catch_warnings():
            # Omitting issuer is the SDK's deprecated-but-supported mode; the manifest makes it optional.
            warnings.simplefilter("ignore")
            return ClientCredentialsOAuthProvider(**common, client_secret=secret)
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise InvalidArguments(
            f"server {config.name!r}: {config.client_key_env} is not an unencrypted PEM "
            "private key",
            field="client_key_env",
        ) from None
    algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
    params = SignedJWTParameters(
        issuer=config.client_id,
        subject=config.client_id,
        signing_key=key_pem,
        signing_algorithm=algorithm,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # issuer optional (see above)
        return PrivateKeyJWTOAuthProvider(
            **common, assertion_provider=params.create_assertion_provider()
        )


def build_auth(
    config: ServerConfig, redactor: Redactor, store: SealedStore | None = None
) -> httpx2.Auth | None:
    """The ``httpx2.Auth`` for an ``auth = "oauth"`` server, else None.

    Interactive authorization only happens inside :func:`login_flow`; otherwise
    a server that needs a new login fails with ``Unavailable`` naming the command.
    """
    if config.auth is not AuthMode.OAUTH or config.url is None:
        return None
    secret = credential_from_env(config, "client_secret_env", redactor)
    flow = _installed_flow
    storage = SealedTokenStorage(config, redactor, store, flow.redirect_uri if flow else None)
    if config.oauth_grant == "identity_assertion":
        from ._xaa import identity_assertion

        assert secret is not None  # the manifest requires client_secret_env for this grant
        return GuardedAuth(
            identity_assertion(config, storage, redactor, secret),
            None,
            config,
            storage,
            interactive=True,  # a fresh assertion needs no person
            what="identity-assertion authorization",
            errors=(*_FLOW_ERRORS, httpx2.HTTPError),
            hint=False,
        )
    if config.oauth_grant == "client_credentials":
        key_pem = credential_from_env(config, "client_key_env", redactor)
        provider = _client_credentials(config, storage, secret, key_pem)
        # A fresh grant needs no person.
        return GuardedAuth(provider, provider.context, config, storage, interactive=True)
    provider = _code_grant(config, storage, flow, secret)
    return GuardedAuth(provider, provider.context, config, storage, interactive=flow is not None)


# -- status / logout -------------------------------------------------------------------------


def auth_status(config: ServerConfig, store: SealedStore | None = None) -> dict[str, Any]:
    """What ``mcp list`` shows: login state, expiry, scopes. Never a token."""
    if config.auth is not AuthMode.OAUTH or config.url is None:
        mode = "bearer" if config.api_key_env else config.auth.value
        return {"auth": mode}
    store = store or SealedStore.default()
    out: dict[str, Any] = {"auth": "oauth", "grant": config.oauth_grant, "logged_in": False}
    try:
        record = store.load(config.name)
    except (Unavailable, Denied) as exc:
        return {**out, "problem": exc.message}
    if record is None:
        return out
    if record.get("resource") != resource_url_from_server_url(config.url):
        return {**out, "problem": "the stored login is for another URL (not sent); log in again"}
    tokens = record.get("tokens")
    if not tokens:
        return {**out, "registered": bool(record.get("client_info"))}
    expires = record.get("expires_at")
    return {
        **out,
        "logged_in": True,
        "expires_at": expires,
        "expired": bool(expires and expires < time.time()),
        "refreshable": bool(tokens.get("refresh_token")),
        "scopes": (tokens.get("scope") or "").split(),
    }


def logout(config: ServerConfig, store: SealedStore | None = None) -> bool:
    """Delete the server's sealed record (tokens and registration). True if there was one."""
    return (store or SealedStore.default()).delete(config.name)
