"""MCP sessions over Streamable HTTP: when each one ends, and what ringfence drops with it.

The SDK's session manager keeps a session until its client deletes it
(``DELETE``), until it has had no request in flight (a served request or an
open GET stream) for its idle timeout, or until the server stops, and tells
nobody. ringfence holds state of its own per session: the session's grants in
the kernel (:meth:`Kernel.forget_caller`), its log subscription
(:meth:`~._logging.LogForwarder.forget`), its resumable events, provisional
keys and negotiated version (:meth:`~._resume.SessionEventStore.forget`).
:class:`SessionLifetimes` watches the same requests from the request guard and
calls ``on_end`` once per session, when:

* a ``DELETE`` for it was answered 2xx (the client ended it);
* a request for it was answered 404 (the SDK no longer knows it);
* none of its requests has been in flight for ``idle_seconds`` plus a grace
  (the SDK, given the same timeout, ended it first: its count of requests in
  flight starts after ours and ends before, so its idle clock never starts later);
* the server stops.

Only sessions whose id the SDK assigned (seen in an ``initialize`` response)
are tracked, at most ``max_sessions`` (the SDK's own limit), so a client that
names made-up session ids adds nothing. A live SDK client holds a GET stream
open, which counts as a request in flight: it is never idle. A client that
vanished without ``DELETE`` (killed, cancelled mid-call) is idle from the
moment its last connection closed.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import trio

from ._defaults import DEFAULT_SESSION_IDLE_SECONDS, MAX_SESSIONS

__all__ = ["IDLE_GRACE_SECONDS", "SWEEP_SECONDS", "SessionLifetimes"]

# How much later than the SDK ringfence counts a session idle (timers on one clock).
IDLE_GRACE_SECONDS = 1.0
# How often idle sessions are looked for.
SWEEP_SECONDS = 1.0


@dataclass
class _Session:
    in_flight: int = 0
    idle_since: float = 0.0


class SessionLifetimes:
    """The sessions the SDK assigned, their requests in flight, and their end (see the module)."""

    def __init__(
        self,
        on_end: Callable[[str], None],
        *,
        idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._on_end = on_end
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    @property
    def count(self) -> int:
        """How many sessions are held now. (Not ``__len__``: the SDK tests a store for truth.)"""
        return len(self._sessions)

    def opened(self, session_id: str) -> None:
        """The SDK assigned ``session_id`` (an ``initialize`` response named it)."""
        if session_id in self._sessions:
            return
        self._sessions[session_id] = _Session(idle_since=self._clock())
        while len(self._sessions) > self.max_sessions:  # the SDK refuses more: a stale entry
            self.end(next(iter(self._sessions)))

    @contextlib.contextmanager
    def request(self, session_id: str | None) -> Iterator[None]:
        """One HTTP request of ``session_id`` in flight, from the guard to the app's return."""
        session = self._sessions.get(session_id) if session_id else None
        if session is None:
            yield
            return
        session.in_flight += 1
        try:
            yield
        finally:
            session.in_flight -= 1
            session.idle_since = self._clock()

    def answered(self, session_id: str | None, method: str, status: int) -> None:
        """The app answered a request of ``session_id``: a DELETE it accepted, or 404, ends it."""
        if not session_id or session_id not in self._sessions:
            return
        if status == 404 or (method == "DELETE" and 200 <= status < 300):
            self.end(session_id)

    def end(self, session_id: str) -> None:
        """Forget ``session_id`` and drop what ringfence held for it (once)."""
        if self._sessions.pop(session_id, None) is not None:
            self._on_end(session_id)

    def expire(self) -> None:
        """End every session with nothing in flight for ``idle_seconds`` plus the grace."""
        horizon = self._clock() - self.idle_seconds - IDLE_GRACE_SECONDS
        idle = [
            sid for sid, s in self._sessions.items() if not s.in_flight and s.idle_since <= horizon
        ]
        for session_id in idle:
            self.end(session_id)

    def end_all(self) -> None:
        """The server stops: every session ends."""
        for session_id in list(self._sessions):
            self.end(session_id)
