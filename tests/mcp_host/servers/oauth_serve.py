"""An OAuth-protected MCP server and its authorization server, on 127.0.0.1, from the SDK's server auth.

``python oauth_serve.py`` binds a free port, prints it once listening, and serves until killed:

- the authorization server (the SDK's ``create_auth_routes`` over an in-memory
  ``OAuthAuthorizationServerProvider``): metadata, dynamic registration, an
  ``/authorize`` that approves at once (the test plays the browser), ``/token``
  with authorization_code (PKCE), refresh_token, and the ``resource`` indicator;
- the protected MCP endpoint ``/mcp`` (the SDK's bearer middleware, PRM at
  ``/.well-known/oauth-protected-resource/mcp``, required scope ``read``);
- step-up: ``tools/call`` of ``write_note`` without scope ``write`` answers 403
  ``insufficient_scope`` with ``scope="read write"``;
- access tokens are HS256 JWTs whose ``aud`` is the requested resource, or
  ``RF_OAUTH_AUD`` when set (to issue wrong-audience tokens); lifetime ``RF_OAUTH_TTL``;
- ``RF_OAUTH_PRM_RESOURCE``: the protected-resource metadata names that resource instead;
- ``RF_OAUTH_NO_PRM=1``: no protected-resource metadata (404: the 2025-03-26 fallback path);
- ``RF_OAUTH_METADATA_ISSUER`` / ``RF_OAUTH_ENDPOINTS``: the authorization-server metadata at
  ``/.well-known/oauth-authorization-server`` names that issuer and puts ``/authorize``,
  ``/token`` and ``/register`` under that base (``{base}`` stands for this server's origin,
  ``{port}`` for its port);
- ``RF_OAUTH_ALSO_BIND``: also listen on that address (the same port), so endpoints can be
  named at a non-loopback address of this machine;
- ``stubborn`` demands scope ``admin-only`` whatever was granted (the step-up limit);
  ``echo_token`` returns the caller's own token (redaction);
- pre-registered clients: ``pre-public`` (public, auth code) and ``m2m`` / ``m2m-secret``
  (client_credentials, client_secret_basic, answered in front of the SDK's ``/token``,
  which has no client_credentials grant);
- SEP-990 (identity assertion): ``POST /idp/token`` is an enterprise IdP's RFC 8693 token
  exchange (client ``idp-client``; subject token ``RF_IDP_ID_TOKEN``) returning an ID-JAG
  for the requested audience and resource; ``/token`` answers the jwt-bearer grant for
  ``xaa`` / ``xaa-secret`` (client_secret_basic) when the ID-JAG's audience is this issuer;
- ``POST /test/revoke-access`` drops every access token (refresh tokens stay);
- ``GET /test/log`` (no auth): every Authorization header received on ``/mcp``, every
  grant, every dynamic registration and every metadata discovery (``/.well-known/…``) path,
  and (``requests``) every request's method and path.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import sys
import time
import warnings
from urllib.parse import parse_qs, unquote

import jwt
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse

warnings.simplefilter("ignore")

SIGNING_KEY = secrets.token_bytes(32)
TTL = int(os.environ.get("RF_OAUTH_TTL", "3600"))
AUD = os.environ.get("RF_OAUTH_AUD")
PRM_RESOURCE = os.environ.get("RF_OAUTH_PRM_RESOURCE")  # protected-resource metadata that lies
NO_PRM = os.environ.get("RF_OAUTH_NO_PRM") == "1"
METADATA_ISSUER = os.environ.get("RF_OAUTH_METADATA_ISSUER")
ENDPOINTS = os.environ.get("RF_OAUTH_ENDPOINTS", "{base}")
ALSO_BIND = os.environ.get("RF_OAUTH_ALSO_BIND")
# The handshake without a token (initialize, the initialized notification, the GET stream):
# the server answers 401 only from tools/list on, as the conformance suite's scope scenarios do.
OPEN_HANDSHAKE = os.environ.get("RF_OAUTH_OPEN_HANDSHAKE") == "1"
_OPEN_METHODS = ("initialize", "notifications/initialized")
LOG: dict[str, list] = {
    "authorization": [],
    "grants": [],
    "registrations": [],
    "discovery": [],
    "requests": [],
}
REDIRECT = "http://127.0.0.1:9/callback"
ID_TOKEN = os.environ.get("RF_IDP_ID_TOKEN", "id-token-of-the-enterprise-user")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


class Provider:
    """In-memory, auto-approving authorization server state."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.access: dict[str, AccessToken] = {}
        self.clients["pre-public"] = OAuthClientInformationFull(
            client_id="pre-public",
            redirect_uris=[REDIRECT],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            scope="read write",
        )

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        client_info.scope = "read write"  # may later step up to every scope it offers
        LOG["registrations"].append(client_info.client_id)
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, grant: str
    ) -> OAuthToken:
        now = int(time.time())
        claims = {
            "sub": "tester",
            "client_id": client_id,
            "iat": now,
            "exp": now + TTL,
            "jti": secrets.token_hex(8),
            "scope": " ".join(scopes),
        }
        if AUD or resource:
            claims["aud"] = AUD or resource
        token = jwt.encode(claims, SIGNING_KEY, algorithm="HS256")
        # Accepted a little past the advertised expiry: the client must refresh by its own clock.
        self.access[token] = AccessToken(
            token=token,
            client_id=client_id,
            scopes=scopes,
            expires_at=now + TTL + 5,
            resource=resource,
        )
        refresh = secrets.token_urlsafe(24)
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        LOG["grants"].append({"grant": grant, "scopes": scopes, "resource": resource})
        return OAuthToken(
            access_token=token, expires_in=TTL, scope=" ".join(scopes), refresh_token=refresh
        )

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode):
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            "authorization_code",
        )

    async def load_refresh_token(self, client, refresh_token: str):
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]):
        self.refresh.pop(refresh_token.token, None)
        return self._issue(
            client.client_id,
            scopes or refresh_token.scopes,
            refresh_token.resource,
            "refresh_token",
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token) -> None:
        self.access.pop(getattr(token, "token", ""), None)


