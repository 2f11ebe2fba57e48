"""The script's output on the host: redacted as it arrives, kept whole or spooled, cut last.

One :class:`OutputCapture` per stream of one run (stdout for the reply,
stderr for the runner's diagnostics). See the class for the order of
redaction and cutting, which is what keeps a secret from surviving a cut.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

import trio

from ..runtime import Redactor

__all__ = ["CUT_SLACK", "MARKER_ROOM", "OutputCapture", "cut_bytes"]

MARKER_ROOM = 512  # bytes of the reply's output cap kept for the cut marker
# Extra characters kept around each cut, so a secret registered late (by a call made after it
# was printed) is redacted whole before the cut is made.
CUT_SLACK = 4096


class OutputCapture:
    """One output stream of the child: redacted as it arrives, cut only afterwards.

    Bytes are decoded (UTF-8, invalid bytes replaced) and passed through a
    :class:`~ringfence.runtime.StreamRedactor` before anything is kept, so a
    secret can never be cut in two and leave a prefix behind. While the
    redacted text fits ``cap`` bytes it is kept whole in memory. Past that it
    goes to a new 0600 file in ``spool_dir`` (at most ``spool_cap`` bytes;
    none without a ``spool_dir``) and memory keeps only a head and a tail,
    with :data:`CUT_SLACK` characters to spare. :meth:`finish` redacts once
    more with every secret known by then (the spool file too) and returns the
    whole text, or head + marker + tail within ``cap`` bytes.

    :meth:`feed` writes to the spool from the calling (trio) thread: appends of
    at most one read (64 KiB) to the page cache, like :func:`cap_text`'s spool.
    """

    def __init__(
        self,
        redactor: Redactor,
        cap: int,
        spool_dir: Path | None = None,
        spool_cap: int = 0,
        what: str = "script output",
    ) -> None:
        self.cap = max(cap, 1)
        self.room = max(self.cap - MARKER_ROOM, 2)  # head + tail when cut
        self.total = 0  # bytes received
        self.size = 0  # bytes of redacted text
        self.spooled = 0
        self.spool_path: str | None = None
        self.eof = trio.Event()
        self._what = what
        self._redactor = redactor
        self._stream = redactor.stream()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._head: list[str] = []  # everything, until it is over the cap; then frozen
        self._head_bytes = 0
        self._tail = ""
        self._over = False
        self._spool_dir = spool_dir
        self._spool_cap = spool_cap
        self._spool: BinaryIO | None = None

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._add(self._stream.feed(self._decoder.decode(data)))

    def _add(self, text: str) -> None:
        if not text:
            return
        raw = text.encode()
        self.size += len(raw)
        self._tail = (self._tail + text)[-(self.room + CUT_SLACK) :]
        if self._over:
            self._write(raw)
            return
        self._head.append(text)
        self._head_bytes += len(raw)
        if self._head_bytes > self.cap:
            self._over = True
            self._write("".join(self._head).encode())

    def _write(self, raw: bytes) -> None:
        if self._spool_dir is None or self.spooled >= self._spool_cap:
            return
        try:
            if self._spool is None:
                self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd, self.spool_path = tempfile.mkstemp(
                    prefix="script-output-", suffix=".txt", dir=self._spool_dir
                )
                self._spool = os.fdopen(fd, "wb")
            raw = raw[: self._spool_cap - self.spooled]
            self._spool.write(raw)
            self.spooled += len(raw)
        except OSError:  # a full or unwritable disk loses the spool, never the run
            self.close(remove=True)
            self._spool_dir = None

    def close(self, *, remove: bool = False) -> None:
        """Close the spool file (and delete it with ``remove``). Idempotent."""
        if self._spool is not None:
            with contextlib.suppress(OSError):
                self._spool.close()
            self._spool = None
        if remove and self.spool_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.spool_path)
            self.spool_path = None

    async def finish(self) -> str:
        """End the stream; the text to report (whole, or cut within ``cap`` bytes)."""
        self._add(self._stream.feed(self._decoder.decode(b"", final=True)))
        self._add(self._stream.flush())
        self.close()
        if not self._over:
            return self._redactor.redact("".join(self._head))
        if self.spool_path is not None:
            try:
                await trio.to_thread.run_sync(self._rewrite_spool)
            except OSError:
                self.close(remove=True)
        # Redact (late secrets included), then cut: never the other way round.
        head = cut_bytes(self._redactor.redact("".join(self._head)), self.room // 2, tail=False)
        tail = cut_bytes(self._redactor.redact(self._tail), self.room - self.room // 2, tail=True)
        cut = self.size - len(head.encode()) - len(tail.encode())
        if self.spool_path is None:
            where = ""
        elif self.spooled < self.size:
            where = (
                f"; the first {self.spooled} bytes are in {self.spool_path} "
                f"(the {self._spool_cap}-byte spool cap)"
            )
        else:
            where = f"; full output in {self.spool_path}"
        return (
            f"{head}\n[… ringfence cut {cut} of {self.size} bytes of {self._what}{where} …]\n{tail}"
        )

    def _rewrite_spool(self) -> None:
        """Redact the spool file again with every secret known now (blocking; in a thread)."""
        assert self.spool_path is not None
        path = self.spool_path
        stream = self._redactor.stream()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        fd, fresh = tempfile.mkstemp(prefix="script-output-", suffix=".tmp", dir=Path(path).parent)
        try:
            with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(stream.feed(decoder.decode(chunk)).encode())
                dst.write((stream.feed(decoder.decode(b"", final=True)) + stream.flush()).encode())
                if self.spooled < self.size:
                    dst.write(
                        f"\n[… ringfence stopped spooling at the {self._spool_cap}-byte cap; "
                        f"{self.size - self.spooled} more bytes of {self._what} not kept …]\n".encode()
                    )
            os.replace(fresh, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(fresh)
            raise


def cut_bytes(text: str, limit: int, *, tail: bool) -> str:
    """The first (or last) ``limit`` UTF-8 bytes of ``text``, on a character boundary."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return (raw[-limit:] if tail else raw[:limit]).decode("utf-8", "ignore")
