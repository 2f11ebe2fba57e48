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
runs on the redacted text. All of it is :class:`ringfence.runtime.OutputBuffer`
(the one head/tail buffer); this module adds the bytes, the decoding and the
live callback.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runtime._output import CappedText, OutputBuffer
from ._types import OutputCallback, ShellResult, Stream

__all__ = [
    "CUT_MARGIN_CHARS",
    "SPOOL_LIMIT_BYTES",
    "TAIL_WINDOW_BYTES",
    "Capture",
    "shell_result",
]

SPOOL_LIMIT_BYTES = 64 * 1024 * 1024
TAIL_WINDOW_BYTES = 1024 * 1024
CUT_MARGIN_CHARS = 64 * 1024


class Capture:
    """One output stream of one command.

    :meth:`feed` takes raw bytes as they arrive, hands decoded text to the
    callback and keeps the first ``spool_limit`` bytes plus a sliding window
    of the last ``tail_window`` characters; :meth:`finish` redacts, then caps
    (head + tail, full text spooled), in that order, so neither the reply
    nor the spool holds a known secret or a cut-off piece of one. Nothing is
    written to disk before :meth:`finish` (the redactor is known only then).
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
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._limit = spool_limit
        self._window = tail_window
        self._margin = cut_margin
        self._buffer: OutputBuffer | None = None
        self._pending: list[str] = []
        self.total = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        self._text(self._decoder.decode(data))

    def _text(self, text: str) -> None:
        if not text:
            return
        if self._on_output is not None:
            self._on_output(self.stream, text)
        self._pending.append(text)
        if len(self._pending) >= 64:  # batch small pieces into the buffer
            self._drain()

    def _drain(self) -> None:
        if self._pending:
            if self._buffer is None:
                self._buffer = OutputBuffer(self._limit, self._window)
            self._buffer.feed("".join(self._pending))
            self._pending.clear()

    def flush(self) -> None:
        """Hand the callback any bytes held back by the decoder (end of stream)."""
        self._text(self._decoder.decode(b"", final=True))

    def finish(
        self, cap: int, spool_dir: Path | None, redact: Callable[[str], str] | None
    ) -> CappedText:
        """The reply text (at most ``cap`` bytes plus a marker), its spool, and the byte count."""
        self.flush()
        self._drain()
        buffer = self._buffer or OutputBuffer(self._limit, self._window)
        capped = buffer.finish(
            cap, redact=redact or _same, margin_chars=self._margin, spool_dir=spool_dir
        )
        return CappedText(capped.text, capped.truncated, self.total, capped.spool_path)


def _same(text: str) -> str:
    return text


def shell_result(
    out: CappedText,
    err: CappedText,
    *,
    exit_code: int | None,
    signal: int | None,
    started: float,
    timed_out: bool = False,
    **extra: Any,
) -> ShellResult:
    """The one assembly of a :class:`ShellResult` from a command's two finished streams.

    Every backend ends a command here, so the result's output fields mean the
    same everywhere; ``extra`` carries a backend's own fields (uppers, notes…).
    """
    return ShellResult(
        exit_code=exit_code,
        signal=signal,
        duration=time.monotonic() - started,
        stdout=out.text,
        stderr=err.text,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        stdout_bytes=out.total_bytes,
        stderr_bytes=err.total_bytes,
        stdout_spool=out.spool_path,
        stderr_spool=err.spool_path,
        timed_out=timed_out,
        **extra,
    )
