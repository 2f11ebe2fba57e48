"""Bounded, redacted evidence about one MCP server: its log lines, notifications, failures.

Guarantees: every text is redacted whole *before* it is cut (a secret that
straddles a cut is still removed); each record kind is a bounded ring
(``MAX_LOG_LINES`` log lines of at most ``MAX_LOG_LINE_BYTES``, ``MAX_RECORDS``
notifications of at most ``MAX_LOG_LINE_BYTES`` of JSON each, and failures), so a chatty
server cannot grow the kernel's memory.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..runtime._errors import RingfenceError
from ..runtime._redact import Redactor

__all__ = ["MAX_LOG_LINES", "MAX_LOG_LINE_BYTES", "MAX_RECORDS", "Diagnostics"]

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
