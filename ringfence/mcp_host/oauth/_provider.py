"""OAuth 2.1 for remote MCP servers (MCP authorization), built on the SDK's own client auth.

The protocol work is the SDK's ``OAuthClientProvider`` (an ``httpx2.Auth``):
protected-resource metadata discovery (RFC 9728, from ``WWW-Authenticate`` and
the well-known URLs), authorization-server metadata and OIDC discovery with the
2025-03-26 fallbacks, dynamic client registration, client ID metadata
documents, PKCE, the ``resource`` parameter (RFC 8707), scope selection and
step-up on ``insufficient_scope``, refresh tokens, the token-endpoint auth
methods, (``ClientCredentialsOAuthProvider``) the client_credentials grant, and
(``IdentityAssertionOAuthProvider``, in :mod:`._xaa`) SEP-990 identity assertion.
This module adds what a governed host needs around it:

- **Storage**: :class:`SealedTokenStorage` keeps tokens and client registrations
  sealed (:mod:`._tokens`), bound to the server's canonical resource URL. A
  record for another URL (the manifest entry now points elsewhere) is never
  loaded, so its token is never sent. Tokens, refresh tokens and client secrets
  are registered with the session's redactor as soon as they are loaded or
  received, so they never appear in events, diagnostics or errors.
- **Audience**: a token that is a JWT whose ``aud`` names neither this server's
  resource nor a parent of it is refused when received (not stored) and never
  attached to a request.
- **No surprise browsers**: a session never starts an interactive login. A 401
  that refresh cannot fix, or a step-up that needs new consent, raises
  ``Unavailable`` naming ``ringfence mcp login SERVER`` - unless a login flow is
  installed (:func:`login_flow`, used by ``mcp login`` and tests).
- **Bounded step-up**: at most :data:`MAX_STEP_UPS` re-authorizations for more
  scope per provider (one connection); past that the request is refused.
- **Issuer**: the SDK's exact RFC 8414 §3.3 match stands, except on the 2025-03-26
  fallback (no protected-resource metadata), where metadata from the server's origin
  may name an issuer on that same origin (:meth:`_Guarded._legacy_issuer_to_accept`).
- Expiry survives a restart (the SDK forgets it), so a stored expired token is
  refreshed before use instead of being sent.

Not promised: token revocation at logout (the sealed record is deleted; the
authorization server may still honour the token until it expires).

About 640 lines on purpose: the storage adapter, the guarded provider and its
three grant variants share one set of checks (audience, step-up, refresh before
asking) that must not drift apart; the login command lives in :mod:`._login`.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
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
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    extract_field_from_www_auth,
    issuers_match,
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

from ...runtime import Denied, InvalidArguments, Redactor, Unavailable
from .._urls import scrub_url
from ..manifest._load import AuthMode, ServerConfig
from ._tokens import SealedStore, credential_from_env, token_audience_ok

__all__ = [
    "MAX_STEP_UPS",
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


# -- storage ---------------------------------------------------------------------------------


class SealedTokenStorage:
    """The SDK's ``TokenStorage`` over a sealed record bound to one server's resource URL."""

    def __init__(
        self,
        config: ServerConfig,
        redactor: Redactor,
        store: SealedStore | None = None,
        redirect_uri: str | None = None,
    ) -> None:
        assert config.url is not None
        self.name = config.name
        self.resource = resource_url_from_server_url(config.url)
        self.redactor = redactor
        self.store = store or SealedStore.default()
        self.redirect_uri = redirect_uri
        self.preregistered = config.client_id is not None
        # Set by the provider: the discovery results to keep with the tokens, so a refresh
        # after a restart goes to the discovered token endpoint with the right resource.
        self.discovered: Callable[[], dict[str, Any]] = dict
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
        record = await self._load()
        if not record or not record.get("tokens"):
            return None
        tokens = OAuthToken.model_validate(record["tokens"])
        self._register(tokens.access_token, tokens.refresh_token)
        return tokens

    async def restore(self) -> dict[str, Any]:
        """Expiry and discovery results kept with the tokens (empty when there are none)."""
        record = await self._load()
        if not record or not record.get("tokens"):
            return {}
        return {k: record.get(k) for k in ("expires_at", "as_metadata", "prm")}

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


# -- providers -------------------------------------------------------------------------------


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


class _Guarded:
    """What ringfence adds to the SDK providers (mixed in before them)."""

    context: Any
    _initialized: bool
    _server_name: str
    _config: ServerConfig
    _storage: SealedTokenStorage
    _interactive: bool
    _step_ups: int
    # The issuer accepted on the 2025-03-26 fallback path (see _legacy_issuer_to_accept).
    _legacy_issuer: str | None = None

    def _guard(
        self, config: ServerConfig, storage: SealedTokenStorage, *, interactive: bool
    ) -> None:
        """Set what the guard reads; ``interactive``: a 401 may be answered by a fresh grant."""
        self._server_name = config.name
        self._config = config
        self._storage = storage
        self._interactive = interactive
        self._step_ups = 0

    def _expected_issuer(self) -> str:
        # The SDK's hook for the issuer that metadata and client credentials must name. Changed
        # only on the fallback path (no protected-resource metadata), once a same-origin issuer
        # was accepted there; with RFC 9728 metadata the SDK's exact RFC 8414 §3.3 match stands.
        if self.context.auth_server_url is None and self._legacy_issuer is not None:
            return self._legacy_issuer
        return super()._expected_issuer()  # type: ignore[misc, no-any-return]

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
        if (
            self.context.auth_server_url is not None
            or self._legacy_issuer is not None
            or response.status_code != 200
        ):
            return None
        # One URL on the fallback path; if the SDK ever returns more, this fails (Unavailable).
        (fallback,) = build_oauth_authorization_server_metadata_discovery_urls(
            None, self.context.server_url
        )
        fetched = str(outgoing.url)
        if _origin(fetched) != _origin(fallback) or outgoing.url.path != urlsplit(fallback).path:
            return None
        try:  # read here, kept for the SDK's own read of the same response
            issuer = str(OAuthMetadata.model_validate_json(await response.aread()).issuer)
        except ValidationError:
            return None  # the SDK reports it
        parts = urlsplit(issuer)
        if issuers_match(issuer, super()._expected_issuer()):  # type: ignore[misc]
            return None  # the SDK accepts it as it is
        if _origin(issuer) is None or _origin(issuer) != _origin(fetched):
            return None  # another origin: the SDK refuses it
        if parts.query or parts.fragment:
            return None  # not an issuer identifier (RFC 8414 §2): the SDK refuses it
        return issuer

    def _discovered(self) -> dict[str, Any]:
        ctx = self.context
        out: dict[str, Any] = {}
        if ctx.oauth_metadata is not None:
            out["as_metadata"] = ctx.oauth_metadata.model_dump(mode="json", exclude_none=True)
        if ctx.protected_resource_metadata is not None:
            out["prm"] = ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
        return out

    async def _initialize(self) -> None:
        await super()._initialize()  # type: ignore[misc]
        self._storage.discovered = self._discovered
        kept = await self._storage.restore()
        # The SDK keeps neither expiry nor discovery across processes: without them a stored
        # expired token would be sent, and its refresh would go to the resource's own origin.
        self.context.token_expiry_time = kept.get("expires_at")
        if kept.get("as_metadata") and self.context.oauth_metadata is None:
            self.context.oauth_metadata = OAuthMetadata.model_validate(kept["as_metadata"])
        if kept.get("prm") and self.context.protected_resource_metadata is None:
            prm = ProtectedResourceMetadata.model_validate(kept["prm"])
            self.context.protected_resource_metadata = prm
            self.context.auth_server_url = str(prm.authorization_servers[0])

    def _add_auth_header(self, request: httpx2.Request) -> None:
        tokens = self.context.current_tokens
        if tokens is None or not token_audience_ok(tokens.access_token, self._storage.resource):
            return  # a token for another audience is never sent
        super()._add_auth_header(request)  # type: ignore[misc]

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._initialized and self.context.is_token_valid():
            # A valid token in hand needs no auth work, so no lock: the SDK holds its context
            # lock across the whole request, which serializes a connection's concurrent
            # requests (the transport's GET stream and its POSTs: one more round trip per
            # connect). Anything else the response asks for goes to the full flow below,
            # which sends the request again under the lock (refresh, step-up, refusal).
            self.context.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
            self._add_auth_header(request)
            response = yield request
            if not _asks_for_auth(response):
                return
        flow = super()._auth_flow(request)  # type: ignore[misc]
        originals = 0
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request:
                    originals += 1
                    if originals == 1 and self._may_refresh_instead(response):
                        # A rejected token with a refresh token: refresh once, retry once,
                        # rather than start an authorization nobody is there to complete.
                        refreshed = yield await self._refresh_token()  # type: ignore[attr-defined]
                        if await self._handle_refresh_response(refreshed):  # type: ignore[attr-defined]
                            self._add_auth_header(request)
                            response = yield request
                    refusal = self._check_challenge(response) if originals == 1 else None
                    if refusal is not None:
                        self._answer_refusal(request, response, refusal)
                        return
                legacy_issuer = await self._legacy_issuer_to_accept(outgoing, response)
                if legacy_issuer is not None:
                    # The SDK fixed its expected issuer before this fetch and would refuse; run
                    # its flow again from the request with that issuer expected (the fallback
                    # discovery is repeated once; the original request counts as sent already).
                    await flow.aclose()
                    self._legacy_issuer = legacy_issuer
                    flow = super()._auth_flow(request)  # type: ignore[misc]
                    outgoing = await flow.__anext__()
                    continue
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except (OAuthFlowError, OAuthTokenError, OAuthRegistrationError, ValueError) as exc:
            raise Unavailable(
                f"MCP server {self._server_name!r}: OAuth authorization failed "
                f"({type(exc).__name__}: {scrub_url(str(exc), self._config.url)[:300]}); "
                f"{_login_hint(self._server_name)}",
                field="auth",
            ) from None
        finally:
            await flow.aclose()

    def _answer_refusal(
        self, request: httpx2.Request, response: httpx2.Response, refusal: Exception
    ) -> None:
        """Surface a refusal without breaking the connection.

        Raising out of the auth flow during ``initialize`` fails the connect with
        this error itself. During a later request the SDK transport would treat a
        raise as a dead stream, so the 401/403 is rewritten into a JSON-RPC error
        carrying the message (the transport surfaces such a body as the request's
        error) and the connection stays usable for calls that need no more scope.
        """
        try:
            method = json.loads(request.content or b"{}").get("method")
        except (ValueError, AttributeError):
            method = None
        if method in (None, "initialize"):
            raise refusal
        body = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32603, "message": getattr(refusal, "message", str(refusal))},
        }
        response.headers["content-type"] = "application/json"
        response._content = json.dumps(body).encode()  # read by the transport's aread()
        response.stream = httpx2.ByteStream(response._content)

    def _may_refresh_instead(self, response: httpx2.Response) -> bool:
        return (
            response.status_code == 401
            and not self._interactive
            and self.context.can_refresh_token()
        )

    def _check_challenge(self, response: httpx2.Response) -> Exception | None:
        """The refusal, decided before any authorization work, of what may not be done now."""
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


class RingfenceOAuthProvider(_Guarded, OAuthClientProvider):
    """Authorization code + PKCE (dynamic, metadata-document or pre-registered client)."""

    def __init__(
        self,
        config: ServerConfig,
        storage: SealedTokenStorage,
        flow: LoginFlow | None,
        client_secret: str | None,
    ) -> None:
        assert config.url is not None
        redirect_uri = flow.redirect_uri if flow else _NO_REDIRECT
        metadata = OAuthClientMetadata(
            client_name="ringfence",
            redirect_uris=[redirect_uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_basic" if client_secret else "none",
            scope=" ".join(config.scopes) or None,
        )
        super().__init__(
            config.url,
            metadata,
            storage,
            redirect_handler=flow.redirect if flow else None,
            callback_handler=flow.callback if flow else None,
            client_metadata_url=config.client_metadata_url,
        )
        self._guard(config, storage, interactive=flow is not None)
        self._fixed: OAuthClientInformationFull | None = None
        if config.client_id is not None:
            self._fixed = OAuthClientInformationFull(
                client_id=config.client_id,
                client_secret=client_secret,
                redirect_uris=[redirect_uri],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
                token_endpoint_auth_method="client_secret_basic" if client_secret else "none",
                scope=metadata.scope,
            )

    async def _initialize(self) -> None:
        await super()._initialize()
        if self._fixed is not None:
            self.context.client_info = self._fixed  # pre-registered: never registers


def _grant_args(config: ServerConfig, storage: SealedTokenStorage) -> dict[str, Any]:
    """The SDK arguments the two client_credentials providers share (all but the client's proof)."""
    return {
        "server_url": config.url,
        "storage": storage,
        "client_id": config.client_id,
        "scope": " ".join(config.scopes) or None,
        "issuer": config.oauth_issuer,
    }


class RingfenceClientCredentials(_Guarded, ClientCredentialsOAuthProvider):
    """client_credentials with client_id + secret (machine to machine; never interactive)."""

    def __init__(self, config: ServerConfig, storage: SealedTokenStorage, secret: str) -> None:
        assert config.url is not None and config.client_id is not None
        with warnings.catch_warnings():
            # Omitting issuer is the SDK's deprecated-but-supported mode; the manifest makes it optional.
            warnings.simplefilter("ignore")
            super().__init__(**_grant_args(config, storage), client_secret=secret)
        self._guard(config, storage, interactive=True)  # a fresh grant needs no person


class RingfenceClientKeyJWT(_Guarded, PrivateKeyJWTOAuthProvider):
    """client_credentials authenticated by a signed JWT assertion (RFC 7523, private_key_jwt)."""

    def __init__(self, config: ServerConfig, storage: SealedTokenStorage, key_pem: str) -> None:
        assert config.url is not None and config.client_id is not None
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
            warnings.simplefilter("ignore")  # issuer optional (see RingfenceClientCredentials)
            super().__init__(
                **_grant_args(config, storage),
                assertion_provider=params.create_assertion_provider(),
            )
        self._guard(config, storage, interactive=True)  # a fresh grant needs no person


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
        from ._xaa import RingfenceIdentityAssertion  # imports this module

        assert secret is not None  # the manifest requires client_secret_env for this grant
        return RingfenceIdentityAssertion(config, storage, redactor, secret)
    if config.oauth_grant == "client_credentials":
        key_pem = credential_from_env(config, "client_key_env", redactor)
        if key_pem is not None:
            return RingfenceClientKeyJWT(config, storage, key_pem)
        assert secret is not None
        return RingfenceClientCredentials(config, storage, secret)
    return RingfenceOAuthProvider(config, storage, flow, secret)


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
