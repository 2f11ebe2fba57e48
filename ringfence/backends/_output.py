"""Capturing a command's output: streamed to a callback as it arrives, capped at the end.

The spool (the file a cut reply names: "full output in …") holds a stream's
whole output, redacted, up to :data:`SPOOL_LIMIT_BYTES` (64 MiB). Past that
it holds the first 64 MiB, a marker saying how much was dropped, and the
last :data:`TAIL_WINDOW_BYTES` (1 MiB), so the reply still shows how the
command ended. Both are also what is kept in memory while the command runs.

Order, always: decode, redact, then cut. Redaction sees each kept part
whole; where the middle was dropped, :data:`CUT_MARGIN_CHARS` of redacted
text on either side of the gap are dropped too, so a registered secret that
straddled the gap cannot leave a recognisable prefix or suffix behind (for
secrets up to that length: 64 KiB). The reply's own head/tail cut
(:func:`ringfence.runtime.cap_text`) runs on the redacted text.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..runtime import cap_text
from ._types import OutputCallback, Stream

__all__ = ["CUT_MARGIN_CHARS", "SPOOL_LIMIT_BYTES", "TAIL_WINDOW_BYTES", "Capture", "CapturedText"]

SPOOL_LIMIT_BYTES = 64 * 1024 * 1024
TAIL_WINDOW_BYTES = 1024 * 1024
CUT_MARGIN_CHARS = 64 * 1024


@dataclass(frozen=True)
class CapturedText:
    text: str
    truncated: bool
    total_bytes: int
    spool_path: str | None


class Capture:
    """One output stream of one command.

    :meth:`feed` takes raw bytes as they arrive, hands decoded text to the
    callback and keeps the first ``spool_limit`` bytes plus a sliding window
    of the last ``tail_window``; :meth:`finish` decodes, redacts, then caps
    (head + tail, full text spooled), in that order, so neither the reply
    nor the spool holds a known secret or a cut-off piece of one.
    """

    def __init__(
        self,
        stream: Stream,
        on_output: OutputCallback | None,
        *,
        spool_limit: int = SPOOL_LIMIT_BYTES,
        tail_window: int = TAIL_WINDOW_BYTES,
        cut_margin: int = CUT_MARGIN_CHARS,
    ) -> None:
        self.stream: Stream = stream
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace") if on_output else None
        self._head = bytearray()
        self._tail = bytearray()
        self._limit = spool_limit
        self._window = tail_window
        self._margin = cut_margin
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
            # Past the spool limit only a tail window survives.
            self._tail += data
            if len(self._tail) > self._window:
                del self._tail[: len(self._tail) - self._window]

    def flush(self) -> None:
        """Hand the callback any bytes held back by the decoder (end of stream)."""
        if self._decoder is not None and self._on_output is not None:
            text = self._decoder.decode(b"", final=True)
            if text:
                self._on_output(self.stream, text)

    def finish(
        self, cap: int, spool_dir: Path | None, redact: Callable[[str], str] | None
    ) -> CapturedText:
        """The reply text (at most ``cap`` bytes plus a marker), its spool, and the byte count."""
        dropped = self.total - len(self._head) - len(self._tail)
        clean = redact or (lambda text: text)
        if dropped <= 0:  # nothing lost: one contiguous text, redacted whole
            text = clean(bytes(self._head + self._tail).decode("utf-8", "replace"))
        else:
            # Redact each side whole, then drop a margin at the gap: what is left
            # of a secret cut by the gap lies inside the margin.
            head = clean(self._head.decode("utf-8", "replace"))
            head = head[: max(len(head) - self._margin, 0)]
            tail = clean(self._tail.decode("utf-8", "replace"))[self._margin :]
            marker = (
                f"\n[… ringfence dropped {dropped} bytes past its {self._limit}-byte spool "
                f"limit, and {self._margin} characters either side of the gap …]\n"
            )
            text = head + marker + tail
        capped = cap_text(text, cap, spool_dir)
        return CapturedText(
            capped.text,
            capped.truncated or dropped > 0,
            self.total,
            capped.spool_path,
        )
