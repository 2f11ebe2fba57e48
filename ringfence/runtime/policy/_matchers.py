"""What one rule pattern matches: argument matchers and shell-aware argv patterns.

=================  =====================================================================
matcher            matches
=================  =====================================================================
path glob          a path argument (``path``, ``cwd``, ``*_path``, …) by component on the
                   normalized, workspace-relative path: ``src/**``, ``*.md`` (no slash:
                   any depth), ``./.env`` (top only), ``/etc/**`` (absolute, outside the
                   roots), ``!pattern`` excludes
string glob        any other string argument, whole (``fnmatch``; ``*`` crosses ``/``)
regex              ``name~REGEX``: RE2 (linear time), found anywhere in the value
range              ``name=LO..HI``: a number within the bounds (either may be left out)
URL                ``name=scheme://host:port/path`` globs: scheme and host compared
                   case-insensitively on the parsed URL (userinfo cannot fake the host)
argv               the ``command`` argument, shell-aware: ``git status*``,
                   ``["pytest", "**"]``; every simple command is judged on its own
=================  =====================================================================

An argv pattern answers :class:`Tri`: a word computed at run time can only
*maybe* match. Matchers compare names (see :mod:`._rules` for the file tools' second look).
:class:`RuleError` lives here because a matcher refuses a bad pattern when it
is built (an RE2 regex that does not compile, one that is too long).
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import math
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import re2

from .._errors import InvalidArguments
from ..shell._words import SimpleCommand, Word

__all__ = [
    "MAX_PATTERN_CHARS",
    "ArgvMatcher",
    "GlobMatcher",
    "Matcher",
    "PathMatcher",
    "RangeMatcher",
    "RegexMatcher",
    "RuleError",
    "Tri",
    "UrlMatcher",
    "element_matches",
    "normalize_path",
]

MAX_PATTERN_CHARS = 4096


class RuleError(InvalidArguments):
    """A rule that cannot be read; ``field`` names where it came from."""


class Tri(enum.Enum):
    """Whether a pattern matches a value that may be only partly known."""

    NO = 0
    MAYBE = 1
    YES = 2


@functools.lru_cache(maxsize=4096)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern), re.DOTALL)


def _component_regex(component: str) -> str:
    """One path component's glob as a regex: ``*``/``?`` never cross ``/``."""
    out: list[str] = []
    i = 0
    while i < len(component):
        ch = component[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = component.find("]", i + 2 if component[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = component[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def _path_regex(pattern: str) -> Any:
    """``pattern`` (a path glob) as a regex compiled by RE2, so matching takes time linear
    in the path whoever wrote the pattern: with Python's ``re``, a project policy's
    ``read_file(path=**/**/**/**/**/**/**/**/z)`` took 13 s per call on a 30-component
    path (12 of them: hours) and ``*a*a*a*a*a*b`` 0.7 s on a 60-letter name, on the
    kernel's thread. RuleError when RE2 refuses it (said when the rule loads)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise RuleError(f"path pattern longer than {MAX_PATTERN_CHARS} characters", field="path")
    try:
        return re2.compile(_path_regex_text(pattern), _RE2_PATH_OPTIONS)
    except re2.error as exc:
        raise RuleError(
            f"path pattern {pattern!r} cannot be matched ({exc})", field="path"
        ) from None


def _path_regex_text(pattern: str) -> str:
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.rstrip("/") or "/"
    if pattern.startswith("./"):
        pattern = pattern[2:]
    parts = pattern.split("/")
    # `dir/**` is the directory and everything under it (a deny of deploy/** also covers
    # list_directory(deploy) and run_shell(cwd=deploy))
    under = len(parts) > 1 and parts[-1] == "**"
    if under:
        parts = parts[:-1]
    pieces: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]*/)*")
        else:
            pieces.append(_component_regex(part) + ("" if last else "/"))
    if under:
        pieces.append("(?:/.*)?")
    body = "".join(pieces)
    if not anchored:
        body = "(?:.*/)?" + body
    return body


def normalize_path(value: str, roots: Sequence[str], cwd: str | None = None) -> str:
    """The name a path rule is matched against: workspace-relative when inside a root.

    ``..`` and ``.`` are collapsed lexically (``notes/sub/../../a.txt`` is
    ``a.txt``); a path that climbs out stays ``../…``; an absolute path inside
    a root becomes relative to it, one outside every root stays absolute.
    """
    if cwd and not posixpath.isabs(value):
        if roots:
            # The place it names from the directory it is relative to (a relative cwd is the
            # first root's): `../ws/sub/.env` from the root `ws` is `sub/.env`, not `../…`.
            base = cwd if posixpath.isabs(cwd) else posixpath.join(roots[0], cwd)
            value = posixpath.join(base, value)
        else:
            value = posixpath.join(normalize_path(cwd, roots), value)
    norm = posixpath.normpath(value) if value else "."
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    if posixpath.isabs(norm):
        for root in roots:
            r = posixpath.normpath(root)
            if norm == r:
                return "."
            if norm.startswith(r.rstrip("/") + "/"):
                return norm[len(r.rstrip("/")) + 1 :]
    return norm


@dataclass(frozen=True)
class PathMatcher:
    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        for p in self.patterns:  # refused when the rule loads, not when a call is judged
            _path_regex(p[1:] if p.startswith("!") else p)

    def matches(self, value: Any, roots: Sequence[str]) -> bool:
        if not isinstance(value, str):
            return False
        name = normalize_path(value, roots)
        positives = [p for p in self.patterns if not p.startswith("!")]
        negatives = [p[1:] for p in self.patterns if p.startswith("!")]
        if positives and not any(_path_regex(p).fullmatch(name) for p in positives):
            return False
        return not any(_path_regex(p).fullmatch(name) for p in negatives)

    def describe(self) -> str:
        return ", ".join(self.patterns)


@dataclass(frozen=True)
class GlobMatcher:
    patterns: tuple[str, ...]

    def matches(self, value: Any, roots: Sequence[str]) -> bool:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return False
        text = str(value)
        positives = [p for p in self.patterns if not p.startswith("!")]
        negatives = [p[1:] for p in self.patterns if p.startswith("!")]
        if positives and not any(_glob_regex(p).fullmatch(text) for p in positives):
            return False
        return not any(_glob_regex(p).fullmatch(text) for p in negatives)

    def describe(self) -> str:
        return ", ".join(self.patterns)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 8 << 20  # a pattern that needs more is refused when the rule loads
# RE2 logs a pattern it refuses to the process's stderr, raw, past the terminal guard: a
# project policy's `command~(\u001b[2J…` cleared the operator's screen at `policy show`.
_RE2_OPTIONS.log_errors = False
# A path glob's regex: as a rule's, and `.` crosses a newline (a file name may hold one).
_RE2_PATH_OPTIONS = re2.Options()
_RE2_PATH_OPTIONS.max_mem = 8 << 20
_RE2_PATH_OPTIONS.dot_nl = True
_RE2_PATH_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=4096)
def _re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached: a rule's regex is compiled once); RuleError if
    RE2 refuses it or it is too long."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise RuleError(f"regex longer than {MAX_PATTERN_CHARS} characters", field="regex")
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        raise RuleError(
            f"regex {pattern!r} is not one RE2 accepts ({exc}); RE2 has no "
            "backreferences or lookaround",
            field="regex",
        ) from None


@dataclass(frozen=True)
class RegexMatcher:
    pattern: str

    def __post_init__(self) -> None:
        _re2(self.pattern)  # refused when the rule loads, not when a call is judged

    def matches(self, value: Any, roots: Sequence[str]) -> bool:
        if not isinstance(value, str):
            return False
        return _re2(self.pattern).search(value) is not None

    def describe(self) -> str:
        return f"~{self.pattern}"


@dataclass(frozen=True)
class RangeMatcher:
    low: float | None
    high: float | None

    def matches(self, value: Any, roots: Sequence[str]) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        lo = "" if self.low is None else _num(self.low)
        hi = "" if self.high is None else _num(self.high)
        return f"{lo}..{hi}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class UrlMatcher:
    scheme: tuple[str, ...] = ()
    host: tuple[str, ...] = ()
    port: tuple[int, ...] = ()
    path: tuple[str, ...] = ()

    def matches(self, value: Any, roots: Sequence[str]) -> bool:
        if not isinstance(value, str) or any(c in value for c in "\x00\r\n\t "):
            return False
        try:
            parts = urlsplit(value.strip())
            port = parts.port
        except ValueError:
            return False
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").rstrip(".").lower()
        if port is None:
            port = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}.get(scheme)
        if self.scheme and scheme not in self.scheme:
            return False
        if self.host and not any(_glob_regex(h).fullmatch(host) for h in self.host):
            return False
        if self.port and port not in self.port:
            return False
        path = parts.path or "/"
        return not self.path or any(_glob_regex(p).fullmatch(path) for p in self.path)

    def describe(self) -> str:
        scheme = "|".join(self.scheme) or "*"
        host = "|".join(self.host) or "*"
        port = (":" + "|".join(str(p) for p in self.port)) if self.port else ""
        path = "|".join(self.path)
        return f"{scheme}://{host}{port}{path}"


@dataclass(frozen=True)
class ArgvMatcher:
    """Argv patterns over the ``command`` argument, judged per simple command."""

    patterns: tuple[tuple[str, ...], ...]

    def describe(self) -> str:
        return " | ".join(" ".join(p) for p in self.patterns)

    def match_command(self, command: SimpleCommand, *, deny_side: bool) -> Tri:
        best = Tri.NO
        split = split_long_words(command) if deny_side else command
        for pattern in self.patterns:
            r = _match_readings(pattern, command, deny_side)
            if r is Tri.NO and deny_side:
                # `--opt=value` and `--opt value` are one option to the program (getopt_long,
                # git's parse-options): each side read with its `=` as a word break too.
                other = split_long_pattern(pattern)
                if other != pattern or split is not command:
                    r = _match_readings(other, split, True)
            if r is Tri.YES:
                return r
            if r is Tri.MAYBE:
                best = Tri.MAYBE
        return best


def _match_readings(pattern: tuple[str, ...], command: SimpleCommand, deny_side: bool) -> Tri:
    """``pattern`` against ``command`` as written and, on the deny side, past the program's
    leading options and with its leading short flags read as a set."""
    r = _match_argv(pattern, command, deny_side)
    if r is Tri.NO and deny_side and _past_options(pattern):
        r = _match_past_options(pattern, command)
    if r is Tri.NO and deny_side and short_flags(pattern) is not None:
        r = _match_flags(pattern, command)
    if r is Tri.NO and deny_side:
        r = _match_permuted(pattern, command)
    if r is Tri.NO and deny_side:
        r = _match_hoisted(pattern, command)
    return r


def hoisted_forms(
    words: Sequence[str], limit: int, meets: Callable[[str], bool]
) -> list[list[str]] | None:
    """A command's words after the program with the options that follow its operands moved
    before its first ``p`` operands (``p`` from 0 to ``limit``), each option alone or with
    the word after it as its value: GNU getopt's permutation, values kept with their
    options (``ssh x -o ProxyCommand=…`` is ``ssh -o ProxyCommand=… x``). Read past each
    place the program's leading options may end (``git -C . push x --repo o``), and with
    no option taking a value, every one, or one that ``meets`` the rule's alone (``git
    push -q x --repo o``). Words from ``--`` on stay last; nothing when no option follows
    an operand (the plain readings said it). None past the bounds below (the caller reads
    the command loosely instead). The exec check mirrors this
    (``backends/confined/_execcheck._hoisted_forms``)."""
    forms: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    starts = option_ends(list(words), 0)
    if len(words) > _PERMUTED_WORDS or len(starts) > _PERMUTED_STARTS:
        return None
    for start in starts:
        head, tail = list(words[:start]), list(words[start:])
        valued = [
            i for i in range(len(tail) - 1)
            if _is_option(tail[i]) and "=" not in tail[i] and tail[i + 1] != "--"
            and not _is_option(tail[i + 1])
        ]  # fmt: skip
        readings = [set(), set(valued), *({i} for i in valued if meets(tail[i]))]
        if len(readings) > 2 + _PERMUTED_STARTS:
            return None
        for takes in readings:
            groups: list[list[str]] = []
            operands: list[str] = []
            rest: list[str] = []
            late = False  # an option after an operand
            i = 0
            while i < len(tail):
                word = tail[i]
                if word == "--":
                    rest = tail[i:]
                    break
                if not _is_option(word):
                    operands.append(word)
                elif i in takes:
                    late = late or bool(operands)
                    groups.append([word, tail[i + 1]])
                    i += 1
                else:
                    late = late or bool(operands)
                    groups.append([word])
                i += 1
            if not late:
                continue
            # the options that meet the rule's first, the others after them (`-q x` would
            # stand between `push` and `--repo o`)
            ordered = [w for g in groups if meets(g[0]) for w in g]
            ordered += [w for g in groups if not meets(g[0]) for w in g]
            for p in range(min(len(operands), limit) + 1):
                form = head + operands[:p] + ordered + operands[p:] + rest
                if tuple(form) not in seen:
                    seen.add(tuple(form))
                    forms.append(form)
    return forms


def _match_hoisted(pattern: tuple[str, ...], command: SimpleCommand) -> Tri:
    """The deny-side readings of a command whose options follow its operands, each option
    with its value moved before them (:func:`hoisted_forms`): `ssh -F f x -o
    ProxyCommand=…` meets `ssh -o ProxyCommand*`, whose value the set reading of
    :func:`_match_permuted` took for an operand. Literal words only (a computed word there
    is :func:`_match_permuted`'s MAYBE)."""
    if len(pattern) < 3 or "**" in (pattern[0], pattern[1]) or pattern[-1] != "**":
        return Tri.NO
    argv = command.argv
    if command.open_tail or not argv or not all(w.literal for w in argv):
        return Tri.NO
    if _match_argv((pattern[0], "**"), replace(command, argv=argv[:1]), True) is not Tri.YES:
        return Tri.NO  # another program
    flags = short_flags(pattern)
    wanted = flags[1] if flags else frozenset()
    named = [e for e in pattern[1:] if _is_option(e)]

    def meets(word: str) -> bool:
        return bool(wanted & flag_letters(word)) or any(option_met(e, word) for e in named)

    forms = hoisted_forms([w.text for w in argv[1:]], len(pattern), meets)
    if forms is None:
        return _loose(pattern, command)
    for form in forms:
        moved = replace(command, argv=(argv[0], *(Word(w) for w in form)))
        r = _match_argv(pattern, moved, True)
        if r is Tri.NO and _past_options(pattern):
            r = _match_past_options(pattern, moved)
        if r is Tri.NO and short_flags(pattern) is not None:
            r = _match_flags(pattern, moved)
        if r is Tri.YES:
            return r
    return Tri.NO


def option_met(element: str, word: str) -> bool:
    """Whether the command's option ``word`` gives the rule's option ``element``: its glob or
    literal, an abbreviation of it, or, for a long option, a short flags word holding the
    letter it is named after (``git push -f`` for ``--force``: :func:`flag_letters` the
    other way round)."""
    if deny_element_matches(element, word):
        return True
    if _long_name(element) and element[2].isalnum() and not word.startswith("--"):
        return element[2].lower() in flag_letters(word)
    return False


def _is_option(word: str) -> bool:
    """An option word as getopt reads one (``-x``, ``--long``; not ``-`` nor ``--``)."""
    return len(word) > 1 and word.startswith("-") and word != "--"


def _match_permuted(pattern: tuple[str, ...], command: SimpleCommand) -> Tri:
    """The deny-side match with the options anywhere among the operands, as GNU getopt
    permutes them (``rm d -fr`` is ``rm -fr d``; ``git push origin --force`` is ``git push
    --force origin``): the pattern's option elements must each be met by one of the
    command's option words before ``--`` (its leading short flags by their union, as a
    set), and its other elements by the command's other words, in order. Only for a
    pattern ending in ``**``, which admits the options it does not name.

    A word computed at run time before ``--`` (``rm d $x``, ``rm d ${x:--rf}``, a glob
    ``rm d *`` that a file named ``-rf`` meets, bash's ``rm d -{rf,}``) and the words an
    open tail appends (``echo -rf d | xargs rm``) may be any options: what the literal
    words leave unmet they could give, so the match is MAYBE there, never NO."""
    if len(pattern) < 3 or "**" in (pattern[0], pattern[1]) or pattern[-1] != "**":
        return Tri.NO  # a pattern that admits further words (the unnamed options) alone
    argv = command.argv
    if not argv or not argv[0].literal:
        return Tri.NO  # a computed program name: the plain reading's MAYBE says it
    if _match_argv((pattern[0], "**"), replace(command, argv=argv[:1]), True) is not Tri.YES:
        return Tri.NO  # another program
    # Past the program's leading options too, every reading (`git -C . push origin -f`: git's
    # own `-C .`, then push's options among its operands), as `_match_past_options`.
    starts = option_ends([w.text if w.literal else None for w in argv], 1)
    if len(argv) > _PERMUTED_WORDS or len(starts) > _PERMUTED_STARTS:
        return _loose(pattern, command)
    best = Tri.NO
    for k in starts:
        r = _permuted_from(pattern, command, k)
        if r is Tri.YES:
            return r
        if r is Tri.MAYBE:
            best = Tri.MAYBE
    return best


# Past these (a command's words, the places its leading options may end, the options tried
# alone with their values) the permuted readings cost too much (each is a match per place):
# the command is read loosely, which may over-match and never under-matches.
_PERMUTED_WORDS = 48
_PERMUTED_STARTS = 6


def _loose(pattern: tuple[str, ...], command: SimpleCommand) -> Tri:
    """The permuted readings of a long command, over-approximated: the pattern's flags met by
    the union of the command's option words, each option it names by one of them, each
    other element by some word, in any order. MAYBE at best (never a sure YES)."""
    argv = command.argv
    if command.open_tail or not all(w.literal for w in argv[1:]):
        return Tri.MAYBE
    texts = [w.text for w in argv[1:]]
    options = [t for t in texts if _is_option(t)]
    flags = short_flags(pattern)
    count = flags[0] if flags else 0
    if flags and not flags[1] <= {c for o in options for c in flag_letters(o)}:
        return Tri.NO
    for element in pattern[1 + count :]:
        if element == "**":
            continue
        if _is_option(element):
            if not any(option_met(element, o) for o in options):
                return Tri.NO
        elif not any(deny_element_matches(element, t) for t in texts):
            return Tri.NO
    return Tri.MAYBE


def _permuted_from(pattern: tuple[str, ...], command: SimpleCommand, start: int) -> Tri:
    """:func:`_match_permuted` over the words from ``start`` on (those before it the
    program's leading options and their values, skipped)."""
    argv = command.argv
    options: list[str] = []
    operands: list[Word] = []
    wild = command.open_tail  # words appended at run time, options or operands
    ended = False
    for word in argv[start:]:
        if not word.literal:
            operands.append(word)  # it may stand for operands ...
            wild = wild or not ended  # ... or, before `--`, for any options
        elif not ended and word.text == "--":
            ended = True
        elif not ended and _is_option(word.text):
            options.append(word.text)
        else:
            operands.append(word)
    if not options and not wild:
        return Tri.NO  # the plain reading said it
    sure = True  # every option the pattern names is met by a literal word
    flags = short_flags(pattern)
    count = flags[0] if flags else 0
    wanted = flags[1] if flags else frozenset()
    have = {c for o in options for c in flag_letters(o)}
    if not wanted <= have:
        if not wild:
            return Tri.NO
        sure = False
    rest = pattern[1 + count :]
    for element in rest:
        if _is_option(element) and not any(option_met(element, o) for o in options):
            if not wild:
                return Tri.NO
            sure = False
    kept = (pattern[0], *(e for e in rest if not _is_option(e)))
    if wild:  # a computed word may be an option with its value (`ssh x $o` for `-o Proxy…`)
        values = {
            i for i in range(2, len(pattern)) if _is_option(pattern[i - 1]) and pattern[i] != "**"
        }
        kept = (pattern[0], *(e for i, e in enumerate(pattern[1:], 1) if not
                              (_is_option(e) or i in values)))  # fmt: skip
    r = _match_argv(kept, replace(command, argv=(argv[0], *operands)), True)
    return Tri.MAYBE if r is Tri.YES and not sure else r


_GLOB_CHARS = "*?["


def split_long_pattern(pattern: tuple[str, ...]) -> tuple[str, ...]:
    """``pattern`` with each ``--name=value`` element after the program as two elements
    (``--name``, ``value``), so it meets ``--name value`` as the program reads it."""
    out: list[str] = [pattern[0]] if pattern else []
    for element in pattern[1:]:
        name, eq, value = element.partition("=")
        if eq and _long_name(name) and not any(c in name for c in _GLOB_CHARS):
            out += [name, value]
        else:
            out.append(element)
    return tuple(out)


def split_long_words(command: SimpleCommand) -> SimpleCommand:
    """``command`` with each literal ``--name=value`` word after the program as two words
    (the same command unchanged when it has none)."""
    argv = command.argv
    if not any(w.literal and _long_name(w.text.partition("=")[0]) and "=" in w.text
               for w in argv[1:]):  # fmt: skip
        return command
    words: list[Word] = list(argv[:1])
    for w in argv[1:]:
        name, eq, value = w.text.partition("=")
        if w.literal and eq and _long_name(name):
            words += [Word(name), Word(value)]
        else:
            words.append(w)
    return replace(command, argv=tuple(words))


def _long_name(text: str) -> bool:
    """Whether ``text`` is a long option's name (``--force``; not ``--`` itself)."""
    return len(text) > 2 and text.startswith("--") and text[2] != "-"


def abbreviates(element: str, word: str) -> bool:
    """Whether ``word`` is a long option the rule's ``element`` names, abbreviated as
    getopt_long and git's parse-options accept (``--recur`` for ``--recursive``, also
    ``--recur=x`` for ``--recursive=x``): the word's name completed to the element's, then
    matched. Deny side only; it may over-match a program that takes no abbreviations."""
    if not _long_name(word.partition("=")[0]) or not element.startswith("--"):
        return False
    end = min((element.find(c) for c in _GLOB_CHARS if c in element), default=len(element))
    full = element[:end].partition("=")[0]
    typed, eq, value = word.partition("=")
    if not _long_name(full) or len(typed) >= len(full) or not full.startswith(typed):
        return False
    return element_matches(element, full + eq + value)


def deny_element_matches(element: str, word: str) -> bool:
    """A deny-side word match: the element's glob or literal, or a long option it names
    abbreviated (:func:`abbreviates`)."""
    return element_matches(element, word) or abbreviates(element, word)


def _past_options(pattern: tuple[str, ...]) -> bool:
    """Whether a deny-side pattern also matches past the program's leading options: one
    that names the program and a next word (``git push *``, ``docker run *``)."""
    return len(pattern) >= 2 and pattern[0] != "**" and pattern[1] != "**"


def option_ends(words: Sequence[str | None], start: int) -> list[int]:
    """Where a subcommand may begin in ``words`` after the options from ``start`` on.

    A literal word starting with ``-`` (not ``--``) is an option, and one without
    ``=`` may take the next word as its value (``-C dir``, ``--git-dir .git``); a
    computed word (``None``) or any other word ends them. Every reading counts,
    so ``git -C push status`` is also read as ``push status`` (a deny rule over-matches
    rather than lets ``git --git-dir=.git push`` by). The exec check reads execs the
    same way (``backends/confined/_execcheck._matches``).
    """
    ends: list[int] = []
    todo, seen = [start], set()
    while todo:
        j = todo.pop()
        if j in seen:
            continue
        seen.add(j)
        ends.append(j)
        word = words[j] if j < len(words) else None
        if word is not None and word.startswith("-") and word != "--":
            todo.append(j + 1)
            if "=" not in word and j + 1 < len(words):
                todo.append(j + 2)
    return sorted(ends)


_SHORT = re.compile(r"-[A-Za-z0-9]+")
# The last flags word may end in `*` (`rm -rf*`: those flags and perhaps more in the word).
_SHORT_OPEN = re.compile(r"-[A-Za-z0-9]+\*")


def short_flags(pattern: Sequence[str]) -> tuple[int, frozenset[str]] | None:
    """A deny pattern's leading short-option words after the program (``rm -rf *``: one
    word, flags ``r`` and ``f``), or None when it starts with none.

    Such a pattern also matches a command whose leading option words hold every one of
    those flags, in any order, clustered or not, with others among them (``rm -fr``,
    ``rm -r -f``, ``rm -v -rf``). Long spellings (``--recursive``) are the program's
    own and are not known here (SECURITY.md). The exec check mirrors this
    (``backends/confined/_execcheck._flags_match``).
    """
    count = 0
    while 1 + count < len(pattern) and _SHORT.fullmatch(pattern[1 + count]):
        count += 1
    if 1 + count < len(pattern) and _SHORT_OPEN.fullmatch(pattern[1 + count]):
        count += 1  # `rm -rf*`: a glob word of flags, read as a set like the others
    if not count or pattern[0] == "**":
        return None
    letters = "".join(w[1:].rstrip("*") for w in pattern[1 : 1 + count])
    return count, frozenset(letters.lower())


def flag_letters(word: str) -> set[str]:
    """The flags an option word gives, for a deny-side flags set: each letter of ``-Rf``,
    in either case (``rm -Rf`` is ``rm -rf``), and a long option's first letter
    (``--recursive --force`` is ``-rf``, GNU's naming). It may over-match a program whose
    options differ by case or whose long names do not follow their letters; never under."""
    if word.startswith("--"):
        return {word[2].lower()} if len(word) > 2 and word[2].isalnum() else set()
    return {c.lower() for c in word[1:]}


def _rank(tri: Tri) -> int:
    return tri.value


def _first_letter(word: str, letter: str) -> int:
    """Where ``letter`` (either case) first is in ``word`` past its ``-``; 0 if nowhere."""
    for i in range(1, len(word)):
        if word[i].lower() == letter:
            return i
    return 0


def _match_flags(pattern: tuple[str, ...], command: SimpleCommand) -> Tri:
    """The deny-side match of ``pattern`` with its leading flags read as a set."""
    found = short_flags(pattern)
    assert found is not None
    count, wanted = found
    argv = command.argv
    first = _match_argv((pattern[0], "**"), command, True)
    if first is Tri.NO:
        return Tri.NO  # another program
    if first is Tri.MAYBE:
        return Tri.NO  # a computed program name: the plain reading's MAYBE says it
    have: set[str] = set()
    last = pattern[count].rstrip("*")[-1].lower()  # the flag that may take a value
    go = _slow_table(pattern, command, True)  # one table for every place tried below

    def attached(value: str, j: int, k: int) -> Tri:
        """``value`` as the word at ``k``, then the words after it, from element ``j``."""
        if j == len(pattern):
            return Tri.NO
        if pattern[j] == "**":
            r = go(k + 1, j)
            return r if r is Tri.YES else max(r, attached(value, j + 1, k), key=_rank)
        return go(k + 1, j + 1) if deny_element_matches(pattern[j], value) else Tri.NO

    best = Tri.NO
    valued = False  # the word before was an option that may take this one as its value
    for k in range(1, len(argv)):
        word = argv[k]
        if not (word.literal and word.text.startswith("-") and word.text != "--"):
            if valued and word.literal and word.text != "--":
                valued = False  # `ssh -F /dev/null -o …`: every reading, as option_ends
                continue
            break
        text = word.text
        valued = "=" not in text
        # `ssh -oProxyCommand=x` is `ssh -o ProxyCommand=x`: the value attached to the last
        # flag, read as the next word (getopt gives the rest of the word to the first
        # flag that takes a value, so only the letter's first place counts)
        i = _first_letter(text, last)
        attached_here = 0 < i < len(text) - 1 and not text.startswith("--")
        if attached_here and wanted <= have | {c.lower() for c in text[1 : i + 1]}:
            r = attached(text[i + 1 :], 1 + count, k)
            if r is Tri.YES:
                return r
            if r is Tri.MAYBE:
                best = Tri.MAYBE
        have |= flag_letters(text)
        if wanted <= have:
            r = go(k + 1, 1 + count)
            if r is Tri.YES:
                return r
            if r is Tri.MAYBE:
                best = Tri.MAYBE
    return best


def _match_past_options(pattern: tuple[str, ...], command: SimpleCommand) -> Tri:
    """The deny-side match of ``pattern`` with the program's leading options skipped."""
    argv = command.argv
    first = _match_argv((pattern[0], "**"), command, True)
    if first is Tri.NO:
        return Tri.NO  # another program
    words = [w.text if w.literal else None for w in argv]
    go = _slow_table(pattern, command, True)  # one table for every start (was one each)
    best = Tri.NO
    for k in option_ends(words, 1):
        if k == 1:
            continue  # the plain reading, already judged
        r = go(k, 1)
        if r is Tri.YES and first is Tri.MAYBE:
            r = Tri.MAYBE  # a computed program name
        if r is Tri.YES:
            return r
        if r is Tri.MAYBE:
            best = Tri.MAYBE
    return best


# element -> its compiled glob, or None for a literal element (compared with ==)
_ELEMENTS: dict[str, re.Pattern[str] | None] = {}


def element_matches(element: str, word: str) -> bool:
    try:
        rx = _ELEMENTS[element]
    except KeyError:
        rx = _glob_regex(element) if any(c in element for c in "*?[") else None
        if len(_ELEMENTS) < 65536:
            _ELEMENTS[element] = rx
    if rx is None:
        return element == word
    return rx.fullmatch(word) is not None


def _match_argv(pattern: tuple[str, ...], command: SimpleCommand, deny_side: bool) -> Tri:
    """Whether ``pattern`` matches ``command``: YES surely, MAYBE if a computed word could.

    A computed word may expand to any number of words of any content: it can
    only *surely* match inside ``**``, and *maybe* matches anything. On the deny
    side the command name is compared by its last component (``/usr/bin/curl``
    is ``curl``); on the allow side exactly (``./git`` is not ``git``).
    """
    argv = command.argv
    # Fast paths for the usual shapes, all words literal where the pattern looks:
    # no ** at all (exact length), or ** only at the end (a prefix).
    tail = pattern[-1] == "**" and "**" not in pattern[:-1]
    exact = "**" not in pattern and not command.open_tail
    head = pattern[:-1] if tail else pattern
    if (tail or exact) and argv and all(w.literal for w in argv[: len(head)]):
        if exact and (len(head) != len(argv) or not all(w.literal for w in argv)):
            return (
                Tri.NO if all(w.literal for w in argv) else _match_slow(pattern, command, deny_side)
            )
        if len(argv) < len(head):  # (an open tail appends words: the slow path counts it)
            return (
                Tri.NO
                if all(w.literal for w in argv) and not command.open_tail
                else _match_slow(pattern, command, deny_side)
            )
        if not head:
            return Tri.YES
        first = argv[0].text
        if deny_side and "/" not in head[0]:
            first = first.rsplit("/", 1)[-1]
        if not element_matches(head[0], first):
            return Tri.NO
        same = deny_element_matches if deny_side else element_matches
        for element, word in zip(head[1:], argv[1:], strict=False):
            if not same(element, word.text):
                return Tri.NO
        return Tri.YES
    return _match_slow(pattern, command, deny_side)


def _match_slow(pattern: tuple[str, ...], command: SimpleCommand, deny_side: bool) -> Tri:
    """The general matcher: computed words and ** anywhere (memoized, O(words * elements))."""
    return _slow_table(pattern, command, deny_side)(0, 0)


def _slow_table(
    pattern: tuple[str, ...], command: SimpleCommand, deny_side: bool
) -> Callable[[int, int], Tri]:
    """``go(i, j)``: how well the command's words from ``i`` match ``pattern`` from ``j``,
    memoized across calls (a caller trying many places pays O(words * elements) once)."""
    words: list[Word] = list(command.argv)
    if command.open_tail:
        words.append(Word("…", False))
    if deny_side and words and words[0].literal and "/" not in pattern[0]:
        words[0] = Word(words[0].text.rsplit("/", 1)[-1])
    n, m = len(words), len(pattern)
    # table[j][i]: how well words[i:] match pattern[j:], filled from the ends (no recursion:
    # a `**` is "absorb nothing, or one word and stay", so each cell costs O(1) but a
    # computed word's O(elements); before, each `**` cell tried every end, and a caller
    # trying many starts rebuilt the table: `ssh -o a -o a …` took cubic time)
    table: list[list[Tri]] = [[Tri.NO] * (n + 1) for _ in range(m + 1)]
    last = table[m]
    last[n] = Tri.YES
    for i in range(n - 1, -1, -1):  # computed words may expand to nothing
        if words[i].literal or last[i + 1] is Tri.NO:
            break
        last[i] = Tri.MAYBE
    for j in range(m - 1, -1, -1):
        row, below = table[j], table[j + 1]
        element = pattern[j]
        if element == "**":
            row[n] = below[n]
            for i in range(n - 1, -1, -1):
                a, b = below[i], row[i + 1]
                row[i] = (
                    Tri.YES if Tri.YES in (a, b) else Tri.MAYBE if Tri.MAYBE in (a, b) else Tri.NO
                )
            continue
        for i in range(n - 1, -1, -1):
            word = words[i]
            if word.literal:
                nxt = below[i + 1]
                same = deny_element_matches if deny_side and i else element_matches
                row[i] = nxt if nxt is not Tri.NO and same(element, word.text) else Tri.NO
            else:
                # a computed word may stand for zero or more pattern elements: at best MAYBE
                hit = any(table[k][i + 1] is not Tri.NO for k in range(j, m + 1))
                row[i] = Tri.MAYBE if hit else Tri.NO

    def go(i: int, j: int) -> Tri:
        return table[j][i]

    return go


Matcher = PathMatcher | GlobMatcher | RegexMatcher | RangeMatcher | UrlMatcher
