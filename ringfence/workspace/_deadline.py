"""The deadline of one native file tool call, checked by the long loops that serve it.

The tools layer runs each file tool in a worker thread under a
:class:`Deadline` (:meth:`Deadline.active`); the walker, the search loop and
the wait for ripgrep read it with :func:`current_deadline` and call
:meth:`Deadline.check`. Code outside a tool call runs without one.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..runtime._errors import ToolError, ToolTimeout

__all__ = ["Deadline", "current_deadline"]


@dataclass(frozen=True)
class Deadline:
    """When the native file tool running in this worker thread must stop.

    The walker, the search loop and the wait for ripgrep call :meth:`check`
    often (per directory, per matching line, every 50 ms); it raises
    ToolTimeout once ``at`` (``time.monotonic()``) has passed, or ToolError
    once ``stop`` is set (the call was cancelled). Set for the worker by
    :meth:`active`; code outside a tool call runs without one.
    """

    at: float
    seconds: float
    tool: str
    stop: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        if self.stop.is_set():
            raise ToolError(f"{self.tool} was cancelled; it stopped where it was")
        if time.monotonic() > self.at:
            raise ToolTimeout(
                f"{self.tool} did not finish within {self.seconds:g}s (the file tools' "
                "deadline) and was stopped; search a smaller directory or narrow the pattern",
                field="timeout_seconds",
            )

    @contextlib.contextmanager
    def active(self) -> Iterator[Deadline]:
        token = _DEADLINE.set(self)
        try:
            yield self
        finally:
            _DEADLINE.reset(token)


_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "ringfence_file_tool_deadline", default=None
)


def current_deadline() -> Deadline | None:
    """The deadline of the file tool call this thread runs, if any."""
    return _DEADLINE.get()
