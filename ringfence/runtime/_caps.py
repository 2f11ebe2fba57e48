"""Output caps: redact, then head + tail + a marker, and the whole text spooled to a file.

Two promises hold for every text that passes through :func:`cap_text`:

* **Redact first, cut after.** When a ``redact`` function is given it runs on
  the whole text before anything is cut, so a secret that straddles the cut is
  replaced whole and no prefix or suffix of it survives in the reply or the
  spool. (A caller that cuts a text itself before handing it over loses this.)
* **Always valid UTF-8.** Python keeps undecodable bytes of file names and
  ``surrogateescape``-decoded output as lone surrogates (U+DC80 to U+DCFF), which
  no UTF-8 encoder accepts. They are written in the documented escaped form
  of :func:`escape_surrogates`: the byte ``0xNN`` becomes the four characters
  ``\\xNN``; any other lone surrogate becomes ``\\uXXXX``. The form is
  readable and names the byte, but a name that literally contains ``\\xff``
  looks the same as one holding the byte 0xff.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_SPOOL_BYTES", "CappedText", "cap_text", "escape_surrogates", "utf8"]

# The most a spool file holds. Past it the spool keeps the first MAX_SPOOL_BYTES and
# ends with a marker saying how much was not kept: one result must not fill the disk.
MAX_SPOOL_BYTES = 256 * 1024 * 1024

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
    text: str
    truncated: bool
    original_bytes: int
    spool_path: str | None = None


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
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        text = escape_surrogates(text)
        raw = text.encode("utf-8")
    if len(raw) <= limit_bytes:
        return CappedText(text, False, len(raw))
    spool_path = None
    if spool_dir is not None:
        spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, spool_path = tempfile.mkstemp(prefix="output-", suffix=".txt", dir=spool_dir)
        with os.fdopen(fd, "wb") as f:
            if len(raw) <= MAX_SPOOL_BYTES:
                f.write(raw)
            else:
                kept = raw[:MAX_SPOOL_BYTES].decode("utf-8", "ignore").encode("utf-8")
                f.write(kept)
                f.write(
                    f"\n[… ringfence kept the first {len(kept)} of {len(raw)} bytes "
                    f"(spool limit {MAX_SPOOL_BYTES}) …]\n".encode()
                )
    half = max(limit_bytes // 2, 1)
    head = raw[:half].decode("utf-8", "ignore")
    tail = raw[-half:].decode("utf-8", "ignore")
    cut = len(raw) - len(head.encode()) - len(tail.encode())
    where = f"; full output in {spool_path}" if spool_path else ""
    marker = f"\n[… ringfence cut {cut} of {len(raw)} bytes{where} …]\n"
    return CappedText(head + marker + tail, True, len(raw), spool_path)
