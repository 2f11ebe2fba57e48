"""What a person is shown: one renderer for every text ringfence did not write itself.

What an agent, a tool, a script or an MCP server wrote reaches a person only through this
module: the approval prompt (:func:`render_approval`, shared by the terminal, ``serve``'s
elicitation and any host), the review views, the command's listings, error lines and ``--json``
output; last, :func:`terminal_text` guards everything the command writes. One character rule
in three strengths (:func:`terminal_text`, :func:`visible`, :func:`one_line`), so no control,
bidi or invisible character reaches a person raw and no value can pose as part of a prompt.

The three strengths, the prompt's ordering and limits, and what is not promised:
docs/design/render.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._redact import name_segments

if TYPE_CHECKING:
    from ._approval import ApprovalRequest

__all__ = [
    "DECISIVE_SHOWN_WHOLE",
    "MAX_BLANK_LINES",
    "MAX_INDENT",
    "MAX_VISIBLE_RUN",
    "OTHER_SHOWN_WHOLE",
    "RUNS_HEAD_TAIL",
    "RUNS_SHOWN_WHOLE",
    "as_read",
    "fingerprint",
    "json_text",
    "one_line",
    "render_approval",
    "terminal_text",
    "visible",
    "visible_line",
    "when_text",
]

# A value that runs (a command, a script) is shown whole up to this many characters; beyond
# it the prompt says loudly that the middle is not shown, and shows head and tail.
RUNS_SHOWN_WHOLE = 10_000
RUNS_HEAD_TAIL = 4_000
# Other decisive values (where: path, cwd, url, env…) are shown whole up to this.
DECISIVE_SHOWN_WHOLE = 4_096
DECISIVE_HEAD_TAIL = 1_500
# Everything else (file content, notes…) longer than this becomes head…tail with size and digest.
OTHER_SHOWN_WHOLE = 240
OTHER_HEAD, OTHER_TAIL = 120, 80
# Runs of one invisible or blank character longer than this are counted, not shown.
MAX_VISIBLE_RUN = 8
# A line's leading indentation up to this many spaces is kept (code stays readable).
MAX_INDENT = 32
# More consecutive blank lines than this are counted, not shown.
MAX_BLANK_LINES = 2
DIGEST_HEX = 16

# -- the floor: what never reaches a terminal raw ------------------------------------------

# Categories a terminal may act on, or that reorder or hide text: controls, format (bidi,
# zero-width), line and paragraph separators, lone surrogates.
_TERMINAL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_TERMINAL_ASCII = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e\n]")
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): what a renderer draws as
# nothing. Beyond the format characters (Cf) it holds printable ones: variation selectors
# (U+FE00-FE0F, U+E0100-E01EF: an invisible payload after one visible letter), the combining
# grapheme joiner, the Hangul and Khmer fillers, and reserved code points that will draw
# nothing. The property is the rule, as the categories are: stable, not a list of spellings.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a JSON text spells a character beyond the BMP as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _terminal_char(match: re.Match[str]) -> str:
    char = match.group(0)
    if char == "\t" or (
        unicodedata.category(char) not in _TERMINAL_CATEGORIES and _INVISIBLE.match(char) is None
    ):
        return char
    return _json_escape(char)


def terminal_text(text: str) -> str:
    """``text`` with nothing a terminal would act on: the floor every output passes.

    C0 controls other than newline and tab, DEL, C1 controls, format characters
    (bidi, zero-width), every other character drawn as nothing (default ignorable:
    variation selectors, fillers), U+2028/U+2029 and lone surrogates become ``\\uXXXX``
    (valid inside a JSON string too). Everything else is kept as it is.
    """
    if text.isascii():
        if _TERMINAL_ASCII.search(text) is None:
            return text
        return _TERMINAL_ASCII.sub(lambda m: _json_escape(m.group(0)), text)
    if all(line.isprintable() for line in text.split("\n")) and _INVISIBLE.search(text) is None:
        return text  # the common case: no control, format, separator or invisible character
    return _NOT_PRINTABLE_ASCII.sub(_terminal_char, text)


def as_read(text: str) -> str:
    """``text`` as a person reads it, for a check of what it says: compatibility forms folded
    (NFKC: fullwidth and mathematical letters become the letters they show) and every
    character drawn as nothing removed (``pass\u200bword`` reads ``password``)."""
    return _INVISIBLE.sub("", unicodedata.normalize("NFKC", _INVISIBLE.sub("", text)))


def json_text(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """``value`` as JSON for a terminal or a pipe: :func:`terminal_text` of ``json.dumps``.

    ``json.dumps`` escapes C0 controls itself; C1 controls, bidi and format
    characters and U+2028/U+2029 are escaped here as ``\\uXXXX``, so the text
    parses to the same value and shows nothing that could act on a terminal.
    """
    dumped = json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys, default=str)
    return terminal_text(dumped)


# -- visible: a value a person must read whole ---------------------------------------------

_OPEN, _CLOSE = "⟨", "⟩"  # marks what the renderer says, as opposed to what the value holds
_ESCAPE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_ASCII_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")
_ASCII_CONTROLS_AND_NEWLINE = re.compile(r"[\x00-\x1f\x7f]")
_REPEATS = re.compile(rf"(.)\1{{{MAX_VISIBLE_RUN},}}", re.DOTALL)


def _needs_escape(char: str, newlines: bool = True) -> bool:
    if char == " " or (newlines and char == "\n"):
        return False
    return (
        char in (_OPEN, _CLOSE)
        or unicodedata.category(char) in _ESCAPE_CATEGORIES
        or _INVISIBLE.match(char) is not None
    )


def _escape_char(char: str) -> str:
    code = ord(char)
    if char == "\t":
        return "\\t"
    if char == "\r":
        return "\\r"
    if char == "\n":
        return "\\n"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _char_name(char: str) -> str:
    return "spaces" if char == " " else f"\u00d7 {_escape_char(char)}"


def _escaped_runs(text: str, *, newlines: bool = True) -> str:
    """``text`` with every character that needs it escaped and long runs of one blank or
    invisible character counted. ``newlines``: newlines stay (else they are escaped)."""
    controls = _ASCII_CONTROLS if newlines else _ASCII_CONTROLS_AND_NEWLINE

    def escape(span: str) -> str:
        if span.isascii():  # the common case: only C0 controls and DEL need escaping
            return controls.sub(lambda m: _escape_char(m.group(0)), span)
        return "".join(_escape_char(c) if _needs_escape(c, newlines) else c for c in span)

    pieces: list[str] = []
    done = 0
    for match in _REPEATS.finditer(text):
        char, span = match.group(1), match.group(0)
        pieces.append(escape(text[done : match.start()]))
        done = match.end()
        at_line_start = match.start() > 0 and text[match.start() - 1] == "\n"
        if char != " " and not _needs_escape(char, newlines):
            pieces.append(span)  # "========" and newlines are visible as they are
        elif char == " " and at_line_start and len(span) <= MAX_INDENT:
            pieces.append(span)  # indentation of a later line: code stays readable
        else:
            pieces.append(f"{_OPEN}{len(span)} {_char_name(char)}{_CLOSE}")
    pieces.append(escape(text[done:]))
    return "".join(pieces)


def _counted_ends(escaped: str) -> str:
    """A value's own leading or trailing spaces, counted: they would be invisible."""
    stripped = escaped.strip(" ")
    if stripped == escaped:
        return escaped
    lead = len(escaped) - len(escaped.lstrip(" "))
    trail = len(escaped) - len(escaped.rstrip(" "))
    return (
        (f"{_OPEN}{lead} {'space' if lead == 1 else 'spaces'}{_CLOSE}" if lead else "")
        + stripped
        + (f"{_OPEN}{trail} {'space' if trail == 1 else 'spaces'}{_CLOSE}" if trail else "")
    )


