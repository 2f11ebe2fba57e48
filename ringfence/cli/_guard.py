"""The floor under everything the command prints: stdout and stderr through ``terminal_text``.

While a verb runs (:func:`guarded_output`, entered by :func:`._main.main`),
``sys.stdout`` and ``sys.stderr`` are :class:`GuardedStream` objects: every
text written passes :func:`ringfence.runtime._render.terminal_text`, so no
control, bidi, separator or lone-surrogate character reaches the terminal (or a
pipe) raw, whichever print path wrote it and whoever wrote the text. Surfaces
still render their fields (``one_line``, ``visible``) for structure: the floor
cannot tell a verb's own newline from one inside a server's name.

Light on purpose: ``--help`` and ``--version`` import this, so it imports only
the standard library; the renderer (and with it ``ringfence.runtime``) loads
the first time a text holds anything but printable ASCII, newlines and tabs
(ringfence's own help and version texts are ASCII).

Not guarded: ringfence's own styling (rich tables and spinners) writes to the
stream underneath (:func:`unguarded`) with every cell already rendered; child
processes that inherit the terminal (none of the verbs lets one write to it).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["GuardedStream", "guarded_output", "unguarded"]


def _printable(text: str) -> bool:
    """Nothing for the floor to do: only printable ASCII, newlines and tabs. Other text goes
    to the renderer: printable is not enough (a variation selector is printable and invisible)."""
    if not text.isascii():
        return False
    return text.isprintable() or text.replace("\n", " ").replace("\t", " ").isprintable()


class GuardedStream(io.TextIOBase):
    """A text stream that writes ``terminal_text`` of everything to ``inner``."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self.inner = inner

    def write(self, text: str) -> int:
        if not _printable(text):
            from ..runtime._render import terminal_text

            text_out = terminal_text(text)
        else:
            text_out = text
        self.inner.write(text_out)
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.inner, "encoding", None) or "utf-8")


@contextmanager
def guarded_output() -> Iterator[None]:
    """While inside, ``sys.stdout`` and ``sys.stderr`` write through :class:`GuardedStream`."""
    saved = sys.stdout, sys.stderr
    if sys.stdout is not None:
        sys.stdout = GuardedStream(sys.stdout)  # type: ignore[assignment]
    if sys.stderr is not None:
        sys.stderr = GuardedStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def unguarded(stream: TextIO) -> TextIO:
    """The stream under a guard, for styled output whose every text is already rendered."""
    return stream.inner if isinstance(stream, GuardedStream) else stream  # type: ignore[return-value]
