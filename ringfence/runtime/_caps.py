"""Output caps: head + tail + a marker, and the whole text spooled to a file."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CappedText", "cap_text"]


@dataclass(frozen=True)
class CappedText:
    text: str
    truncated: bool
    original_bytes: int
    spool_path: str | None = None


def cap_text(text: str, limit_bytes: int, spool_dir: Path | None = None) -> CappedText:
    """Keep ``text`` whole when it fits in ``limit_bytes`` (UTF-8), else head + tail.

    The full text is written to a new file in ``spool_dir`` (mode 0600) and the
    marker names it, so nothing is lost: it is only moved out of the reply.
    Callers redact before capping, so the spool never holds a known secret.
    """
    raw = text.encode("utf-8")
    if len(raw) <= limit_bytes:
        return CappedText(text, False, len(raw))
    spool_path = None
    if spool_dir is not None:
        spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, spool_path = tempfile.mkstemp(prefix="output-", suffix=".txt", dir=spool_dir)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
    half = max(limit_bytes // 2, 1)
    head = raw[:half].decode("utf-8", "ignore")
    tail = raw[-half:].decode("utf-8", "ignore")
    cut = len(raw) - len(head.encode()) - len(tail.encode())
    where = f"; full output in {spool_path}" if spool_path else ""
    marker = f"\n[… ringfence cut {cut} of {len(raw)} bytes{where} …]\n"
    return CappedText(head + marker + tail, True, len(raw), spool_path)
