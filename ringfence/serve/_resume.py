"""Resumable Streamable HTTP: a bounded in-memory event store, scoped to the MCP session.

With an event store the SDK's transport starts every SSE stream with a
*priming* event (an ``id``, empty data, and the ``retry`` interval ringfence
sets) and stores each message it sends; a client whose stream broke sends
``GET`` with ``Last-Event-ID`` and gets what it missed, then the live tail.

Why scoped: the SDK hands one store to every session and names streams by
the JSON-RPC request id, which every client starts at the same numbers, so a
store keyed by stream alone would replay session A's reply to "request 1" to
session B. Each stored event therefore records the session that produced it,
read from a context variable :func:`track_request` sets for every HTTP
request (the ``Mcp-Session-Id`` header; for ``initialize``, which has none
yet, a fresh key tied to the id the response assigns). The SDK's per-session
tasks start inside the ``initialize`` request, so they inherit its key. A
replay is answered only for an event of the asking session; anything else
replays nothing (the client reinitializes).

The session's negotiated protocol version is authoritative for priming: the
SDK transport decides per request from the ``MCP-Protocol-Version`` header
(priming, ``retry`` and the stream-close callback only from 2025-11-25 on),
and the spec says that header MUST equal the negotiated version. A client that
negotiated 2025-11-25 but declares an older version on a request (the
conformance suite's raw requests do) can parse the priming event, so
:meth:`SessionEventStore.as_negotiated` shows the SDK the session's version
(read from the ``initialize`` response this server sent) instead; a session
that negotiated an older version stays unprimed whatever its header says. A
header naming no handshake-era version is left for the SDK to answer.

A host tool running inside a served call may ask for its response stream to be
closed (:func:`close_sse_stream`): the client reconnects after ``retry`` with
``Last-Event-ID`` and gets the call's result from this store (SSE polling).

Guarantees: event ids are random (128 bits), not counters; memory is bounded
(``max_events`` and ``max_bytes`` overall, oldest evicted first; each event is
held as the JSON bytes it is counted by, not as a message object several times
that size); an event is kept at most ``max_age_seconds`` (a client reconnects
after ``retry``, a second), and a session's events, alias and version go when
the session ends (:meth:`SessionEventStore.forget`, called by
:mod:`._sessions`). So a stream older than the window cannot be resumed (the
replay is empty), and a server whose clients have gone holds none of their
events. Not promised: resumption across a server restart (nothing is written
to disk), or after more than ``max_age_seconds``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

__all__ = [
    "RETRY_MILLISECONDS",
    "SessionEventStore",
    "close_sse_stream",
    "streaming_call",
    "track_request",
]

# What the priming event tells a client to wait before it reconnects.
RETRY_MILLISECONDS = 1000
DEFAULT_MAX_EVENTS = 4096
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
# How long an event can be resumed from: a client reconnects after RETRY_MILLISECONDS.
DEFAULT_MAX_AGE_SECONDS = 60.0
_PENDING = "pending:"
# How much of an initialize response is read for its protocolVersion (it is a few hundred bytes).
_MAX_INITIALIZE_BODY = 64 * 1024
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("latin-1")

# The session key of the HTTP request (or the session task) running now.
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ringfence_serve_session", default=None
)


@dataclass(frozen=True)
class _Stored:
    stream_id: StreamId
    owner: str | None
    message: bytes | None  # the message's JSON: what is counted is what is held
    stored_at: float

    @property
    def size(self) -> int:
        return len(self.message) if self.message is not None else 0


class SessionEventStore(EventStore):
    """The SDK's EventStore, bounded and scoped to the session that stored each event."""

    def __init__(
        self,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._events: OrderedDict[EventId, _Stored] = OrderedDict()
        self._bytes = 0
        # the key each event was stored under -> its events (so a session's go at once)
        self._by_owner: dict[str | None, dict[EventId, None]] = {}
        # initialize's provisional key -> the session id its response assigned, and back
        self._aliases: dict[str, str] = {}
        self._pending_of: dict[str, str] = {}
        # session id -> the protocol version its initialize response named
        self._versions: dict[str, str] = {}

    @property
    def count(self) -> int:
        """How many events are held now. (Not ``__len__``: the SDK tests a store for truth.)"""
        return len(self._events)

    @property
    def held_bytes(self) -> int:
        """The JSON bytes of the events held now (what ``max_bytes`` bounds)."""
        return self._bytes

    def forget(self, session_id: str) -> None:
        """The session ended: drop its events, its provisional key and its version."""
        keys: list[str] = [session_id]
        pending = self._pending_of.pop(session_id, None)
        if pending is not None:
            self._aliases.pop(pending, None)
            keys.append(pending)
        for key in keys:
            for event_id in list(self._by_owner.get(key, ())):
                self._drop(event_id)
        self._versions.pop(session_id, None)

    def expire(self) -> None:
        """Drop the events older than ``max_age_seconds`` (the oldest are first)."""
        horizon = self._clock() - self.max_age_seconds
        while self._events:
            event_id, oldest = next(iter(self._events.items()))
            if oldest.stored_at > horizon:
                return
            self._drop(event_id)

    def _drop(self, event_id: EventId) -> None:
        event = self._events.pop(event_id)
        self._bytes -= event.size
        owned = self._by_owner.get(event.owner)
        if owned is not None:
            owned.pop(event_id, None)
            if not owned:
                del self._by_owner[event.owner]

    def bind(self, pending: str, session_id: str) -> None:
        self._aliases[pending] = session_id
        self._pending_of[session_id] = pending
        if len(self._aliases) > self.max_events:  # bounded like the events
            oldest = next(iter(self._aliases))
            self._pending_of.pop(self._aliases.pop(oldest), None)

    def negotiated(self, session_id: str, version: str) -> None:
        """Record the protocol version ``session_id`` negotiated (bounded like the aliases)."""
        self._versions[session_id] = version
        if len(self._versions) > self.max_events:
            self._versions.pop(next(iter(self._versions)))

    def as_negotiated(self, scope: dict[str, Any], headers: Any) -> dict[str, Any]:
        """``scope`` with ``MCP-Protocol-Version`` set to its session's negotiated version.

        Unchanged when the session's version is unknown (no session id, evicted,
        not initialized here) or the header already says it; also when the header
        names no handshake-era version (the SDK refuses or routes that itself).
        """
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        version = self._versions.get(session_id) if session_id else None
        declared = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is None or declared == version:
            return scope
        if declared is not None and declared not in HANDSHAKE_PROTOCOL_VERSIONS:
            return scope
        raw = [(k, v) for k, v in scope["headers"] if k.lower() != _VERSION_HEADER]
        return {**scope, "headers": [*raw, (_VERSION_HEADER, version.encode("latin-1"))]}

    def current_session(self) -> str | None:
        """The MCP session of the request (or session task) running now: its
        ``Mcp-Session-Id``, or ``None`` outside any HTTP request."""
        return self._owner(_current.get())

    def _owner(self, key: str | None) -> str | None:
        if key is not None and key.startswith(_PENDING):
            return self._aliases.get(key, key)
        return key

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = secrets.token_urlsafe(16)
        data = (
            message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            if message is not None
            else None
        )
        stored = _Stored(stream_id, _current.get(), data, self._clock())
        self._events[event_id] = stored
        self._by_owner.setdefault(stored.owner, {})[event_id] = None
        self._bytes += stored.size
        while self._events and (
            len(self._events) > self.max_events or self._bytes > self.max_bytes
        ):
            self._drop(next(iter(self._events)))
        self.expire()
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        last = self._events.get(last_event_id)
        asker = self._owner(_current.get())
        if last is None or asker is None or self._owner(last.owner) != asker:
            return None  # unknown, evicted, or another session's: nothing to replay
        after = False
        for event_id, event in list(self._events.items()):
            if (
                after
                and event.stream_id == last.stream_id
                and event.message is not None
                and self._owner(event.owner) == asker
            ):
                message = jsonrpc_message_adapter.validate_json(event.message)
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return last.stream_id


Send = Callable[[dict[str, Any]], Awaitable[None]]


def track_request(
    store: SessionEventStore,
    headers: Any,
    send: Send,
    on_assigned: Callable[[str], None] | None = None,
) -> tuple[contextvars.Token[str | None], Send]:
    """Set the session key for one HTTP request; returns the reset token and a ``send`` that
    binds an ``initialize`` request's provisional key to the session id its response assigns
    (and tells ``on_assigned`` that id).

    ``headers`` is the request's starlette ``Headers``.
    """
    session_id = headers.get(MCP_SESSION_ID_HEADER)
    if session_id:
        return _current.set(session_id), send
    pending = _PENDING + secrets.token_hex(12)
    token = _current.set(pending)
    wanted = MCP_SESSION_ID_HEADER.encode()
    assigned: str | None = None
    body = b""

    async def watching(message: dict[str, Any]) -> None:
        nonlocal assigned, body
        if message.get("type") == "http.response.start":
            for name, value in message.get("headers") or ():
                if name.lower() == wanted:
                    assigned = value.decode("latin-1")
                    store.bind(pending, assigned)
                    if on_assigned is not None:
                        on_assigned(assigned)
        elif message.get("type") == "http.response.body" and assigned is not None:
            body += message.get("body", b"")
            version = _negotiated_version(body)
            if version is not None:
                store.negotiated(assigned, version)
            if version is not None or len(body) > _MAX_INITIALIZE_BODY:
                assigned = None  # found, or not an initialize answer: stop reading
        await send(message)

    return token, watching


def _negotiated_version(body: bytes) -> str | None:
    """The ``protocolVersion`` of the result in an initialize response (SSE or JSON), if complete."""
    text = body.decode("utf-8", "replace")
    lines = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    for candidate in lines or [text]:
        try:
            message = json.loads(candidate)
        except ValueError:
            continue
        result = message.get("result") if isinstance(message, dict) else None
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str) and version in HANDSHAKE_PROTOCOL_VERSIONS:
            return version
    return None


