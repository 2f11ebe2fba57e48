"""Capturing a command's output: streamed to a callback as it arrives, capped at the end."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..runtime import cap_text
from ._types import OutputCallback, Stream

__all__ = ["Capture", "CapturedText"]

# Output kept in memory per stream before the middle is dropped. Past this the
# spool holds the first MAX_CAPTURE_BYTES plus the tail: a command that
# prints gigabytes must not take the kernel's memory with it.
MAX_CAPTURE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class CapturedText:
    text: str
    truncated: bool
    total_bytes: int
    spool_path: str | None


class Capture:
    """One output stream of one command.

    :meth:`feed` takes raw bytes as they arrive, hands decoded text to the
    callback and keeps the bytes; :meth:`finish` decodes, redacts and caps
    them with :func:`ringfence.runtime.cap_text` (head + tail, full text
    spooled), in that order so the spool never holds a known secret.
    """

    def __init__(
        self,
        stream: Stream,
        on_output: OutputCallback | None,
        *,
        memory_limit: int = MAX_CAPTURE_BYTES,
    ) -> None:
        self.stream: Stream = stream
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace") if on_output else None
        self._head = bytearray()
        self._tail = bytearray()
        self._limit = memory_limit
        self.total = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._decoder is not None and self._on_output is not None:
            text = self._decoder.decode(data)
            if text:
                self._on_output(self.stream, text)
        self.total += len(data)
        room = self._limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            # Past the memory limit only a tail window survives.
            self._tail += data
            if len(self._tail) > self._limit:
                del self._tail[: len(self._tail) - self._limit]

    def flush(self) -> None:
        """Hand the callback any bytes held back by the decoder (end of stream)."""
        if self._decoder is not None and self._on_output is not None:
            text = self._decoder.decode(b"", final=True)
            if text:
                self._on_output(self.stream, text)

    def finish(
        self, cap: int, spool_dir: Path | None, redact: Callable[[str], str] | None
    ) -> CapturedText:
        raw = bytes(self._head)
        if self._tail:
            dropped = self.total - len(self._head) - len(self._tail)
            if dropped > 0:
                marker = (
                    f"\n[… ringfence dropped {dropped} bytes past its "
                    f"{self._limit}-byte capture limit …]\n"
                ).encode()
                raw += marker
            raw += bytes(self._tail)
        text = raw.decode("utf-8", "replace")
        if redact is not None:
            text = redact(text)
        capped = cap_text(text, cap, spool_dir)
        return CapturedText(
            capped.text,
            capped.truncated or self.total > len(raw),
            self.total,
            capped.spool_path,
        )
