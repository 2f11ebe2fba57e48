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

Guarantees: event ids are random (128 bits), not counters; memory is bounded
(``max_events`` and ``max_bytes`` overall, oldest evicted first), so a stream
older than the window cannot be resumed (the replay is empty). Not promised:
resumption across a server restart (nothing is written to disk).
"""

from __future__ import annotations

import contextvars
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
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
from mcp_types import JSONRPCMessage

__all__ = ["RETRY_MILLISECONDS", "SessionEventStore", "track_request"]

# What the priming event tells a client to wait before it reconnects.
RETRY_MILLISECONDS = 1000
DEFAULT_MAX_EVENTS = 4096
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
_PENDING = "pending:"

# The session key of the HTTP request (or the session task) running now.
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ringfence_serve_session", default=None
)


@dataclass(frozen=True)
class _Stored:
    stream_id: StreamId
    owner: str | None
    message: JSONRPCMessage | None
    size: int


class SessionEventStore(EventStore):
    """The SDK's EventStore, bounded and scoped to the session that stored each event."""

    def __init__(
        self, max_events: int = DEFAULT_MAX_EVENTS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._events: OrderedDict[EventId, _Stored] = OrderedDict()
        self._bytes = 0
        # initialize's provisional key -> the session id its response assigned
        self._aliases: dict[str, str] = {}

    def bind(self, pending: str, session_id: str) -> None:
        self._aliases[pending] = session_id
        if len(self._aliases) > self.max_events:  # bounded like the events
            self._aliases.pop(next(iter(self._aliases)))

    def _owner(self, key: str | None) -> str | None:
        if key is not None and key.startswith(_PENDING):
            return self._aliases.get(key, key)
        return key

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = secrets.token_urlsafe(16)
        size = (
            len(message.model_dump_json(by_alias=True, exclude_unset=True))
            if message is not None
            else 0
        )
        self._events[event_id] = _Stored(stream_id, _current.get(), message, size)
        self._bytes += size
        while self._events and (
            len(self._events) > self.max_events or self._bytes > self.max_bytes
        ):
            _, dropped = self._events.popitem(last=False)
            self._bytes -= dropped.size
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
                await send_callback(EventMessage(event.message, event_id))
            after = after or event_id == last_event_id
        return last.stream_id


Send = Callable[[dict[str, Any]], Awaitable[None]]


def track_request(
    store: SessionEventStore, headers: Any, send: Send
) -> tuple[contextvars.Token[str | None], Send]:
    """Set the session key for one HTTP request; returns the reset token and a ``send`` that
    binds an ``initialize`` request's provisional key to the session id its response assigns.

    ``headers`` is the request's starlette ``Headers``.
    """
    session_id = headers.get(MCP_SESSION_ID_HEADER)
    if session_id:
        return _current.set(session_id), send
    pending = _PENDING + secrets.token_hex(12)
    token = _current.set(pending)
    wanted = MCP_SESSION_ID_HEADER.encode()

    async def watching(message: dict[str, Any]) -> None:
        if message.get("type") == "http.response.start":
            for name, value in message.get("headers") or ():
                if name.lower() == wanted:
                    store.bind(pending, value.decode("latin-1"))
        await send(message)

    return token, watching