# -- SSE polling: a served call may ask for its stream to be closed -------------------------


@dataclass(eq=False)
class _StreamCloser:
    close: Callable[[], Awaitable[None]]
    active: bool = True


_closer: contextvars.ContextVar[_StreamCloser | None] = contextvars.ContextVar(
    "ringfence_serve_stream_closer", default=None
)


@contextlib.contextmanager
def streaming_call(close: Callable[[], Awaitable[None]] | None) -> Iterator[None]:
    """Run a served call with ``close`` (the SDK's per-request callback, or None) reachable
    by :func:`close_sse_stream`; it stops working when the call ends (request ids repeat)."""
    closer = _StreamCloser(close) if close is not None else None
    token = _closer.set(closer)
    try:
        yield
    finally:
        if closer is not None:
            closer.active = False
        _closer.reset(token)


async def close_sse_stream() -> bool:
    """Close the response stream of the served call running now; True if one was closed.

    For a host tool (``ToolSpec`` executor) served over Streamable HTTP by
    ``ringfence serve``/:func:`serve_http`: the client was told ``retry`` in the
    priming event, reconnects with ``Last-Event-ID`` and receives everything the
    call sends afterwards (its result, progress, approval questions), kept in the
    session's event store. Use it to free a connection during a long call.

    Meant for a call that has been running a while: the priming event (the id
    the client resumes from) is written when the call starts, and a stream
    closed in the call's first moments may end before it reached the client.

    False, and nothing happens, outside a served call, over stdio, after the call
    ended, or when the session negotiated a version before 2025-11-25 (such
    clients were not primed and could not resume).
    """
    closer = _closer.get()
    if closer is None or not closer.active:
        return False
    await closer.close()
    return True