def build(port: int):
    base = f"http://127.0.0.1:{port}"
    provider = Provider()
    # RF_OAUTH_OPEN_HANDSHAKE: the one credential the handshake's sessions are opened with.
    internal_token = secrets.token_urlsafe(24)
    provider.access[internal_token] = AccessToken(
        token=internal_token, client_id="open-handshake", scopes=["read"],
        expires_at=int(time.time()) + 86400, resource=f"{base}/mcp",
    )  # fmt: skip
    internal = f"Bearer {internal_token}"
    mcp = MCPServer(
        name="oauth-peer",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            required_scopes=["read"],
            # A 2025-03-26 client (no protected-resource metadata) sends no resource indicator.
            validate_token_resource=not NO_PRM,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["read", "write"], default_scopes=["read"]
            ),
        ),
    )

    @mcp.tool()
    def whoami() -> str:
        """Say hello to the authenticated caller."""
        return "hello, authorized caller"

    @mcp.tool()
    def write_note(text: str) -> str:
        """Needs scope write (step-up)."""
        return f"wrote {text}"

    @mcp.tool()
    def stubborn() -> str:
        """Never satisfied (asks for scope admin-only every time)."""
        return "unreachable"

    @mcp.tool()
    def echo_token() -> str:
        """Returns the caller's own access token (a leak the host must redact)."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        found = get_access_token()
        return f"your token is {found.token if found else None}"

    @mcp.custom_route("/test/revoke-access", methods=["POST"])
    async def revoke_access(request: Request) -> JSONResponse:
        provider.access.clear()  # every access token now fails; refresh tokens still work
        return JSONResponse({"ok": True})

    @mcp.custom_route("/test/log", methods=["GET"])
    async def log(request: Request) -> JSONResponse:
        return JSONResponse(LOG)

    app = mcp.streamable_http_app()
    prm = f"{base}/.well-known/oauth-protected-resource/mcp"

    async def respond(send, status: int, payload: dict, extra: list | None = None) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *(extra or [])],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(payload).encode()})

    async def client_credentials(headers: dict, body: bytes, send) -> None:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        basic = headers.get("authorization", "")
        user, _, secret = (
            base64.b64decode(basic[6:]).decode().partition(":")
            if basic.startswith("Basic ")
            else ("", "", "")
        )
        if (unquote(user), unquote(secret)) != ("m2m", "m2m-secret"):
            return await respond(send, 401, {"error": "invalid_client"})
        token = provider._issue(
            "m2m", (form.get("scope") or "read").split(), form.get("resource"), "client_credentials"
        )
        await respond(send, 200, token.model_dump(exclude_none=True))

    def basic_client(headers: dict) -> tuple[str, str]:
        basic = headers.get("authorization", "")
        if not basic.startswith("Basic "):
            return "", ""
        user, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
        return unquote(user), unquote(secret)

    async def token_exchange(body: bytes, send) -> None:
        """The enterprise IdP (RFC 8693): an ID token in, an ID-JAG out."""
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        LOG["grants"].append(
            {
                "grant": "token_exchange",
                "audience": form.get("audience"),
                "resource": form.get("resource"),
                "requested_token_type": form.get("requested_token_type"),
            }
        )
        if form.get("subject_token") != ID_TOKEN or form.get("client_id") != "idp-client":
            return await respond(send, 400, {"error": "invalid_grant"})
        claims = {
            "iss": f"{base}/idp",
            "sub": "tester",
            "aud": form.get("audience"),
            "resource": form.get("resource"),
            "client_id": "xaa",
            "exp": int(time.time()) + 300,
        }
        jag = jwt.encode(
            claims, SIGNING_KEY, algorithm="HS256", headers={"typ": "oauth-id-jag+jwt"}
        )
        await respond(
            send, 200, {"access_token": jag, "issued_token_type": ID_JAG, "token_type": "N_A"}
        )

    async def jwt_bearer(headers: dict, body: bytes, send) -> None:
        """The authorization server's RFC 7523 grant for an ID-JAG issued to this issuer."""
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if basic_client(headers) != ("xaa", "xaa-secret"):
            return await respond(send, 401, {"error": "invalid_client"})
        try:
            claims = jwt.decode(
                form.get("assertion", ""), SIGNING_KEY, algorithms=["HS256"], audience=base
            )
        except jwt.PyJWTError:
            return await respond(send, 400, {"error": "invalid_grant"})
        scopes = (form.get("scope") or "read").split()
        token = provider._issue("xaa", scopes, claims.get("resource"), "jwt_bearer")
        await respond(send, 200, token.model_dump(exclude_none=True))

    async def guarded(scope, receive, send):
        """Record Authorization headers on /mcp; step-up for write_note and stubborn."""
        if scope["type"] != "http":
            return await app(scope, receive, send)
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["path"] != "/test/log":
            LOG["requests"].append(f"{scope['method']} {scope['path']}")
        if scope["path"].startswith("/.well-known/"):
            LOG["discovery"].append(scope["path"])
        if NO_PRM and scope["path"].startswith("/.well-known/oauth-protected-resource"):
            return await respond(send, 404, {"error": "not_found"})
        if METADATA_ISSUER and scope["path"] == "/.well-known/oauth-authorization-server":
            at = ENDPOINTS.format(base=base, port=port)
            metadata = {
                "issuer": METADATA_ISSUER.format(base=base),
                "authorization_endpoint": f"{at}/authorize",
                "token_endpoint": f"{at}/token",
                "registration_endpoint": f"{at}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_post", "none"],
                "scopes_supported": ["read", "write"],
            }
            return await respond(send, 200, metadata)
        if scope["path"] == "/token" and b"grant_type=client_credentials" in body:
            return await client_credentials(headers, body, send)
        if scope["path"] == "/idp/token":
            return await token_exchange(body, send)
        if scope["path"] == "/token" and parse_qs(body.decode()).get("grant_type") == [JWT_BEARER]:
            return await jwt_bearer(headers, body, send)
        if PRM_RESOURCE and scope["path"].startswith("/.well-known/oauth-protected-resource"):
            return await respond(
                send, 200, {"resource": PRM_RESOURCE, "authorization_servers": [base]}
            )
        if not scope["path"].startswith("/mcp"):
            return await app(scope, replay, send)
        LOG["authorization"].append(headers.get("authorization"))
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        method = payload.get("method") if isinstance(payload, dict) else None
        tool = (
            payload.get("params", {}).get("name")
            if isinstance(payload, dict) and payload.get("method") == "tools/call"
            else None
        )
        found = await provider.load_access_token((headers.get("authorization") or "")[7:])
        needed = {"write_note": "write", "stubborn": "admin-only"}.get(tool or "")
        if found is not None and needed and needed not in found.scopes:
            challenge = (
                f'Bearer error="insufficient_scope", scope="read write", resource_metadata="{prm}"'
            )
            return await respond(
                send,
                403,
                {"error": "insufficient_scope"},
                [(b"www-authenticate", challenge.encode())],
            )
        if OPEN_HANDSHAKE:
            # The handshake passes without a token; a request with a valid token goes on in the
            # session the handshake opened (the SDK's server would bind the session to the
            # handshake's credential: every request runs on a token of the server's own).
            anonymous = "authorization" not in headers and (
                scope["method"] in ("GET", "DELETE") or method in _OPEN_METHODS
            )
            if anonymous or found is not None:
                rest = [(k, v) for k, v in scope["headers"] if k.lower() != b"authorization"]
                scope = {**scope, "headers": [*rest, (b"authorization", internal.encode())]}
        return await app(scope, replay, send)

    return guarded


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    if ALSO_BIND:  # the same port on another (non-loopback) address of this machine
        other = socket.socket()
        other.bind((ALSO_BIND, port))
        other.listen(64)
        other.set_inheritable(True)
        config.bind.append(f"fd://{other.fileno()}")
    config.accesslog = None
    config.errorlog = None

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await serve(build(port), config, task_status=task_status)

    async with trio.open_nursery() as n:
        await n.start(run)
        print(port, flush=True)


if __name__ == "__main__":
    trio.run(main)
    sys.exit(0)
