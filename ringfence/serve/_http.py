"""Streamable HTTP: the SDK's app behind ringfence's request guard, served by hypercorn on trio.

Checks, in this order, on every HTTP request before the MCP app sees it:

1. ``Host`` must be one of the allowed values (exact ``host:port`` strings;
   by default the loopback names with the bound port), else **421**. This is
   what defeats DNS rebinding: a page on ``evil.example`` that re-resolves its
   name to 127.0.0.1 still sends ``Host: evil.example:PORT``.
2. ``Origin``, when present, must be one of the allowed origins (by default
   ``http://<loopback name>:<port>``), else **403**. Browsers send it on
   cross-origin requests; non-browser clients usually send none.
3. ``Authorization: Bearer <token>`` must carry the server's token (compared in
   constant time), else **401** with ``WWW-Authenticate: Bearer``.

A refused request gets a short plain-text body and nothing else happens: no
MCP session is created, no body is parsed, no tool is listed or called.

4. An admitted request's body is read here, bounded, before the MCP app sees
   it: a body over :data:`~._defaults.MAX_REQUEST_BYTES` (32 MiB; a declared
   ``Content-Length`` over it is refused before a byte is read) gets **413** with
   a JSON-RPC error (``-32600``) naming the limit, and is never held whole or
   parsed; the server keeps serving. The body must arrive whole within
   :data:`~._defaults.BODY_SECONDS` (30 s) of the headers, else **408**; the
   bodies being read at once hold at most
   :data:`~._defaults.MAX_PENDING_BODY_BYTES` (128 MiB, a declared length
   counted before a byte is read) and number at most
   :data:`~._defaults.MAX_PENDING_BODIES` (64), else **503** at once: so
   clients trickling their bodies hold neither a connection nor memory for
   long, however many there are. (Headers are hypercorn's: an unfinished
   request line or header block is cut off at its ``keep_alive_timeout``, 5 s.)
   Connections are held at most the admitted requests' bound plus
   :data:`CONNECTION_HEADROOM` at once; beyond it the oldest that never passed
   these checks is closed (:mod:`._connections`), so idle connections without
   the token cannot take the descriptors the kernel needs.

Refusals are audited in the event stream at a bounded cost (:class:`RefusalAudit`):
the first ``per_window`` refusals of each window (default 20 per 60 s) become one
``serve_refused`` record each, with the path cut to head…tail of at most 256
characters (control and bidi characters escaped) and its full length; the rest
of the window is counted and summed up in one ``serve_refused_summary`` record
(count, statuses, up to 16 client addresses) when the window ends or the server
stops. So a flood of unauthenticated requests grows the log by a bounded amount
per window, whatever the request rate or path length.

Clients that go away: a request whose client disconnected before its body was
whole never reaches the MCP app (there is no one to answer); once a response
was sent whole, anything the app still sends is dropped and anything it
raises is logged at debug level only (the SDK answering a request of a
session that a concurrent ``DELETE`` just ended, say). Each MCP session's end
(``DELETE``, 404, idle, shutdown: :mod:`._sessions`) drops what ringfence held
for it: its grants, its log subscription, its resumable events.

Binding: loopback by default. A non-loopback bind is refused unless a token
was configured explicitly (not generated for this run) *and* the operator
states that TLS is terminated in front (``behind_tls_proxy``), because the
bearer token would otherwise cross the network in clear text.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import json
import logging
import math
import secrets
import unicodedata
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import trio
from hypercorn.config import Config
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..runtime._errors import InvalidArguments
from ..runtime._groups import single_error
from ..runtime._kernel import Kernel
from ..runtime._net import is_loopback
from ._connections import Admitted, ConnectionLimit, serve_bounded
from ._defaults import (
    BODY_SECONDS,
    DEFAULT_PORT,
    DEFAULT_SESSION_IDLE_SECONDS,
    HEADERS_SECONDS,
    MAX_HELD_BODY_BYTES,
    MAX_OPEN_REQUESTS,
    MAX_PENDING_BODIES,
    MAX_PENDING_BODY_BYTES,
    MAX_REQUEST_BYTES,
    MAX_SESSIONS,
    MIN_TOKEN_LENGTH,
    SMALL_BODY_BYTES,
    TOKEN_ENV,
)
from ._logging import LogForwarder
from ._memory import QuietTrim
from ._resume import RETRY_MILLISECONDS, SessionEventStore, track_request
from ._server import build_server
from ._sessions import SWEEP_SECONDS, SessionLifetimes

__all__ = [
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "HttpOptions",
    "RefusalAudit",
    "RequestGuard",
    "bind_refusal",
    "check_bind",
    "check_token",
    "host_literal",
    "is_loopback",
    "serve_http",
]

MCP_PATH = "/mcp"
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# What the server and hypercorn log (a caller's logging configuration decides where it goes).
LOGGER = logging.getLogger("ringfence.serve")


def check_token(value: str | None) -> str | None:
    """The operator's token (the command line's ``RINGFENCE_SERVE_TOKEN``), None when unset or
    empty; raises InvalidArguments if it is too short or padded."""
    if value is None or value == "":
        return None
    if len(value) < MIN_TOKEN_LENGTH or value.strip() != value:
        raise InvalidArguments(
            f"${TOKEN_ENV} must be at least {MIN_TOKEN_LENGTH} characters with no "
            "surrounding whitespace",
            field=TOKEN_ENV,
        )
    return value


def check_bind(host: str, *, token_configured: bool, behind_tls_proxy: bool) -> None:
    """Refuse a non-loopback bind unless a configured token and TLS in front are both stated."""
    if is_loopback(host):
        return
    missing = []
    if not token_configured:
        missing.append(f"a token set in ${TOKEN_ENV}")
    if not behind_tls_proxy:
        missing.append("--behind-tls-proxy (TLS is terminated in front of this server)")
    if missing:
        raise InvalidArguments(
            f"refusing to listen on non-loopback address {host!r}: that needs "
            + " and ".join(missing)
            + "; a bearer token sent over plain HTTP can be read by anyone on the path",
            field="host",
        )


def host_literal(host: str) -> str:
    """``host`` as it stands before ``:port`` (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def bind_refusal(failure: BaseException, bind: str, who: str = "") -> InvalidArguments | None:
    """A failed bind (an OSError, or a group of one) as the refusal naming the address (a busy
    port: how to choose another); None when ``failure`` is not one OSError (the caller
    re-raises it)."""
    failed = single_error(failure, OSError) if isinstance(failure, BaseExceptionGroup) else failure
    if not isinstance(failed, OSError):
        return None
    busy = failed.errno == errno.EADDRINUSE
    hint = "; pass another --port, or --port 0 for a free one" if busy else ""
    return InvalidArguments(
        f"{who}cannot listen on {bind}: {failed.strerror or failed}{hint}", field="port"
    )


@dataclass(frozen=True)
class HttpOptions:
    """How to listen. ``token`` is required; ``port`` 0 picks a free port."""

    token: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token_configured: bool = True
    behind_tls_proxy: bool = False
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    graceful_timeout_seconds: float = 3.0
    # A session with no request in flight this long ends (see _sessions).
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS
    # An admitted request's body must arrive whole this soon after its headers (else 408).
    body_seconds: float = BODY_SECONDS
    # What the bodies of admitted requests still running may hold together (else 503).
    max_held_bytes: int = MAX_HELD_BODY_BYTES

    def __post_init__(self) -> None:
        for name in ("session_idle_seconds", "body_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidArguments(
                    f"{name} must be a positive number of seconds, not {value}", field=name
                )
        if self.max_held_bytes <= 0:
            raise InvalidArguments(
                f"max_held_bytes must be a positive number of bytes, not {self.max_held_bytes}",
                field="max_held_bytes",
            )
        if len(self.token) < MIN_TOKEN_LENGTH:
            raise InvalidArguments(
                f"the bearer token must be at least {MIN_TOKEN_LENGTH} characters",
                field="token",
            )
        if not 0 <= self.port <= 65535:
            raise InvalidArguments(f"port {self.port} is not in 0-65535", field="port")
        check_bind(
            self.host,
            token_configured=self.token_configured,
            behind_tls_proxy=self.behind_tls_proxy,
        )

    @staticmethod
    def generate_token() -> str:
        return secrets.token_urlsafe(32)

    def hosts_for(self, port: int) -> tuple[str, ...]:
        names = list(_LOOPBACK_NAMES) if is_loopback(self.host) else []
        names.append(host_literal(self.host))
        return (*dict.fromkeys(f"{n}:{port}" for n in names), *self.allowed_hosts)

    def origins_for(self, port: int) -> tuple[str, ...]:
        names = list(_LOOPBACK_NAMES) if is_loopback(self.host) else []
        return (*(f"http://{n}:{port}" for n in names), *self.allowed_origins)

    def sdk_security(self) -> TransportSecuritySettings:
        """The same lists for the SDK's own check (the second layer), any port."""
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[
                *{h.rsplit(":", 1)[0] + ":*" for h in self.hosts_for(0)},
                *self.allowed_hosts,
            ],
            allowed_origins=[
                *{o.rsplit(":", 1)[0] + ":*" for o in self.origins_for(0)},
                *self.allowed_origins,
            ],
        )