def visible(text: str) -> str:
    """``text`` with nothing hidden: invisible and bidi characters escaped (``\\u202e``),
    long runs of one blank or invisible character counted (``⟨520 spaces⟩``), and long
    runs of blank lines counted. Newlines stay (callers indent every line)."""
    return _count_blank_lines(_counted_ends(_escaped_runs(text)))


def one_line(text: str) -> str:
    """``text`` for a field that must stay on its line: :func:`visible`, newlines escaped."""
    return _counted_ends(_escaped_runs(text, newlines=False))


def visible_line(line: str) -> str:
    """One line of a file as a review view shows it: its indentation (spaces and tabs, up to
    :data:`MAX_INDENT` characters) kept, the rest as :func:`one_line` shows it, except that
    its trailing spaces are not counted."""
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)]
    if len(indent) > MAX_INDENT:
        indent = _escaped_runs(indent, newlines=False)
    return indent + _escaped_runs(body, newlines=False)


def _count_blank_lines(text: str) -> str:
    if "\n" not in text:
        return text
    out: list[str] = []
    blank = 0
    for line in text.split("\n"):
        if line.strip(" ") == "":
            blank += 1
            continue
        if blank:
            out += (
                [""] * blank
                if blank <= MAX_BLANK_LINES
                else [f"{_OPEN}{blank} blank lines{_CLOSE}"]
            )
            blank = 0
        out.append(line)
    if blank:
        out += [""] * blank if blank <= MAX_BLANK_LINES else [f"{_OPEN}{blank} blank lines{_CLOSE}"]
    return "\n".join(out)


def fingerprint(text: str) -> str:
    """Size, line count and a sha256 prefix of the UTF-8 bytes (``sha256sum`` agrees)."""
    data = text.encode("utf-8", "surrogatepass")
    lines = text.count("\n") + 1
    sha = hashlib.sha256(data).hexdigest()[:DIGEST_HEX]
    return f"{len(text):,} chars, {lines:,} {'line' if lines == 1 else 'lines'}, sha256 {sha}"


# -- the approval prompt ---------------------------------------------------------------------

