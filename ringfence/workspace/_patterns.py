"""Patterns for the search tools: globs and regular expressions, compiled for RE2.

Every pattern is matched with RE2 (``google-re2``), whose time is linear in
the text whatever the pattern: a backtracking regex (``^(\\w+\\s?)*$``) or a
glob with many stars cannot stall a call. :func:`search_text` is the one
matcher both grep engines (ripgrep-prefiltered and pure Python) run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re2

from ..runtime._errors import InvalidArguments
from ._deadline import current_deadline
from ._names import escape_name, unescape_path

__all__ = [
    "MAX_LINE_CHARS",
    "GlobPattern",
    "Regex",
    "compile_glob",
    "compile_name_filter",
    "compile_regex",
    "re2_options",
    "scan_escapes",
    "search_text",
]

# A matching line longer than this is cut in the result.
MAX_LINE_CHARS = 1000


def re2_options(*, never_nl: bool = False) -> re2.Options:
    """RE2 options for ringfence's patterns: UTF-8, no logging to stderr."""
    options = re2.Options()
    options.log_errors = False
    options.never_nl = never_nl
    return options


# -- glob patterns ----------------------------------------------------------------------


@dataclass(frozen=True)
class GlobPattern:
    """A compiled ``glob_files`` pattern (RE2, so matching is linear in the path).

    ``prefix``: leading components without wildcards, as ``os`` spells them
    (the walk starts there); ``max_depth``: how deep below the prefix a match
    can be (None with ``**``). Patterns are written in the escaped form of
    file names (``ringfence.workspace._names``) and are matched against the
    escaped form of each path, so ``\\xff*`` finds names starting with the
    byte 0xff and ``*`` matches any name.
    """

    text: str
    regex: Any  # re2._Regexp
    dirs_only: bool
    prefix: tuple[str, ...]
    max_depth: int | None

    def matches(self, rel: str) -> bool:
        """Whether ``rel`` (a "/"-joined path as ``os`` spells it) matches."""
        return self.regex.fullmatch(escape_name(rel).encode("utf-8")) is not None


# One character of a name's escaped form: a plain character or one escape.
_ONE_CHAR = r"(?:[^/\\]|\\\\|\\x[0-9a-f]{2})"
_NOTHING = r"[^\x00-\x{10FFFF}]"
_FORBIDDEN_IN_CLASS = (ord("/"), ord("\\"))


def _lit(c: str) -> str:
    return c if c.isascii() and (c.isalnum() or c == "_") else f"\\x{{{ord(c):x}}}"


