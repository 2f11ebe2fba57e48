"""File names as the file tools show and take them: a lossless, unambiguous text form.

Linux file names are bytes; Python reads the bytes that are not UTF-8 as lone
surrogates (``surrogateescape``), which JSON, the event log and a terminal
cannot carry. At the tool boundary (``ringfence.workspace._file_tools``) every name
is therefore shown in an *escaped form*, and every path argument is read back
from it:

* a byte that is not part of valid UTF-8 is written ``\\xHH`` (two lowercase
  hex digits, 80-ff): the name ``b"\\xff\\xfe.txt"`` is shown ``\\xff\\xfe.txt``;
* a literal backslash is written ``\\\\``, so the form is unambiguous;
* every other character is itself.

The form is accepted back: ``read_file`` of ``\\xff\\xfe.txt`` reads that file.
Each name has exactly one spelling, so a path argument is refused
(``invalid_arguments``) when a backslash starts anything else, when ``\\xHH``
names an ASCII byte or bytes that form valid UTF-8 (write the character), or
when the text holds a lone surrogate. Names read from the file system never
need more than these two escapes.
"""

from __future__ import annotations

import os
import re

from ..runtime._errors import InvalidArguments

__all__ = ["escape_name", "escape_text", "unescape_path"]

_SURROGATES = re.compile("[\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(\\|x([0-9a-fA-F]{2})|)")


def _escape_char(m: re.Match[str]) -> str:
    code = ord(m.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's spelling of the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return "\ufffd"  # a lone surrogate no file name read from Linux can hold


def escape_name(name: str) -> str:
    """``name`` (a path or a file name as ``os`` returns it) in the escaped form."""
    if "\\" not in name and (name.isascii() or not _SURROGATES.search(name)):
        return name  # the common case: valid UTF-8 without a backslash is shown as is
    return _SURROGATES.sub(_escape_char, name.replace("\\", "\\\\"))


def escape_text(text: str) -> str:
    """Prose (an error message, a notice) with its undecodable bytes as ``\\xHH``.

    Backslashes stay as they are: this is for reading, not for taking back.
    """
    if text.isascii() or not _SURROGATES.search(text):
        return text
    return _SURROGATES.sub(_escape_char, text)


def unescape_path(text: str, field: str = "path") -> str:
    """The ``os`` spelling (surrogateescape) of a path given in the escaped form.

    Raises InvalidArguments naming ``field`` for a spelling that is not the
    one :func:`escape_name` produces (see the module docstring).
    """
    if _SURROGATES.search(text):
        raise InvalidArguments(
            f"{field} contains a lone surrogate; write a byte that is not UTF-8 as \\xHH "
            "(file names are shown that way)",
            field=field,
        )
    if "\\" not in text:
        return text
    out: list[str] = []
    pos = 0
    for m in _ESCAPE.finditer(text):
        out.append(text[pos : m.start()])
        pos = m.end()
        if m.group(1) == "\\":
            out.append("\\")
            continue
        if m.group(2) is None:
            raise InvalidArguments(
                f"{field} {escape_name(text)!r} has a backslash that starts neither \\\\ nor "
                "\\xHH; file names are shown escaped, so write a backslash as \\\\",
                field=field,
            )
        byte = int(m.group(2), 16)
        if byte < 0x80:
            raise InvalidArguments(
                f"{field}: \\x{byte:02x} is an ASCII character; write it as itself",
                field=field,
            )
        out.append(chr(0xDC00 + byte))
    out.append(text[pos:])
    raw = "".join(out)
    # One spelling per name: escapes that decode as UTF-8 name a character, not bytes.
    if os.fsdecode(os.fsencode(raw)) != raw:
        raise InvalidArguments(
            f"{field} {text!r} spells valid UTF-8 as \\xHH escapes; write those characters "
            "as themselves",
            field=field,
        )
    return raw
