"""Bounded, redacted evidence about one MCP server: its log lines, notifications, failures.

Guarantees: every text is redacted whole *before* it is cut (a secret that
straddles a cut is still removed); each record kind is a bounded ring
(``MAX_LOG_LINES`` log lines of at most ``MAX_LOG_LINE_BYTES``, ``MAX_RECORDS``
notifications of at most ``MAX_LOG_LINE_BYTES`` of JSON each, and failures), so a chatty
server cannot grow the kernel's memory; :class:`NotificationBudget` bounds what its
notifications write to the event stream, so a flood cannot grow the log without bound.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..runtime._errors import RingfenceError
from ..runtime._redact import Redactor

__all__ = [
    "MAX_LOG_LINES",
    "MAX_LOG_LINE_BYTES",
    "MAX_RECORDS",
    "Diagnostics",
    "NotificationBudget",
]

MAX_LOG_LINES = 500
MAX_LOG_LINE_BYTES = 4096
MAX_RECORDS = 200


@dataclass
class Diagnostics:
    """Bounded, redacted evidence about one server: logs, notifications, failures."""

    redactor: Redactor
    logs: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    notifications: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RECORDS))
    failures: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RECORDS))
    # How many of the server's requests (sampling, elicitation) are handled, per window.
    requests: NotificationBudget = field(default_factory=lambda: NotificationBudget())

    def log(self, source: str, text: str, level: str = "info") -> None:
        # Redact the whole line, then cut: a cut first would leave a secret's head behind.
        text = self.redactor.redact(text)[:MAX_LOG_LINE_BYTES]
        self.logs.append(
            {"ts": round(time.time(), 3), "source": source, "level": level, "text": text}
        )

    def notify(self, method: str, **data: Any) -> dict[str, Any]:
        """Keep one notification (redacted whole, then cut); return the record as kept."""
        fields = self.redactor.redact_value(data)
        for key, value in fields.items():
            text = json.dumps(value, ensure_ascii=False, default=str)
            if len(text) > MAX_LOG_LINE_BYTES:  # characters: at most 4x that in bytes
                fields[key] = {"cut": text[:MAX_LOG_LINE_BYTES], "characters": len(text)}
        record = {"ts": round(time.time(), 3), "method": method, **fields}
        self.notifications.append(record)
        return record

    def fail(self, action: str, error: RingfenceError | str) -> None:
        message = error.message if isinstance(error, RingfenceError) else error
        code = error.code if isinstance(error, RingfenceError) else "note"
        self.failures.append(
            {
                "ts": round(time.time(), 3),
                "action": action,
                "code": code,
                "message": self.redactor.redact(message),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "logs": list(self.logs),
            "notifications": list(self.notifications),
            "failures": list(self.failures),
        }


@dataclass
class NotificationBudget:
    """How many of one server's notifications become event records: some per window, then counts.

    Per window of ``window_seconds`` (on ``clock``) the first ``per_window``
    notifications are recorded one by one (:meth:`admit` says so); later ones are
    only counted by method, and :meth:`take_summary` hands back that count once
    (when the next window starts, and when the connection ends), for one summary
    record. So a server sending notifications as fast as it can costs the log at
    most ``per_window`` + 1 records a window.
    """

    per_window: int = 20
    window_seconds: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _window_start: float | None = None
    _recorded: int = 0
    _counted: Counter[str] = field(default_factory=Counter)

    def admit(self, method: str) -> tuple[bool, dict[str, Any] | None]:
        """(record this one?, the summary of the window that just ended, if any)."""
        now = self.clock()
        summary = None
        if self._window_start is None or now - self._window_start >= self.window_seconds:
            summary = self.take_summary()
            self._window_start, self._recorded = now, 0
        if self._recorded < self.per_window:
            self._recorded += 1
            return True, summary
        self._counted[method[:MAX_LABEL_CHARACTERS]] += 1
        return False, summary

    def take_summary(self) -> dict[str, Any] | None:
        """The notifications counted but not recorded since the last summary, or None."""
        if not self._counted:
            return None
        methods = dict(self._counted.most_common(MAX_SUMMARY_METHODS))
        out = {
            "count": sum(self._counted.values()),
            "methods": methods,
            "recorded_individually": self._recorded,
            "window_seconds": self.window_seconds,
        }
        self._counted.clear()
        return out


MAX_LABEL_CHARACTERS = 200  # of a method name a summary counts by
MAX_SUMMARY_METHODS = 20  # method names a summary lists (the most frequent)