@dataclass
class RequestGuard:
    """ASGI middleware in front of the SDK's app: Host (421), Origin (403), bearer token (401).

    Why in front of the SDK app rather than the SDK's own checks: this layer
    sees every request first, whatever path or method, so a refused request
    never reaches the session manager (no session, no body parsing, no tool),
    and the token check is one constant-time comparison we own. The SDK's
    transport-security settings are still configured with the same lists,
    as a second layer.

    ``allowed_hosts`` stays empty (everything is 421) until :meth:`listen_on`
    learns the bound port, so there is no moment where the guard is open.
    """

    app: ASGIApp
    token: str
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    on_refused: Callable[[int, Scope], None] | None = None
    # Set: each admitted request runs with its MCP session's key (resumption is per session).
    sessions: SessionEventStore | None = None
    max_body_bytes: int = MAX_REQUEST_BYTES
    # An admitted body must be whole this soon after its headers (a trickle holds nothing long).
    body_seconds: float = BODY_SECONDS
    # What the bodies being read at once may hold together, and how many there may be.
    max_pending_bytes: int = MAX_PENDING_BODY_BYTES
    max_pending_bodies: int = MAX_PENDING_BODIES
    # What the bodies of admitted requests still running may hold together (503 past it).
    max_held_bytes: int = MAX_HELD_BODY_BYTES
    # Set: each session's requests are counted, and its end drops what was held for it.
    lifetimes: SessionLifetimes | None = None
    # Called when an admitted request ends (the server is busy).
    on_request_done: Callable[[], None] | None = None
    # Admitted requests open at once (see open_request_limit); past it, 503 before the body.
    max_open_requests: int = MAX_OPEN_REQUESTS
    # The bodies being read now, oldest first (at most max_pending_bodies).
    _readers: list[_Reader] = field(default_factory=list, init=False)
    _open: int = field(default=0, init=False)
    # The bytes of the bodies read whole whose requests still run.
    _held: int = field(default=0, init=False)

    def listen_on(self, hosts: Iterable[str], origins: Iterable[str]) -> None:
        self.allowed_hosts = frozenset(hosts)
        self.allowed_origins = frozenset(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # websockets: nothing of ours speaks them
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = Headers(scope=scope)
        refusal = self.check(headers)
        if refusal is None:
            if self._open >= self.max_open_requests:
                await _too_many_open(self.max_open_requests)(scope, receive, send)
                return
            self._open += 1
            try:
                await self._admitted(scope, headers, receive, send)
            finally:
                self._open -= 1
            return
        status, text = refusal
        if self.on_refused is not None:
            self.on_refused(status, scope)
        headers = {"WWW-Authenticate": 'Bearer realm="ringfence"'} if status == 401 else None
        await PlainTextResponse(text, status_code=status, headers=headers)(scope, receive, send)

    async def _admitted(self, scope: Scope, headers: Headers, receive: Receive, send: Send) -> None:
        """One request that passed :meth:`check`: its body read bounded, then the app."""
        bounded = await self._bounded_body(headers, receive)
        if isinstance(bounded, _Gone):
            return  # the client went away before its request was whole: no one to answer
        if isinstance(bounded, JSONResponse):  # too large, too slow, or too many at once
            await bounded(scope, receive, send)
            return
        replay, size = bounded
        self._held += size  # until the request ends: its body lives as long as its call
        try:
            await self._run(scope, headers, replay, send)
        finally:
            self._held -= size

    async def _run(self, scope: Scope, headers: Headers, replay: Receive, send: Send) -> None:
        """One admitted request whose body was read whole: the app, as its session."""
        exchange = _Exchange(replay, send)
        if self.sessions is None:
            await self._serve(scope, exchange, exchange.send)
            return
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        lifetimes = self.lifetimes
        token, send = track_request(
            self.sessions,
            headers,
            exchange.send,
            lifetimes.opened if lifetimes is not None else None,
        )
        # The session's negotiated version decides priming, not a stale header (_resume).
        scope = self.sessions.as_negotiated(scope, headers)
        try:
            if lifetimes is None:
                await self._serve(scope, exchange, send)
                return
            with lifetimes.request(session_id):
                await self._serve(scope, exchange, send)
            if exchange.status is not None and scope.get("path") == MCP_PATH:
                lifetimes.answered(session_id, str(scope.get("method")), exchange.status)
        finally:
            token.var.reset(token)

    async def _serve(self, scope: Scope, exchange: _Exchange, send: Send) -> None:
        """The app on one admitted request; what it raises once nobody can be answered
        (the response was sent whole, or the client went away) is logged at debug level."""
        try:
            await self.app(scope, exchange.receive, send)
        except Exception:
            if not (exchange.ended or exchange.client_gone):
                raise
            LOGGER.debug(
                "after the answer to %s %s (or its client) was gone",
                scope.get("method"),
                scope.get("path"),
                exc_info=True,
            )
        finally:
            if self.on_request_done is not None:
                self.on_request_done()

    async def _bounded_body(
        self, headers: Headers, receive: Receive
    ) -> tuple[Receive, int] | _Gone | JSONResponse:
        """The request's body read whole (a ``receive`` that hands it to the app), or the
        refusal to send instead, the body never held whole or parsed: over
        ``max_body_bytes`` (413), not whole within ``body_seconds`` of its headers (408),
        or cut off (503) to make room for a newer body when the bodies being read at once
        would number more than ``max_pending_bodies`` or hold more than
        ``max_pending_bytes`` together; ``_GONE`` when the client went away first.

        Room is made by cutting off the oldest reading first: a body read at the speed
        of a working client is whole in moments, so those cut off are the ones trickling,
        and a trickle can never keep another client's request out."""
        declared = headers.get("content-length")
        promised = int(declared) if declared is not None and declared.isdigit() else 0
        if promised > self.max_body_bytes:
            return _too_large(self.max_body_bytes)
        if promised > SMALL_BODY_BYTES and self._held + promised > self.max_held_bytes:
            return _held_full(self.max_held_bytes)
        # Counted before a byte arrives (a promise holds what it promises), and as it comes.
        reader = _Reader(trio.CancelScope(deadline=trio.current_time() + self.body_seconds))
        self._readers.append(reader)
        try:
            self._make_room(reader, promised)
            chunks: list[bytes] = []
            size = 0
            first: dict[str, Any] | None = None
            with reader.scope:
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return _GONE  # the client went away (http.disconnect)
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        return _too_large(self.max_body_bytes)
                    if size > reader.counted:  # more than declared (or chunked)
                        self._make_room(reader, size)
                    if reader.cut_off:
                        break
                    chunks.append(chunk)
                    if not message.get("more_body"):
                        first = {"type": "http.request", "body": b"".join(chunks)}
                        break
            if reader.cut_off:
                return _busy(self.max_pending_bodies, self.max_pending_bytes)
            if first is None:
                return _too_slow(self.body_seconds)
        finally:
            with contextlib.suppress(ValueError):
                self._readers.remove(reader)
        size = len(first["body"])
        if size > SMALL_BODY_BYTES and self._held + size > self.max_held_bytes:
            return _held_full(self.max_held_bytes)
        bad = _claimed_id(first["body"])
        if bad is not None:
            return _bad_id(bad)
        first["more_body"] = False
        pending: list[dict[str, Any]] = [first]

        async def replay() -> dict[str, Any]:
            return pending.pop() if pending else await receive()

        return replay, size

    def _make_room(self, reader: _Reader, size: int) -> None:
        """Count ``size`` bytes for ``reader``; cut off the oldest readers (``reader`` too,
        when it is the oldest) until the readers number and hold no more than allowed."""
        reader.counted = size
        while self._readers and (
            len(self._readers) > self.max_pending_bodies
            or sum(r.counted for r in self._readers) > self.max_pending_bytes
        ):
            oldest = self._readers.pop(0)
            oldest.cut_off = True
            oldest.scope.cancel()

    def check(self, headers: Headers) -> tuple[int, str] | None:
        """The refusal (status, text) for a request with these headers, or None to let it in."""
        host = headers.get("host")
        if host is None or host not in self.allowed_hosts:
            return (
                421,
                "ringfence: this server does not answer for that Host (DNS-rebinding protection)\n",
            )
        origin = headers.get("origin")
        if origin is not None and origin not in self.allowed_origins:
            return 403, "ringfence: requests from that Origin are refused\n"
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            return 401, "ringfence: a valid bearer token is required\n"
        return None


@dataclass(eq=False)
class _Reader:
    """One body being read: its deadline's scope, what it counts, whether it was cut off
    to make room for a newer one."""

    scope: trio.CancelScope
    counted: int = 0
    cut_off: bool = False


class _Gone:
    """What reading a request's body gives when its client went away before it was whole."""


_GONE = _Gone()


class _Exchange:
    """One admitted request's ``receive`` and ``send`` as the app sees them: the status
    answered, whether the response was sent whole (anything sent after it is dropped:
    hypercorn would raise on it), whether the client went away."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.status: int | None = None
        self.ended = False
        self.client_gone = False

    async def receive(self) -> dict[str, Any]:
        message = await self._receive()
        if message.get("type") == "http.disconnect":
            self.client_gone = True
        return message  # type: ignore[return-value]

    async def send(self, message: dict[str, Any]) -> None:
        if self.ended:
            LOGGER.debug("dropped %s after the response was complete", message.get("type"))
            return
        kind = message.get("type")
        if kind == "http.response.start":
            self.status = int(message["status"])
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self._send(message)


def _rpc_refusal(status: int, message: str, data: dict[str, Any]) -> JSONResponse:
    """``status`` with a JSON-RPC error (``-32600``, id null: the request was never read);
    the connection is closed after it (its unread body is not waited for)."""
    error = {"code": -32600, "message": message, "data": data}
    body = {"jsonrpc": "2.0", "id": None, "error": error}
    return JSONResponse(body, status_code=status, headers={"Connection": "close"})


# The largest body whose ``id`` is checked before the app reads it (larger ones are the SDK's).
MAX_ID_CHECK_BYTES = 1024 * 1024


def _claimed_id(body: bytes) -> str | None:
    """The JSON of the ``id`` of a request that has no valid JSON-RPC id, or None.

    The SDK takes a message whose ``id`` is not a string or an integer (``1e400``, ``1.5``,
    ``true``, ``null``, an object) for a notification, dropping the ``id``: ``202``, and no
    answer ever. Only a body that names both ``"id"`` and ``"method"`` and is at most
    :data:`MAX_ID_CHECK_BYTES` is parsed here; anything unreadable is left to the SDK."""
    if len(body) > MAX_ID_CHECK_BYTES or b'"id"' not in body or b'"method"' not in body:
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or "id" not in value or "method" not in value:
        return None
    claimed = value["id"]
    if isinstance(claimed, str) or (isinstance(claimed, int) and not isinstance(claimed, bool)):
        return None
    return json.dumps(claimed)[:100]


def _bad_id(shown: str) -> JSONResponse:
    """400: a request whose ``id`` is no JSON-RPC id (JSON-RPC's ``-32600``, to ``null``)."""
    message = (
        f"Invalid Request: its id {shown} is not a JSON-RPC id (a string or an integer); "
        "it was not run"
    )
    return _rpc_refusal(400, message, {"id": shown})


def _too_large(limit: int) -> JSONResponse:
    """413 naming the limit (the request's id was never read)."""
    message = (
        f"request larger than ringfence serve's limit of {limit:,} bytes ({limit / 2**20:g} MiB); "
        "it was not read; send smaller arguments (a large file through the workspace, not inline)"
    )
    return _rpc_refusal(413, message, {"max_bytes": limit})


def _too_many_open(limit: int) -> JSONResponse:
    """503: as many requests as allowed are open already (calls, streams, bodies)."""
    message = (
        f"ringfence serve has {limit:,} requests open already (calls running, streams, bodies "
        "being read), its limit (at most half the process's open-file limit); this one was not "
        "read; send it again when one has ended"
    )
    response = _rpc_refusal(503, message, {"max_open_requests": limit})
    response.headers["Retry-After"] = "1"
    return response


# Connections held beyond the admitted requests' bound (open_request_limit): room for new
# requests to be read and pass the guard (or not) while that many are open.
CONNECTION_HEADROOM = 16


def open_request_limit() -> int:
    """:data:`MAX_OPEN_REQUESTS`, or half this process's open-file limit when that is lower
    (each open request holds a connection: a descriptor the kernel may need)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_REQUESTS
    return max(16, min(MAX_OPEN_REQUESTS, soft // 2))


def _too_slow(seconds: float) -> JSONResponse:
    """408: the body did not arrive whole within ``seconds`` of the request's headers."""
    message = (
        f"request body not received whole within ringfence serve's limit of {seconds:g} s "
        "after its headers; it was not read"
    )
    return _rpc_refusal(408, message, {"max_seconds": seconds})


def _held_full(limit: int) -> JSONResponse:
    """503: the bodies of the requests still running hold ``limit`` bytes together."""
    message = (
        "request refused unread: the requests ringfence serve is still running hold "
        f"{limit / 2**20:g} MiB of request bodies together, its limit for a body over "
        f"{SMALL_BODY_BYTES // 1024} KiB; send it again when some have finished"
    )
    response = _rpc_refusal(503, message, {"max_held_bytes": limit})
    response.headers["Retry-After"] = "1"
    return response


def _busy(bodies: int, limit: int) -> JSONResponse:
    """503: this body was cut off, unfinished, to make room for newer ones."""
    message = (
        "request body cut off unfinished: ringfence serve reads at most "
        f"{bodies} request bodies at once, {limit / 2**20:g} MiB together, and the oldest "
        "still being read make room for new ones; it was not read; send it again"
    )
    response = _rpc_refusal(
        503, message, {"max_pending_bodies": bodies, "max_pending_bytes": limit}
    )
    response.headers["Retry-After"] = "1"
    return response


MAX_RECORDED_PATH = 256
MAX_SUMMARY_CLIENTS = 16


def _printable(text: str) -> str:
    """Control, format (bidi) and other invisible characters as ``\\uXXXX``."""
    return "".join(
        c if c.isprintable() and unicodedata.category(c) != "Cf" else f"\\u{ord(c):04x}"
        for c in text
    )


def clip_middle(text: str, limit: int = MAX_RECORDED_PATH) -> str:
    """``text`` escaped, and cut to head…tail of at most ``limit`` characters when longer."""
    half = (limit - 1) // 2
    if len(text) <= limit:
        escaped = _printable(text)
        if len(escaped) <= limit:
            return escaped
        return escaped[:half] + "…" + escaped[-half:]
    # Escape only the ends that can be kept (a path can be ~60 KB).
    return _printable(text[:half])[:half] + "…" + _printable(text[-half:])[-half:]


@dataclass
class RefusalAudit:
    """Bounded audit of refused requests: some records per window, then one summary.

    ``emit(kind, **data)`` writes one event. Per window of ``window_seconds``
    (on ``clock``), the first ``per_window`` refusals are recorded one by one
    (path clipped by :func:`clip_middle`); later ones are only counted, and
    :meth:`flush` writes one ``serve_refused_summary`` for them. Call
    :meth:`flush` when the server stops; :meth:`flush_every_window` does it
    periodically. Not promised: a record of each refused request.
    """

    emit: Callable[..., Any]
    clock: Callable[[], float]
    per_window: int = 20
    window_seconds: float = 60.0
    _window_start: float | None = None
    _recorded: int = 0
    _suppressed: int = 0
    _statuses: Counter[int] = field(default_factory=Counter)
    _clients: dict[str, None] = field(default_factory=dict)
    _more_clients: bool = False

    def refused(self, status: int, scope: Scope) -> None:
        now = self.clock()
        if self._window_start is None or now - self._window_start >= self.window_seconds:
            self.flush()
            self._window_start, self._recorded = now, 0
        client = (scope.get("client") or [None])[0]
        if self._recorded < self.per_window:
            self._recorded += 1
            path = str(scope.get("path") or "")
            self.emit(
                "serve_refused",
                status=status,
                method=clip_middle(str(scope.get("method") or ""), 32),
                path=clip_middle(path),
                path_length=len(path),
                client=client,
            )
            return
        self._suppressed += 1
        self._statuses[status] += 1
        if client is not None and str(client) not in self._clients:
            if len(self._clients) < MAX_SUMMARY_CLIENTS:
                self._clients[str(client)] = None
            else:
                self._more_clients = True

    def flush(self) -> None:
        """Write the summary of the refusals counted but not recorded, if any."""
        if not self._suppressed:
            return
        self.emit(
            "serve_refused_summary",
            count=self._suppressed,
            statuses={str(k): v for k, v in sorted(self._statuses.items())},
            clients=list(self._clients),
            more_clients=self._more_clients,
            recorded_individually=self._recorded,
            window_seconds=self.window_seconds,
        )
        self._suppressed = 0
        self._statuses.clear()
        self._clients.clear()
        self._more_clients = False

    async def flush_every_window(self) -> None:
        while True:
            await trio.sleep(self.window_seconds)
            self.flush()


async def serve_http(
    kernel: Kernel,
    options: HttpOptions,
    *,
    expose: Iterable[str] = ("native",),
    shutdown: Callable[[], Awaitable[Any]] | None = None,
    logs: LogForwarder | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``kernel`` over Streamable HTTP until ``shutdown`` returns (or cancellation).

    Streams are resumable (:mod:`._resume`: a priming event with an id and a
    ``retry`` of RETRY_MILLISECONDS, ``Last-Event-ID`` replays within the same
    session). ``logs`` turns on the ``logging`` capability (see :func:`build_server`).

    ``task_status.started(url)`` reports the MCP endpoint once the socket
    listens (with the real port when ``options.port`` is 0). Raises
    InvalidArguments when the address cannot be bound (in use, not local),
    naming it; refused binds are caught earlier, by :class:`HttpOptions`.
    """
    kernel.register_secret(options.token)  # never echoed into results or events
    events = SessionEventStore()
    # Several sessions share this server: each call is its session's (grants, log records).
    if logs is not None:
        logs.per_session()
    server = build_server(kernel, expose=expose, logs=logs, session_key=events.current_session)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=options.sdk_security(),
        host=options.host,
        event_store=events,
        retry_interval=RETRY_MILLISECONDS,
        session_idle_timeout=options.session_idle_seconds,
        max_sessions=MAX_SESSIONS,
    )

    # Freed memory back to the system once a burst is over (measured: see _memory).
    trim = QuietTrim()

    def session_ended(session_id: str) -> None:
        # What ringfence held for the session; the SDK drops its own (see _sessions).
        events.forget(session_id)
        kernel.forget_caller(session_id)
        if logs is not None:
            logs.forget(session_id)
        trim.freed()  # what it held is let go: worth a trim once things are quiet

    lifetimes = SessionLifetimes(
        session_ended, idle_seconds=options.session_idle_seconds, max_sessions=MAX_SESSIONS
    )

    # What was refused and why, never the headers' values (one may be a token); bounded.
    audit = RefusalAudit(
        emit=lambda kind, **data: kernel.events.emit(kind, kernel.session_id, **data),
        clock=trio.current_time,
    )
    # Connections held at once: the admitted requests' bound and a little room for new ones.
    # Beyond it a connection that never passed the guard is closed first (a flood of idle
    # connections without the token took the descriptors the kernel needs: EMFILE).
    max_open = open_request_limit()
    connections = ConnectionLimit(limit=max_open + CONNECTION_HEADROOM)
    guard = RequestGuard(
        Admitted(app, connections),
        options.token,
        on_refused=audit.refused,
        sessions=events,
        lifetimes=lifetimes,
        on_request_done=trim.activity,
        body_seconds=options.body_seconds,
        max_open_requests=max_open,
        max_held_bytes=options.max_held_bytes,
    )

    config = Config()
    config.bind = [f"{host_literal(options.host)}:{options.port}"]
    config.accesslog = None
    config.errorlog = LOGGER.getChild("hypercorn")  # no handler of hypercorn's own on stderr
    config.graceful_timeout = options.graceful_timeout_seconds
    # An unfinished request line or header block is cut off at this (hypercorn's own default,
    # stated here: a body has BODY_SECONDS after it, so no request is read for ever).
    config.keep_alive_timeout = HEADERS_SECONDS

    async def housekeeping() -> None:
        # Idle sessions end; resumable events past their age go, even with no traffic; after
        # a burst, freed memory goes back to the system.
        while True:
            await trio.sleep(SWEEP_SECONDS)
            lifetimes.expire()
            events.expire()
            await trim.tick()

    async def started(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        # The one worker of ringfence's HTTP servers: each connection's sends take turns (a
        # client closing mid-body cannot end the server), the SDK's lifespan runs around it.
        try:
            await serve_bounded(
                guard,
                config,
                connections,
                lifespan=True,
                shutdown_trigger=shutdown,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # served: stop the audit's window timer too
        except (OSError, BaseExceptionGroup) as failure:
            refusal = bind_refusal(failure, config.bind[0])
            if refusal is None:
                raise
            raise refusal from None

    try:
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(started)
            port = int(binds[0].rsplit(":", 1)[1])
            guard.listen_on(options.hosts_for(port), options.origins_for(port))
            nursery.start_soon(audit.flush_every_window)
            nursery.start_soon(housekeeping)
            if logs is not None:
                nursery.start_soon(logs.run)
            task_status.started(f"http://{host_literal(options.host)}:{port}{MCP_PATH}")
    finally:
        lifetimes.end_all()
        # The last window's summary, before the caller closes and seals the event log.
        with contextlib.suppress(RuntimeError):  # the log was already closed
            audit.flush()
