"""The HTTP transports (Streamable HTTP, SSE): their headers, credentials and bounded bodies.

Guarantees: header secrets come from the environment variables the manifest
names (``api_key_env``, ``headers_env``), resolved at connect and registered
with the redactor; ``trust_env=False``, so no ambient proxy or ``.netrc``
credentials reach a server; every non-SSE body is bounded by the
connection's :class:`~._inbound.InboundLimit` (SSE events by the SDK's cap); the cookies a
server sets are kept in a :class:`BoundedCookieJar` (one per connection, sent back only to
that server: at most :data:`MAX_COOKIES`, each at most :data:`MAX_COOKIE_BYTES`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import ssl
from http.cookiejar import Cookie, CookieJar
from typing import TYPE_CHECKING, Any

import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from ...runtime._errors import Unavailable
from ...runtime._redact import Redactor
from ..manifest._load import ServerConfig, Transport
from ..oauth._provider import build_auth
from ._inbound import BoundedTransport, InboundLimit

if TYPE_CHECKING:
    from ..oauth._tokens import SealedStore

__all__ = ["BoundedCookieJar", "http_transport", "resolve_headers"]

# RFC 6265 section 6.1's minimums, which browsers keep to: a server that needs more is not
# an MCP server (the protocol's session is its Mcp-Session-Id header, not a cookie).
MAX_COOKIES = 50  # cookies kept per connection
MAX_COOKIE_BYTES = 4096  # a cookie's name, value, domain and path together


class BoundedCookieJar(CookieJar):
    """A connection's cookie jar that stays small, whatever the server sets.

    The SDK's client keeps every ``Set-Cookie`` of every answer and sends them all back on
    each request: a server that sets new cookies on each answer made the jar (and the
    ``Cookie`` header of every request) grow without end, 1.4 MB after 30 calls. A cookie
    larger than :data:`MAX_COOKIE_BYTES` is dropped; a new one past :data:`MAX_COOKIES` is
    dropped (one already kept can still be replaced or deleted).
    """

    def set_cookie(self, cookie: Cookie) -> None:
        """Keep ``cookie`` only within the bounds (see the class docstring)."""
        parts = (cookie.name, cookie.value, cookie.domain, cookie.path)
        if sum(len(part or "") for part in parts) > MAX_COOKIE_BYTES:
            return
        key = (cookie.domain, cookie.path, cookie.name)
        known = any((c.domain, c.path, c.name) == key for c in self)
        if not known and len(self) >= MAX_COOKIES:
            return
        super().set_cookie(cookie)


def resolve_headers(
    config: ServerConfig, redactor: Redactor, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """HTTP headers from ``api_key_env`` / ``headers_env``, resolved now; secrets registered.

    Raises Unavailable naming the variable when one is not set.
    """
    environ = dict(os.environ) if environ is None else environ
    headers: dict[str, str] = {}

    def get(var: str, key: str) -> str:
        value = environ.get(var)
        if not value:
            raise Unavailable(
                f"server {config.name!r}: {key} names the environment variable {var}, which is not set; "
                "set it before connecting",
                field=key,
            )
        return value

    if config.api_key_env:
        token = get(config.api_key_env, "api_key_env")
        headers["Authorization"] = f"Bearer {token}"
    for header, var in config.headers_env.items():
        headers[header] = get(var, f"headers_env.{header}")
    for value in headers.values():
        redactor.register_credential(value)
    return headers


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one verifying TLS context of this process (the CA bundle, no ambient settings).

    Building a context loads the CA bundle, ~60 ms on this machine class: made
    once per process instead of once per connection. A context is safe to share
    between connections; nothing here changes it after it is made.
    """
    return httpx2.create_ssl_context(trust_env=False)


def http_transport(
    config: ServerConfig,
    stack: contextlib.AsyncExitStack,
    limit: InboundLimit,
    redactor: Redactor,
    event_hooks: dict[str, list[Any]] | None = None,
    token_store: SealedStore | None = None,
) -> Any:
    """The SDK transport for ``config``'s Streamable HTTP or SSE server; its client closes with ``stack``."""
    c = config
    headers = resolve_headers(c, redactor)
    auth = build_auth(c, redactor, token_store)  # None unless auth = "oauth"
    assert c.url is not None
    timeout = httpx2.Timeout(c.connect_timeout_seconds, read=max(300.0, c.call_timeout_seconds))
    if c.transport is Transport.HTTP:
        # trust_env=False: no ambient proxy or .netrc credentials reach a server.
        http = httpx2.AsyncClient(
            # identity: an honest server sends bodies as they are (BoundedTransport still
            # decodes, bounded, what a server compresses anyway).
            headers={"Accept-Encoding": "identity", **headers},
            cookies=BoundedCookieJar(),
            timeout=timeout,
            verify=tls_context(),
            trust_env=False,
            auth=auth,
            event_hooks=event_hooks,
            transport=BoundedTransport(
                httpx2.AsyncHTTPTransport(verify=tls_context(), trust_env=False), limit
            ),
        )
        stack.push_async_callback(http.aclose)
        return streamable_http_client(c.url, http_client=http, max_sse_event_size=limit.max_bytes)

    def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers={"Accept-Encoding": "identity", **(headers or {})},
            cookies=BoundedCookieJar(),
            timeout=timeout,
            auth=auth,
            verify=tls_context(),
            trust_env=False,
            event_hooks=event_hooks,
            # Compressed bodies decoded bounded (the SSE events themselves: the SDK's cap).
            transport=BoundedTransport(
                httpx2.AsyncHTTPTransport(verify=tls_context(), trust_env=False), limit
            ),
        )

    return sse_client(
        c.url,
        headers=headers,
        timeout=c.connect_timeout_seconds,
        sse_read_timeout=max(300.0, c.call_timeout_seconds),
        httpx_client_factory=factory,
        auth=auth,
    )
