"""The ``logging`` capability: ringfence's events as MCP log notifications.

A client that sends ``logging/setLevel`` gets each event record of the
session at or above that level as ``notifications/message`` (logger
``ringfence.events``, ``data`` the record). Records are the event stream's own
lines, which the kernel redacted before they were written, so a registered
secret never reaches a client through this path. Until a client sets a level
it is sent nothing.

:class:`LogForwarder` is an event observer (``create_kernel(event_observer=…)``,
which the ``serve`` command wires) plus a task (:meth:`LogForwarder.run`) that
sends. The observer may be called from any thread: it only parses and queues
(bounded; when the queue is full the oldest records are dropped and the next
notification says how many). Sending never blocks the event stream.

Levels (RFC 5424 names, as MCP uses them): a record with an ``error`` or a
``*_failed`` kind is ``error``; a denial or refusal is ``warning``; every other
record is ``info``.

Whose records: over stdio the server has one client, which gets every record.
When several sessions share the server (Streamable HTTP, :meth:`LogForwarder.per_session`),
a record goes only to the session whose call made it: each served call is
registered under its trace id for as long as it runs (:meth:`LogForwarder.call_of`;
a nested call, such as a script's ``call_tool``, carries its parent's trace), and a
record whose trace id names no running call of a session (the kernel's own
records, refused requests, a connected server's requests) goes to no one.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import trio

__all__ = ["LEVELS", "LogForwarder", "record_level"]

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_RANK = {name: k for k, name in enumerate(LEVELS)}
LOGGER = "ringfence.events"
MAX_QUEUED = 1000
MAX_LISTENERS = 64
SEND_TIMEOUT_SECONDS = 1.0


def record_level(record: dict[str, Any]) -> str:
    """The MCP log level of one event record (see the module docstring)."""
    kind = str(record.get("kind", ""))
    if record.get("error") or kind.endswith("_failed"):
        return "error"
    if "denied" in kind or "refused" in kind or record.get("effect") == "deny":
        return "warning"
    return "info"


class LogForwarder:
    """Forwards event lines to the sessions that asked for logs (see the module docstring)."""

    def __init__(self, max_queued: int = MAX_QUEUED) -> None:
        # session key -> (the lowest level it wants, a session to send with); an entry
        # goes when sending to it fails, or the oldest when MAX_LISTENERS are listening
        self._levels: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        # (level, record, the session key it belongs to) in the order they were written
        self._queue: deque[tuple[str, dict[str, Any], Hashable]] = deque(maxlen=max_queued)
        # Several sessions: the trace id of each running call -> its session's key.
        self._per_session = False
        self._calls: dict[str, Hashable] = {}
        self._dropped = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._wake = trio.Event()
        self._wake_pending = False  # one scheduled wake-up per batch, not one per record
        self.next_observer: Callable[[str], None] | None = None  # e.g. OpenTelemetry's

    # -- the observer side (any thread) ----------------------------------------------------------

    def __call__(self, line: str) -> None:
        if self.next_observer is not None:
            self.next_observer(line)
        if self._token is None or not self._levels:
            return  # nobody listens: no parse, no queue
        try:
            record = json.loads(line)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        for key in ("prev", "hash"):
            record.pop(key, None)  # chain plumbing, not information
        owner: Hashable = None
        if self._per_session:
            owner = self._calls.get(str(record.get("trace_id")))
            if owner is None:
                return  # no running call of any session made it: it is no session's
        if len(self._queue) == self._queue.maxlen:
            self._dropped += 1
        self._queue.append((record_level(record), record, owner))
        if not self._wake_pending:
            self._wake_pending = True
            self._token.run_sync_soon(self._set_wake)  # thread-safe wake-up of run()

    def _set_wake(self) -> None:
        # Runs in trio's thread. Records queued after this schedule a new wake-up; run()
        # re-checks the queue after every wake, so none is left waiting.
        self._wake_pending = False
        self._wake.set()

    def close(self) -> None:
        close = getattr(self.next_observer, "close", None)
        if close is not None:
            close()

    # -- the session side (trio) -----------------------------------------------------------------

    def per_session(self) -> None:
        """Several sessions share the server: from now on a record goes only to the session
        whose running call made it (see the module docstring). Call before serving."""
        self._per_session = True

    @contextlib.contextmanager
    def call_of(self, key: Hashable, trace_id: str) -> Iterator[None]:
        """While inside, records with ``trace_id`` belong to session ``key``."""
        self._calls[trace_id] = key
        try:
            yield
        finally:
            self._calls.pop(trace_id, None)

    def set_level(self, key: Hashable, session: Any, level: str) -> None:
        """Session ``key`` wants records at ``level`` and above (``logging/setLevel``),
        sent with ``session``; a second setLevel from one session replaces the first."""
        self._levels.pop(key, None)
        self._levels[key] = (_RANK[level], session)
        while len(self._levels) > MAX_LISTENERS:
            self._levels.popitem(last=False)

    def forget(self, key: Hashable) -> None:
        """Session ``key`` ended: it gets nothing more, and its session object is let go."""
        self._levels.pop(key, None)

    async def run(self) -> None:
        """Send queued records until cancelled. Start it in the server's nursery."""
        self._token = trio.lowlevel.current_trio_token()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._queue:
                    level, record, owner = self._queue.popleft()
                    if self._dropped:
                        record = {**record, "dropped_before": self._dropped}
                        self._dropped = 0
                    await self._send(level, record, owner)
        finally:
            self._token = None

    async def _send(self, level: str, record: dict[str, Any], owner: Hashable) -> None:
        rank = _RANK[level]
        for client, (wanted, session) in list(self._levels.items()):
            if rank < wanted or (self._per_session and client != owner):
                continue
            try:
                # Bounded: a client that does not read cannot hold up the others for long.
                with trio.move_on_after(SEND_TIMEOUT_SECONDS):
                    await session.send_log_message(level, record, logger=LOGGER)
            except Exception:
                # A client that cannot take it (closed, broken) stops getting logs.
                self._levels.pop(client, None)