def _class_regex(body: str, field: str) -> str:
    """A ``[...]`` body (without the brackets) as RE2 over escaped names."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    if "\\" in body:
        raise InvalidArguments(
            f"{field}: a bracket expression cannot hold a backslash or a \\xHH escape; "
            "match such a character with ? instead",
            field=field,
        )
    ranges: list[tuple[int, int]] = []
    i, n = 0, len(body)
    while i < n:
        if i + 2 < n and body[i + 1] == "-":
            lo, hi = ord(body[i]), ord(body[i + 2])
            if lo > hi:
                raise InvalidArguments(
                    f"{field}: the range {body[i : i + 3]!r} runs backwards", field=field
                )
            ranges.append((lo, hi))
            i += 3
        else:
            ranges.append((ord(body[i]), ord(body[i])))
            i += 1
    if negate:
        items = "".join(
            f"\\x{{{lo:x}}}" if lo == hi else f"\\x{{{lo:x}}}-\\x{{{hi:x}}}" for lo, hi in ranges
        )
        return f"(?:[^/\\\\{items}]|\\\\\\\\|\\\\x[0-9a-f]{{2}})"
    # "/" never occurs in a name, "\" only as an escape's start: cut both out of the ranges.
    pieces: list[tuple[int, int]] = []
    for lo, hi in ranges:
        start = lo
        for cut in _FORBIDDEN_IN_CLASS:
            if start <= cut <= hi:
                if start < cut:
                    pieces.append((start, cut - 1))
                start = cut + 1
        if start <= hi:
            pieces.append((start, hi))
    if not pieces:
        return _NOTHING
    return (
        "["
        + "".join(
            f"\\x{{{lo:x}}}" if lo == hi else f"\\x{{{lo:x}}}-\\x{{{hi:x}}}" for lo, hi in pieces
        )
        + "]"
    )


def _component_regex(comp: str, field: str) -> str:
    out: list[str] = []
    i, n = 0, len(comp)
    while i < n:
        c = comp[i]
        if c == "*":
            while i + 1 < n and comp[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append(_ONE_CHAR)
        elif c == "\\":
            # Validated by unescape_path: "\\" or "\xHH" (80-ff); shown in lowercase.
            if comp[i + 1] == "\\":
                out.append(r"\\\\")
                i += 1
            else:
                out.append(r"\\x" + comp[i + 2 : i + 4].lower())
                i += 3
        elif c == "[":
            j = i + 1
            if j < n and comp[j] in "!^":
                j += 1
            if j < n and comp[j] == "]":
                j += 1
            while j < n and comp[j] != "]":
                j += 1
            if j >= n:
                out.append(_lit(c))  # an unclosed "[" is literal
            else:
                out.append(_class_regex(comp[i + 1 : j], field))
                i = j
        else:
            out.append(_lit(c))
        i += 1
    return "".join(out)


_WILD = re.compile(r"[*?\[]")
_GLOB_OPTIONS = re2_options()


def compile_glob(pattern: str, field: str = "pattern") -> GlobPattern:
    """Compile a relative glob: ``*``, ``?``, ``[...]`` within a name, ``**`` across names.

    Refuses absolute patterns and ``..`` components (choose the directory with
    ``path`` instead). A pattern ending in ``/`` matches directories only.
    Written in the escaped form of names: ``\\\\`` is a backslash, ``\\xHH`` a
    byte that is not UTF-8; any other backslash is refused.
    """
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArguments(f"{field} is empty", field=field)
    if "\x00" in pattern:
        raise InvalidArguments(f"{field} contains a NUL byte", field=field)
    unescape_path(pattern, field)  # refuses what is not the escaped form
    if pattern.startswith("/"):
        raise InvalidArguments(
            f"{field} {pattern!r} is absolute; patterns are relative to 'path' "
            "(choose the directory to search with 'path')",
            field=field,
        )
    dirs_only = pattern.endswith("/")
    comps = [c for c in pattern.split("/") if c not in ("", ".")]
    if any(c == ".." for c in comps):
        raise InvalidArguments(
            f"{field} {pattern!r} contains '..'; choose the directory to search with 'path'",
            field=field,
        )
    if not comps:
        raise InvalidArguments(f"{field} {pattern!r} matches nothing", field=field)
    pieces: list[str] = []
    for i, comp in enumerate(comps):
        last = i == len(comps) - 1
        if comp == "**":
            pieces.append(".*" if last else "(?:[^/]*/)*")
        else:
            pieces.append(_component_regex(comp, field) + ("" if last else "/"))
    prefix: list[str] = []
    for comp in comps[:-1]:
        if comp == "**" or _WILD.search(comp):
            break
        prefix.append(unescape_path(comp, field))
    depth = None if "**" in comps else len(comps) - len(prefix)
    try:
        regex = re2.compile(("(?s)" + "".join(pieces)).encode("utf-8"), _GLOB_OPTIONS)
    except re2.error as exc:
        raise InvalidArguments(
            f"{field} {pattern!r} cannot be compiled ({_re2_reason(exc)})", field=field
        ) from None
    return GlobPattern(pattern, regex, dirs_only, tuple(prefix), depth)


def compile_name_filter(glob: str, field: str = "glob") -> Callable[[str], bool]:
    """grep's ``glob`` filter, as ripgrep's ``-g``: no ``/`` means "match the file name"."""
    compiled = compile_glob(glob, field)
    if "/" in glob.rstrip("/"):
        return compiled.matches
    return lambda rel: compiled.matches(rel.rpartition("/")[2])


# -- regular expressions ----------------------------------------------------------------

# Refused although RE2 accepts them: the whole-text anchors (lines are matched one at a time),
# \C (one byte, which can split a character) and turning off multi-line mode (which would
# make ^ and $ whole-text anchors).
_REFUSED_ESCAPES = {
    "A": r"the whole-text anchor \A (use ^)",
    "z": r"the whole-text anchor \z (use $)",
    "C": r"\C (any byte)",
}
_FLAGS_OFF_M = re.compile(r"\(\?[A-Za-z]*-[A-Za-z]*m")
# Escapes whose RE2 meaning (ASCII) matches where ripgrep's (Unicode) does not; with them
# ripgrep could skip a file RE2 matches, so such a search reads every file itself.
_WIDER_THAN_RG = frozenset("WDSbB")
_PERL_CLASS = frozenset("wds")


_GREP_OPTIONS = re2_options(never_nl=True)


@dataclass(frozen=True)
class Regex:
    """A compiled ``grep_files`` pattern: RE2, multi-line anchors, matches never span lines."""

    text: str
    rx: Any  # re2._Regexp: the stubs are not a dependency


def scan_escapes(pattern: str) -> tuple[str | None, bool]:
    """(what ringfence refuses in ``pattern`` or None, whether ripgrep may prefilter it)."""
    safe = True
    in_class = negated = False
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt in _REFUSED_ESCAPES:
                return _REFUSED_ESCAPES[nxt], False
            if nxt in _WIDER_THAN_RG or (in_class and negated and nxt in _PERL_CLASS):
                safe = False
            i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):  # [:alpha:] inside a class
                end = pattern.find(":]", i + 2)
                i = end + 2 if end >= 0 else i + 1
                continue
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            negated = pattern.startswith("^", i + 1)
            i += 2 if negated else 1
            if pattern.startswith("]", i):
                i += 1  # a "]" first in a class is a literal
            continue
        i += 1
    if _FLAGS_OFF_M.search(pattern):
        return "turning off multi-line mode (-m); ^ and $ are line anchors", False
    return None, safe


def compile_regex(pattern: str, field: str = "pattern") -> Regex:
    """Compile a grep pattern with RE2, which matches in time linear in the text.

    RE2 syntax (close to ripgrep's): no lookaround, backreferences,
    conditionals, atomic groups or possessive quantifiers; ``\\w``, ``\\d``,
    ``\\s`` and ``\\b`` are ASCII (use ``\\pL``, ``\\p{Greek}``, ... for
    other scripts). Also refused: ``\\A``, ``\\z``, ``\\C`` and ``(?-m)``.
    Lines are matched one at a time: ``^`` and ``$`` are line anchors and no
    match spans a newline.
    """
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArguments(f"{field} is empty", field=field)
    refused, _ = scan_escapes(pattern)
    if refused is not None:
        raise InvalidArguments(
            f"{field} uses {refused}, which grep_files does not support (it matches line by line)",
            field=field,
        )
    try:
        rx = re2.compile(("(?m)" + pattern).encode("utf-8"), _GREP_OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:
        raise InvalidArguments(
            f"{field} is not a valid regular expression for RE2, the linear-time engine "
            f"grep_files uses ({_re2_reason(exc)}); RE2 has no lookahead/lookbehind, "
            "backreferences, conditionals, atomic groups or possessive quantifiers",
            field=field,
        ) from None
    return Regex(pattern, rx)


def _re2_reason(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    if isinstance(arg, bytes):
        return arg.decode("utf-8", "replace")
    return "it is not valid UTF-8" if isinstance(exc, UnicodeError) else str(arg)


def search_text(rx: Regex, data: bytes, limit: int) -> list[tuple[int, str]]:
    """Matching lines of ``data`` as ``(line number, text)``, at most ``limit``.

    A file with a NUL byte is binary and has no matching lines. Text is
    UTF-8; undecodable bytes become U+FFFD before matching, so the line shown
    is the line matched. One RE2 pass over the whole text finds every
    matching line (no match spans a newline), so a big file costs time linear
    in its size whatever the pattern. Honours the current :class:`Deadline`.
    """
    deadline = current_deadline()
    if deadline is not None:
        deadline.check()  # once per file searched, binary or not
    if limit <= 0 or b"\x00" in data:
        return []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = data.decode("utf-8", "replace").encode("utf-8")
    search = rx.rx.search
    n = len(data)
    out: list[tuple[int, str]] = []
    pos = 0
    line_no = 1
    counted_to = 0
    while pos <= n and len(out) < limit:
        if deadline is not None:
            deadline.check()
        m = search(data, pos)
        if m is None:
            break
        start = m.start()
        if start == n and (n == 0 or data[-1] == 0x0A):
            break  # an empty match after the final newline is not a line
        line_start = data.rfind(b"\n", pos, start) + 1 or pos
        line_end = data.find(b"\n", start)
        if line_end < 0:
            line_end = n
        line_no += data.count(b"\n", counted_to, line_start)
        counted_to = line_start
        shown = data[line_start:line_end].decode("utf-8")
        if shown.endswith("\r"):
            shown = shown[:-1]
        if len(shown) > MAX_LINE_CHARS:
            shown = shown[:MAX_LINE_CHARS] + f" [… {len(shown) - MAX_LINE_CHARS} more characters]"
        out.append((line_no, shown))
        pos = line_end + 1
    return out
