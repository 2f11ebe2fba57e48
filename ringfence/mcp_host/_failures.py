"""Connection failures a person can act on: the cause and the fix, named.

:func:`translate_error` (``transport._pool``) maps what the SDK raised into the
error tree; :func:`explain` then says *why* in the user's terms, from facts
ringfence has itself:

- **HTTP 401/403.** The SDK's Streamable HTTP client turns every non-2xx answer
  to a request (other than 404) into the JSON-RPC error ``-32603 "Server
  returned an error response"``, dropping the status. :class:`HttpStatusLog`
  sees every HTTP response on the connection's own ``httpx2`` client (an event
  hook), so the status is mapped back from the response ringfence received,
  never from text a server wrote. A 401/403 names what to fix: the variable of
  ``api_key_env`` / ``headers_env``, ``ringfence mcp login NAME`` for OAuth, or
  that no credential is configured at all.
- **Unreachable.** A refused connection, a name that does not resolve, or
  another socket failure names ``host:port`` (never the path, query or
  userinfo of the URL, which may hold secrets).
- **Protocol version.** A server that answers ``initialize`` with a version
  the SDK does not speak (or ``-32022``) is named with the version it offered
  and the versions ringfence speaks.

Every explained error is :class:`~ringfence.runtime.Unavailable` (the server
cannot be used as configured) with ``details`` carrying ``status``/``host``/
``reason`` so ``--json`` readers need not parse the message. Not promised: a
cause for failures the transport does not report (a proxy's HTML page, a
server that closes the stream without a status).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp import MCPError, types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..runtime._errors import RingfenceError, Unavailable
from ..runtime._groups import first_error
from .manifest._load import AuthMode, ServerConfig

__all__ = ["HttpStatusLog", "explain", "host_port"]

# The text the SDK puts in the -32603 it makes up for a non-2xx answer.
SDK_STATUS_STANDIN = "Server returned an error response"
# A status recorded longer ago than this is not the cause of what failed now.
STATUS_MAX_AGE_SECONDS = 60.0
_UNSUPPORTED_VERSION = "Unsupported protocol version from the server: "


@dataclass(frozen=True)
class HttpFailure:
    """One HTTP answer of 400 or above, as received (no body, no header values but the challenge)."""

    status: int
    method: str
    www_authenticate: str
    at: float


class HttpStatusLog:
    """The last HTTP error status one server's connection received (an ``httpx2`` response hook).

    Install with ``httpx2.AsyncClient(event_hooks=log.hooks())``. :meth:`take`
    returns the recorded failure once and forgets it, so a later failure is not
    explained by an old status. Concurrent requests share the log: a status
    may be attributed to a neighbour's failure on the same connection, which
    for 401/403 (connection-wide) says the same thing.
    """

    def __init__(self) -> None:
        self._last: HttpFailure | None = None

    def hooks(self) -> dict[str, list[Any]]:
        return {"response": [self.on_response]}

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._last = HttpFailure(
                response.status_code,
                response.request.method,
                response.headers.get("www-authenticate", "")[:500],
                time.monotonic(),
            )

    def take(self) -> HttpFailure | None:
        last, self._last = self._last, None
        if last is None or time.monotonic() - last.at > STATUS_MAX_AGE_SECONDS:
            return None
        return last


def host_port(url: str | None) -> str:
    """``host:port`` of ``url`` (the scheme's default port when none is written); ``?`` if unreadable."""
    try:
        parts = urlsplit(url or "")
        host = parts.hostname or "?"
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme, 0)
    except ValueError:
        return "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def explain(
    error: RingfenceError,
    exc: BaseException,
    config: ServerConfig,
    action: str,
    log: HttpStatusLog | None = None,
) -> RingfenceError:
    """``error`` (translated from ``exc``) with its cause named, or ``error`` itself.

    ``log`` is the connection's :class:`HttpStatusLog` (None for stdio).
    """
    exc = first_error(exc)
    failure = log.take() if log is not None else None  # consumed either way: never stale
    if isinstance(exc, RingfenceError):
        return error  # ringfence's own (e.g. the OAuth provider's): it already says why
    who = f"MCP server {config.name!r}"
    status = error.details.get("status") if isinstance(error.details.get("status"), int) else None
    if status is None and failure is not None and _is_status_standin(exc):
        status = failure.status
    if status is not None:
        # A status is a fact about one request, not the connection: it stays as usable as
        # translate_error judged (an OAuth provider's step-up count lives on it).
        broken = bool(error.details.get("broken"))
        return _explain_status(status, failure, config, action, broken)
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        where = host_port(config.url)
        reason, fix = _connect_reason(exc)
        return Unavailable(
            f"{who} could not be reached at {where} during {action}: {reason}{fix}",
            broken=True,
            host=where,
            reason=reason,
        )
    version = _offered_version(exc)
    if version is not None:
        speaks = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
        return Unavailable(
            f"{who} offered MCP protocol version {version!r}, which ringfence does not speak "
            f"({speaks}); update the server (or ringfence) so they share a version",
            broken=True,
            reason="protocol_version",
            offered=version,
        )
    return error