# Argument names, by segment (ringfence.runtime._redact splits names the same way).
_RUN_SEGMENTS = frozenset(
    {"command", "commands", "cmd", "script", "code", "program", "shell", "argv", "exec", "sql"}
)
# Last segment → rank among decisive arguments: where it acts first, then what runs, then how.
_DECISIVE_RANK = {
    **dict.fromkeys(("path", "paths", "file", "files", "filename", "destination"), 0),
    **dict.fromkeys(("dest", "target", "to", "source", "src"), 0),
    **dict.fromkeys(("cwd", "dir", "directory", "workdir", "root"), 2),
    **dict.fromkeys(("url", "uri", "urls", "endpoint", "host", "method"), 3),
    **dict.fromkeys(("env", "environment", "headers"), 4),
}
_RUN_RANK = 1


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _rank(name: str) -> int | None:
    """Where a decisive argument goes in the prompt; None for other arguments."""
    segments = name_segments(name)
    if _RUN_SEGMENTS.intersection(segments):
        return _RUN_RANK
    if segments and segments[-1] in _DECISIVE_RANK:
        return _DECISIVE_RANK[segments[-1]]
    return None


def _block(name: str, body: str, note: str = "") -> list[str]:
    """``name: body``, or for a multi-line body every line behind a gutter (no line can
    pose as a line of the prompt)."""
    suffix = f"{_OPEN}{note}{_CLOSE}" if note else ""
    if "\n" not in body:
        return [f"  {name}: {body}" + (f"  {suffix}" if suffix else "")]
    return [f"  {name}: {suffix}".rstrip(), *(f"    │ {line}" for line in body.split("\n"))]


def _render_argument(name: str, value: Any, rank: int | None) -> list[str]:
    text = _as_text(value)
    shown_name = visible(name[:80]) + ("…" if len(name) > 80 else "")
    if rank == _RUN_RANK:
        whole, head_tail, what = RUNS_SHOWN_WHOLE, RUNS_HEAD_TAIL, " and WILL RUN"
    elif rank is not None:
        whole, head_tail, what = DECISIVE_SHOWN_WHOLE, DECISIVE_HEAD_TAIL, ""
    else:
        whole, head_tail, what = OTHER_SHOWN_WHOLE, 0, ""
    if len(text) <= whole:
        note = fingerprint(text) if "\n" in text or len(text) > OTHER_SHOWN_WHOLE else ""
        return _block(shown_name, visible(text), note)
    if rank is None:
        hidden = len(text) - OTHER_HEAD - OTHER_TAIL
        body = (
            f"{visible(text[:OTHER_HEAD])} {_OPEN}… {hidden:,} chars not shown …{_CLOSE} "
            f"{visible(text[-OTHER_TAIL:])}"
        )
        return _block(shown_name, body, fingerprint(text))
    hidden = len(text) - 2 * head_tail
    warning = (
        f"  ⚠ NOT SHOWN IN FULL: {shown_name} is {len(text):,} characters, more than the "
        f"{whole:,} shown whole. Only the first and last {head_tail:,} are shown; the "
        f"{hidden:,} in between are NOT SHOWN{what}. Deny unless you know what it is."
    )
    body = (
        f"{visible(text[:head_tail])}\n{_OPEN}… {hidden:,} chars NOT SHOWN …{_CLOSE}\n"
        f"{visible(text[-head_tail:])}"
    )
    return [warning, *_block(shown_name, body, fingerprint(text))]


def render_approval(request: ApprovalRequest) -> str:
    """The text every approver shows for ``request`` (see :meth:`ApprovalRequest.describe`)."""
    lines = [f"{visible(request.tool)} ({request.consequence}, via {visible(request.origin)})"]
    if request.runs_on:
        lines.append(f"  runs on: {visible(request.runs_on)}")
    arguments = request.arguments if isinstance(request.arguments, Mapping) else {}
    ranked = [(name, value, _rank(str(name))) for name, value in arguments.items()]
    decisive = sorted((a for a in ranked if a[2] is not None), key=lambda a: a[2])
    others = [a for a in ranked if a[2] is None]
    for name, value, rank in [*decisive, *others]:
        lines += _render_argument(str(name), value, rank)
    if not isinstance(request.arguments, Mapping):
        lines += _render_argument("arguments", request.arguments, _RUN_RANK)
    lines.append(f"  why asked: {visible(request.reason)}")
    return "\n".join(lines)


def when_text(ts: Any, fmt: str, *, local: bool = False, millis: bool = False) -> str:
    """A recorded time drawn with ``time.strftime(fmt)`` (UTC, or ``local``; ``millis``
    adds ``.mmm``). A time no clock can draw (out of the platform's range, not a number:
    what a record, a plan or a watched stream holds is anyone's) is shown as its value,
    never an error that takes a view or a command down."""
    try:
        text = time.strftime(fmt, time.localtime(ts) if local else time.gmtime(ts))
        return text + (f".{int(ts * 1000) % 1000:03d}" if millis else "")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"(time {one_line(repr(ts))[:40]}: not a date)"
