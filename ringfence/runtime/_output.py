"""Output caps: redact, then head + tail + a marker, and the whole text spooled to a file.

:class:`OutputBuffer` is the one head/tail buffer of ringfence: the kernel's
result cap (:func:`cap_text`, a whole text fed at once), ``run_shell``'s
command output (``backends._output``) and a script's output (``bridge._capture``)
all keep their head and tail in it, and all cut in :meth:`OutputBuffer.finish`.

Two promises hold for every text that passes through it:

* **Redact first, cut after.** When a ``redact`` function is given it runs on
  the whole text before anything is cut, so a secret that straddles the cut is
  replaced whole and no prefix or suffix of it survives in the reply or the
  spool. (A caller that cuts a text itself before handing it over loses this.)
  Text fed before its redactor is known is kept in memory only (a head and a
  tail window) and redacted at :meth:`~OutputBuffer.finish`; only text already
  redacted (by the caller, or by a :class:`~ringfence.runtime._redact.StreamRedactor`
  as it arrives) is written to a spool file before the end, and it is
  redacted once more at the end for secrets registered meanwhile.
* **Always valid UTF-8.** Python keeps undecodable bytes of file names and
  ``surrogateescape``-decoded output as lone surrogates (U+DC80 to U+DCFF), which
  no UTF-8 encoder accepts. They are written in the documented escaped form
  of :func:`escape_surrogates`: the byte ``0xNN`` becomes the four characters
  ``\\xNN``; any other lone surrogate becomes ``\\uXXXX``. The form is
  readable and names the byte, but a name that literally contains ``\\xff``
  looks the same as one holding the byte 0xff.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from ._errors import InvalidArguments
from ._redact import Redactor

__all__ = [
    "DEFAULT_SPOOL_QUOTA",
    "MAX_SPOOL_BYTES",
    "CappedText",
    "OutputBuffer",
    "cap_text",
    "cut_bytes",
    "escape_surrogates",
    "reserve_spool",
    "set_spool_quota",
    "spool_quota",
    "utf8",
]

# The most a spool file holds. Past it the spool keeps the first MAX_SPOOL_BYTES and
# ends with a marker saying how much was not kept: one result must not fill the disk.
MAX_SPOOL_BYTES = 256 * 1024 * 1024
# The most all spool files of one spool directory (a session's) hold together. Each spool is
# capped, but a script multiplies them: 200 reads of a 6.7 MB file in one parallel() wrote
# 1.3 GB in 22 s, and a run may make 10,000 calls. Past it nothing more is spooled; the
# marker says so (the reply keeps its head and tail as always).
DEFAULT_SPOOL_QUOTA = 4 * 1024 * 1024 * 1024

_quota_lock = threading.Lock()
_spool_quota: dict[str, int] = {}  # a spool directory's quota, when not the default
_spool_used: dict[str, int] = {}  # bytes its spool files hold, as this process wrote them


def _quota_key(spool_dir: Path) -> str:
    return os.path.abspath(spool_dir)


def set_spool_quota(spool_dir: Path, quota_bytes: int) -> None:
    """Bound what every spool file in ``spool_dir`` holds together (a kernel's, at its start)."""
    if type(quota_bytes) is not int or quota_bytes < 0:
        raise InvalidArguments(
            f"spool_quota_bytes must be a number of bytes (0 or more), not {quota_bytes!r}",
            field="spool_quota_bytes",
        )
    with _quota_lock:
        _spool_quota[_quota_key(spool_dir)] = quota_bytes


def spool_quota(spool_dir: Path) -> int:
    """The quota of ``spool_dir``'s spool files together."""
    return _spool_quota.get(_quota_key(spool_dir), DEFAULT_SPOOL_QUOTA)


def _reserve(spool_dir: Path, want: int) -> int:
    """Take up to ``want`` bytes of ``spool_dir``'s quota; how many were taken."""
    key = _quota_key(spool_dir)
    with _quota_lock:
        used = _spool_used.get(key, 0)
        granted = max(0, min(want, _spool_quota.get(key, DEFAULT_SPOOL_QUOTA) - used))
        _spool_used[key] = used + granted
    return granted


def reserve_spool(spool_dir: Path, n: int) -> bool:
    """Take ``n`` bytes of ``spool_dir``'s quota for a file written whole (an MCP
    attachment), or nothing and False when they do not fit."""
    key = _quota_key(spool_dir)
    with _quota_lock:
        used = _spool_used.get(key, 0)
        if used + n > _spool_quota.get(key, DEFAULT_SPOOL_QUOTA):
            return False
        _spool_used[key] = used + n
    return True


def _release(spool_dir: Path, n: int) -> None:
    """Give back ``n`` bytes of ``spool_dir``'s quota (a spool file removed)."""
    key = _quota_key(spool_dir)
    with _quota_lock:
        _spool_used[key] = max(0, _spool_used.get(key, 0) - n)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF is how surrogateescape carries the undecodable byte 0x80..0xFF.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def escape_surrogates(text: str) -> str:
    """``text`` with every lone surrogate in the escaped form above (unchanged when none)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_escape_one, text)


def utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text``, lone surrogates escaped (never raises UnicodeEncodeError)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return escape_surrogates(text).encode("utf-8")


@dataclass(frozen=True)
class CappedText:
    """A text after its cap: whole, or head + marker + tail, and where the rest is.

    ``original_bytes``: how many bytes came in (for a stream, every byte
    received, before decoding and redaction); ``total_bytes`` is the same
    number under the name command results use.
    """

    text: str
    truncated: bool
    original_bytes: int
    spool_path: str | None = None

    @property
    def total_bytes(self) -> int:
        return self.original_bytes


def cut_bytes(text: str, limit: int, *, tail: bool) -> str:
    """The first (or last) ``limit`` UTF-8 bytes of ``text``, on a character boundary."""
    raw = utf8(text)
    if len(raw) <= limit:
        return text
    return (raw[-limit:] if tail else raw[:limit]).decode("utf-8", "ignore")


class OutputBuffer:
    """Text arriving in pieces, kept as a head and a tail; redacted first, cut last.

    Memory holds the first ``head_bytes`` bytes (whole while the text fits)
    and a sliding window of the last ``tail_chars`` characters after them.
    How text is redacted decides when it may touch the disk:

    * ``redactor``: each piece is redacted on arrival by the redactor's
      stream (a secret split across pieces included); once the text is past
      ``head_bytes`` it is appended to a new 0600 spool file in
      ``spool_dir`` (at most ``spool_cap`` bytes). :meth:`finish` redacts the
      kept parts and the spool file once more with every secret known then.
    * ``redacted=True``: the caller feeds text it has redacted; spooled the same way.
    * neither: raw text, redacted only at :meth:`finish` (by its ``redact``);
      nothing is written before then. If more than fits the two windows
      arrived, each window is redacted whole and ``margin_chars`` characters
      either side of the gap are dropped, so a secret that straddled the gap
      leaves no recognisable piece behind.

    :meth:`finish` returns the whole text when it fits ``limit`` bytes, else
    a head and a tail of ``(limit - marker_room) // 2`` bytes each around a
    marker naming the spool file (written then, if not already).
    Blocking (file writes): call :meth:`finish` from a worker thread when the
    spool may be large. ``what`` names the text in markers.
    """

    def __init__(
        self,
        head_bytes: int,
        tail_chars: int,
        *,
        redactor: Redactor | None = None,
        redacted: bool = False,
        spool_dir: Path | None = None,
        spool_cap: int | None = None,
        what: str = "",
    ) -> None:
        self._head_limit = max(head_bytes, 1)
        self._tail_chars = max(tail_chars, 1)
        self._redactor = redactor
        self._stream = redactor.stream() if redactor is not None else None
        self._early = redactor is not None or redacted  # may be spooled as it arrives
        self._spool_dir = spool_dir
        self._spool_cap = MAX_SPOOL_BYTES if spool_cap is None else spool_cap
        self._what = f" of {what}" if what else ""
        self._head: list[str] = []
        self._head_bytes = 0
        self._tail = ""
        self._spool: BinaryIO | None = None
        self.over = False  # more than head_bytes arrived
        self.size = 0  # bytes of text fed (after the stream redactor)
        self.spooled = 0
        self.spool_path: str | None = None
        self._quota_dir: Path | None = None  # whose quota this spool's bytes were taken from
        self.quota_hit = False  # the spool directory's quota stopped this spool

    def feed(self, text: str) -> None:
        if self._stream is not None:
            text = self._stream.feed(text)
        self._add(text)

    def _add(self, text: str) -> None:
        if not text:
            return
        text = escape_surrogates(text)
        raw = text.encode("utf-8")
        self.size += len(raw)
        if not self.over:
            room = self._head_limit - self._head_bytes
            if len(raw) <= room:
                self._head.append(text)
                self._head_bytes += len(raw)
                return
            first = raw[:room].decode("utf-8", "ignore")  # a prefix, on a character boundary
            self._head.append(first)
            self._head_bytes += len(first.encode("utf-8"))
            text = text[len(first) :]
            self.over = True
            if self._early:
                self._spill("".join(self._head).encode("utf-8"))
        self._tail = (self._tail + text)[-self._tail_chars :]
        if self._early:
            self._spill(text.encode("utf-8"))

    def _spill(self, raw: bytes) -> None:
        """Append redacted bytes to the spool (opened on first use; capped)."""
        if self._spool_dir is None or self.spooled >= self._spool_cap or self.quota_hit:
            return
        want = min(len(raw), self._spool_cap - self.spooled)
        granted = _reserve(self._spool_dir, want)
        if granted < want:
            self.quota_hit = True
        if granted == 0:
            return
        try:
            if self._spool is None:
                self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd, self.spool_path = tempfile.mkstemp(
                    prefix="output-", suffix=".txt", dir=self._spool_dir
                )
                self._spool = os.fdopen(fd, "wb")
            self._quota_dir = self._spool_dir
            self._spool.write(raw[:granted])
            self.spooled += granted
        except OSError:  # a full or unwritable disk loses the spool, never the output
            _release(self._spool_dir, granted)  # this write's; close() gives back the rest
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
            if self._quota_dir is not None:
                _release(self._quota_dir, self.spooled)
                self._quota_dir = None
            self.spooled = 0

    def finish(
        self,
        limit: int,
        *,
        redact: Callable[[str], str] | None = None,
        marker_room: int = 0,
        margin_chars: int = 0,
        spool_dir: Path | None = None,
    ) -> CappedText:
        """End the text: redact (``redact``, else the redactor), then cap to ``limit`` bytes.

        ``spool_dir`` (raw text only: it is written nowhere before this call)
        is where the whole text goes when it is cut.
        """
        if spool_dir is not None and not self._early:
            self._spool_dir = spool_dir
        if self._stream is not None:
            self._add(self._stream.flush())
        self.close()
        clean = redact or (self._redactor.redact if self._redactor is not None else _same)
        if not self.over:
            return self._whole(clean("".join(self._head)), limit, marker_room)
        if self._early:  # the spool (if any) holds the middle: cut from the two windows
            if self.spool_path is not None and self._redactor is not None:
                try:
                    self._rewrite_spool(self._redactor)
                except OSError:
                    self.close(remove=True)
            head = clean("".join(self._head))
            return self._cut(head, clean(self._tail), self.size, limit, marker_room)
        gap = self.size - self._head_bytes - len(self._tail.encode("utf-8"))
        if gap <= 0:  # nothing lost: one contiguous text, redacted whole
            return self._whole(clean("".join(self._head) + self._tail), limit, marker_room)
        # Redact each window whole, then drop a margin at the gap: what is left of a
        # secret cut by the gap lies inside the margin.
        head = clean("".join(self._head))
        head = head[: max(len(head) - margin_chars, 0)]
        tail = clean(self._tail)[margin_chars:]
        marker = (
            f"\n[… ringfence dropped {gap} bytes past its {self._head_limit}-byte spool "
            f"limit, and {margin_chars} characters either side of the gap …]\n"
        )
        return replace(self._whole(head + marker + tail, limit, marker_room), truncated=True)

    def _whole(
        self, text: str, limit: int, marker_room: int, raw: bytes | None = None
    ) -> CappedText:
        """One redacted text in memory: itself when it fits, else spooled whole and cut."""
        raw = utf8(text) if raw is None else raw
        text = escape_surrogates(text)
        if len(raw) <= limit:
            return CappedText(text, False, len(raw))
        if self._spool_dir is not None:
            self.close(remove=True)
            self._spill(raw)
            self.close()
        self._write_trailer(len(raw))
        return self._cut(text, text, len(raw), limit, marker_room, raw)

    def _write_trailer(self, size: int) -> None:
        """Say at the end of a capped spool how much of the text it does not hold."""
        if self.spool_path is None or self.spooled >= size:
            return
        with open(self.spool_path, "ab") as f:
            f.write(self._trailer(size).encode("utf-8"))

    def _trailer(self, size: int) -> str:
        return (
            f"\n[… ringfence kept the first {self.spooled} of {size} bytes{self._what} "
            f"({self._bound()}); {size - self.spooled} more bytes{self._what} "
            "not kept …]\n"
        )

    def _bound(self) -> str:
        """The bound that stopped this spool: its own cap, or its directory's quota."""
        if self.quota_hit and self._quota_dir is not None:
            return f"the session's spool quota of {spool_quota(self._quota_dir)} bytes is used up"
        return f"spool cap {self._spool_cap}"

    def _cut(
        self,
        head: str,
        tail: str,
        size: int,
        limit: int,
        marker_room: int,
        raw: bytes | None = None,
    ) -> CappedText:
        room = max(limit - marker_room, 2)
        half = max(room // 2, 1)
        head_raw = utf8(head) if raw is None else raw
        tail_raw = head_raw if tail is head else utf8(tail)  # one text: encoded once
        head_raw = head_raw[:half].decode("utf-8", "ignore").encode("utf-8")
        tail_raw = tail_raw[-half:].decode("utf-8", "ignore").encode("utf-8")
        head, tail = head_raw.decode("utf-8"), tail_raw.decode("utf-8")
        cut = size - len(head_raw) - len(tail_raw)
        if self.spool_path is None:
            where = ""
            if self.quota_hit and self._spool_dir is not None:
                where = (
                    f"; not spooled: the session's spool quota of "
                    f"{spool_quota(self._spool_dir)} bytes is used up"
                )
        elif self.spooled < size:
            bound = self._bound() if self.quota_hit else f"the {self._spool_cap}-byte spool cap"
            where = f"; the first {self.spooled} bytes are in {self.spool_path} ({bound})"
        else:
            where = f"; full output in {self.spool_path}"
        marker = f"\n[… ringfence cut {cut} of {size} bytes{self._what}{where} …]\n"
        return CappedText(head + marker + tail, True, size, self.spool_path)

    def _rewrite_spool(self, redactor: Redactor) -> None:
        """Redact the spool file again with every secret known now (blocking)."""
        assert self.spool_path is not None
        path = self.spool_path
        stream = redactor.stream()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        fd, fresh = tempfile.mkstemp(prefix="output-", suffix=".tmp", dir=Path(path).parent)
        try:
            with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(utf8(stream.feed(decoder.decode(chunk))))
                dst.write(utf8(stream.feed(decoder.decode(b"", final=True)) + stream.flush()))
                if self.spooled < self.size:
                    dst.write(utf8(self._trailer(self.size)))
            os.replace(fresh, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(fresh)
            raise


def _same(text: str) -> str:
    return text


def cap_text(
    text: str,
    limit_bytes: int,
    spool_dir: Path | None = None,
    *,
    redact: Callable[[str], str] | None = None,
) -> CappedText:
    """Redact ``text`` (if ``redact`` is given), then keep it whole when it fits, else head + tail.

    ``limit_bytes`` counts UTF-8 bytes of the kept head and tail; the marker
    between them comes on top. When the text is cut and ``spool_dir`` is
    given, the whole redacted text (up to :data:`MAX_SPOOL_BYTES`) is written
    to a new file there (mode 0600) and the marker names it, so nothing is
    lost: it is only moved out of the reply. The returned text is always
    encodable as UTF-8 (lone surrogates escaped, see the module docstring).
    Raises OSError when the spool cannot be written.
    """
    if redact is not None:
        text = redact(text)
    raw = utf8(text)
    if len(raw) <= limit_bytes:  # the common case, without a buffer (about 1 µs)
        return CappedText(escape_surrogates(text), False, len(raw))
    # The whole text is already here: the buffer's cut, without feeding it piece by piece.
    return OutputBuffer(1, 1, redacted=True, spool_dir=spool_dir)._whole(text, limit_bytes, 0, raw)