def _is_status_standin(exc: BaseException) -> bool:
    return (
        isinstance(exc, MCPError)
        and exc.code == types.INTERNAL_ERROR
        and exc.error.message == SDK_STATUS_STANDIN
    )


def _credential_fix(config: ServerConfig, status: int, challenge: str) -> tuple[str, str | None]:
    """What to change for a 401/403, and the manifest field it is about."""
    name = config.name
    if config.auth is AuthMode.OAUTH:
        if status == 403:
            return (
                f"the OAuth token was refused for this operation; log in again with the scopes it "
                f"needs: ringfence mcp login {name}",
                "scopes",
            )
        return (f"log in (again): ringfence mcp login {name}", "auth")
    variables = []
    if config.api_key_env:
        variables.append(f"${config.api_key_env} (api_key_env)")
    variables += [f"${var} (headers_env.{header})" for header, var in config.headers_env.items()]
    if variables:
        shown = " and ".join(variables)
        if status == 403:
            return (
                f"the credential in {shown} was accepted but lacks permission for this "
                "(or the server refuses this client); check its scopes or roles",
                "api_key_env" if config.api_key_env else "headers_env",
            )
        return (
            f"the credential in {shown} was refused; check its value (is it current, for this "
            "server?)",
            "api_key_env" if config.api_key_env else "headers_env",
        )
    oauth = "resource_metadata" in challenge.lower() or "bearer" in challenge.lower()
    hint = (
        f"the server asks for OAuth: ringfence mcp add {name} --transport "
        f"{config.transport.value} --url … --auth oauth, then ringfence mcp login {name}"
        if oauth
        else f"set api_key_env (ringfence mcp add {name} … --api-key-env VAR) or use --auth oauth"
    )
    return (f"no credential is configured for this server; {hint}", "api_key_env")


def _explain_status(
    status: int, failure: HttpFailure | None, config: ServerConfig, action: str, broken: bool
) -> RingfenceError:
    who = f"MCP server {config.name!r}"
    label = {401: "Unauthorized", 403: "Forbidden"}.get(status, "")
    said = f"HTTP {status}" + (f" {label}" if label else "")
    details: dict[str, Any] = {"status": status}
    if broken:
        details["broken"] = True
    if status in (401, 403):
        fix, field = _credential_fix(config, status, failure.www_authenticate if failure else "")
        return Unavailable(f"{who} answered {said} during {action}: {fix}", field=field, **details)
    return Unavailable(f"{who} answered {said} during {action}", **details)


def _connect_reason(exc: BaseException) -> tuple[str, str]:
    """(what happened, how to fix it) for a failed TCP/TLS connect, from the OS error underneath."""
    # The OS error sits under httpx's and httpcore's, and under anyio's group of attempts.
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        cause = pending.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror):
            return "the host name does not resolve (DNS)", "; check the URL's host"
        if isinstance(cause, ConnectionRefusedError):
            return (
                "the connection was refused (nothing is listening there)",
                "; is the server running?",
            )
        if isinstance(cause, BaseExceptionGroup):
            pending.extend(cause.exceptions)
        pending.extend(c for c in (cause.__cause__, cause.__context__) if c is not None)
    text = str(exc).lower()
    if isinstance(exc, httpx2.ConnectTimeout) or "timed out" in text:
        return "the connection timed out", "; is the host reachable from here?"
    if (
        "name or service not known" in text
        or "nodename nor servname" in text
        or "getaddrinfo" in text
    ):
        return "the host name does not resolve (DNS)", "; check the URL's host"
    if "connection refused" in text:
        return "the connection was refused (nothing is listening there)", "; is the server running?"
    if "certificate" in text or "ssl" in text or "tls" in text:
        return "the TLS handshake failed (certificate or protocol)", ""
    return f"the connection failed ({type(exc).__name__})", ""


def _offered_version(exc: BaseException) -> str | None:
    if isinstance(exc, RuntimeError) and str(exc).startswith(_UNSUPPORTED_VERSION):
        return str(exc)[len(_UNSUPPORTED_VERSION) :].strip()[:64]
    if isinstance(exc, MCPError) and exc.code == types.UNSUPPORTED_PROTOCOL_VERSION:
        # The server refused ours; what it supports is the version(s) it offers.
        data = getattr(exc.error, "data", None)
        supported = data.get("supported") if isinstance(data, dict) else None
        if isinstance(supported, list) and supported:
            return ", ".join(str(v) for v in supported)[:64]
        return "unknown"
    return None
