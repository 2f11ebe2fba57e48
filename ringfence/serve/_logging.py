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
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Callable
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
        # client connection -> (the lowest level it wants, a session to send with); an entry
        # goes when sending to it fails, or the oldest when MAX_LISTENERS are listening
        self._levels: OrderedDict[Any, tuple[int, Any]] = OrderedDict()
        self._queue: deque[tuple[str, dict[str, Any]]] = deque(maxlen=max_queued)
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
        if len(self._queue) == self._queue.maxlen:
            self._dropped += 1
        self._queue.append((record_level(record), record))
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

    def set_level(self, session: Any, level: str) -> None:
        """``session``'s client wants records at ``level`` and above (``logging/setLevel``).

        The SDK (2.3) makes a ServerSession per request; the client is its
        connection, so a second setLevel from one client replaces the first.
        """
        client = getattr(session, "_connection", session)
        self._levels.pop(client, None)
        self._levels[client] = (_RANK[level], session)
        while len(self._levels) > MAX_LISTENERS:
            self._levels.popitem(last=False)

    async def run(self) -> None:
        """Send queued records until cancelled. Start it in the server's nursery."""
        self._token = trio.lowlevel.current_trio_token()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._queue:
                    level, record = self._queue.popleft()
                    if self._dropped:
                        record = {**record, "dropped_before": self._dropped}
                        self._dropped = 0
                    await self._send(level, record)
        finally:
            self._token = None

    async def _send(self, level: str, record: dict[str, Any]) -> None:
        rank = _RANK[level]
        for client, (wanted, session) in list(self._levels.items()):
            if rank < wanted:
                continue
            try:
                # Bounded: a client that does not read cannot hold up the others for long.
                with trio.move_on_after(SEND_TIMEOUT_SECONDS):
                    await session.send_log_message(level, record, logger=LOGGER)
            except Exception:
                # A client that cannot take it (closed, broken) stops getting logs.
                self._levels.pop(client, None)
