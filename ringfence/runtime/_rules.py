"""Policy rules over tool names and arguments, and how a call is judged against them.

A :class:`Rule` says ``deny``, ``ask`` or ``allow`` for a tool (a glob over
names, ``mcp.<server>.<tool>`` included) and, optionally, its arguments:

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

:meth:`Policy.evaluate` returns a :class:`PolicyVerdict` or ``None`` (no rule
speaks; the posture decides). Precedence is deny > ask > allow whatever the
layer a rule came from. For a shell command, ``allow`` holds only if every
simple command matches an allow rule and no part matches deny or ask; parts the
parser cannot resolve, and deny/ask rules a computed word *could* match, make
the call at least ``ask``.

Rules compare names, not files: ``src/link/x`` is judged as under ``src/``
whatever ``link`` points at, and ``a/../b`` as ``b`` even where ``a`` is a
symlink. Confinement to the workspace is the workspace resolver's job.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import math
import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import re2

from ._errors import InvalidArguments
from ._shellwords import Redirect, ShellParse, SimpleCommand, Word, parse_argv, parse_command

__all__ = [
    "EFFECTS",
    "PartVerdict",
    "Policy",
    "PolicyVerdict",
    "Rule",
    "RuleError",
    "parse_rule",
]


class Effect(enum.StrEnum):
    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


EFFECTS = tuple(e.value for e in Effect)
_RANK = {Effect.DENY: 0, Effect.ASK: 1, Effect.ALLOW: 2}

# Argument names that hold paths (besides any a tool lists in meta["path_arguments"]).
PATH_ARGUMENTS = frozenset(
    {
        "path",
        "paths",
        "cwd",
        "file",
        "files",
        "dir",
        "directory",
        "source",
        "destination",
        "src",
        "dst",
        "target",
        "root",
        "old_path",
        "new_path",
    }
)
# A shell redirection is judged as a call to these tools with path=<target> would be.
SHELL_WRITE_TOOL = "write_file"
SHELL_READ_TOOL = "read_file"
# Redirection targets that are not files in any sense a rule cares about.
_NEUTRAL_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
MAX_PATTERN_CHARS = 4096


class RuleError(InvalidArguments):
    """A rule that cannot be read; ``field`` names where it came from."""


def _is_path_argument(name: str) -> bool:
    return name in PATH_ARGUMENTS or name.endswith(("_path", "_file", "_dir", "_paths"))


# -- matchers -------------------------------------------------------------------------


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
def _path_regex(pattern: str) -> re.Pattern[str]:
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
    return re.compile(body, re.DOTALL)


def normalize_path(value: str, roots: Sequence[str], cwd: str | None = None) -> str:
    """The name a path rule is matched against: workspace-relative when inside a root.

    ``..`` and ``.`` are collapsed lexically (``notes/sub/../../a.txt`` is
    ``a.txt``); a path that climbs out stays ``../…``; an absolute path inside
    a root becomes relative to it, one outside every root stays absolute.
    """
    if cwd and not posixpath.isabs(value):
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


@dataclass(frozen=True)
class RegexMatcher:
    pattern: str
    _compiled: Any = field(compare=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if len(self.pattern) > MAX_PATTERN_CHARS:
            raise RuleError(f"regex longer than {MAX_PATTERN_CHARS} characters", field="regex")
        try:
            compiled = re2.compile(self.pattern, _RE2_OPTIONS)
        except re2.error as exc:
            raise RuleError(
                f"regex {self.pattern!r} is not one RE2 accepts ({exc}); RE2 has no "
                "backreferences or lookaround",
                field="regex",
            ) from None
        object.__setattr__(self, "_compiled", compiled)

    def matches(self, value: Any, roots: Sequence[str]) -> bool:
        if not isinstance(value, str):
            return False
        return self._compiled.search(value) is not None

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
        for pattern in self.patterns:
            r = _match_argv(pattern, command, deny_side)
            if r is Tri.YES:
                return r
            if r is Tri.MAYBE:
                best = Tri.MAYBE
        return best


# element -> its compiled glob, or None for a literal element (compared with ==)
_ELEMENTS: dict[str, re.Pattern[str] | None] = {}


def _element_matches(element: str, word: str) -> bool:
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
        if len(argv) < len(head):
            return (
                Tri.NO if all(w.literal for w in argv) else _match_slow(pattern, command, deny_side)
            )
        if not head:
            return Tri.YES
        first = argv[0].text
        if deny_side and "/" not in head[0]:
            first = first.rsplit("/", 1)[-1]
        if not _element_matches(head[0], first):
            return Tri.NO
        for element, word in zip(head[1:], argv[1:], strict=False):
            if not _element_matches(element, word.text):
                return Tri.NO
        return Tri.YES
    return _match_slow(pattern, command, deny_side)


def _match_slow(pattern: tuple[str, ...], command: SimpleCommand, deny_side: bool) -> Tri:
    """The general matcher: computed words and ** anywhere (memoized, O(words * elements))."""
    words: list[Word] = list(command.argv)
    if command.open_tail:
        words.append(Word("…", False))
    if deny_side and words and words[0].literal and "/" not in pattern[0]:
        words[0] = Word(words[0].text.rsplit("/", 1)[-1])
    n, m = len(words), len(pattern)
    # best[i][j]: how well words[i:] match pattern[j:]
    memo: dict[tuple[int, int], Tri] = {}

    def go(i: int, j: int) -> Tri:
        key = (i, j)
        if key in memo:
            return memo[key]
        if j == m:
            if i == n:
                r = Tri.YES
            elif all(not w.literal for w in words[i:]):
                r = Tri.MAYBE  # computed words may expand to nothing
            else:
                r = Tri.NO
        elif pattern[j] == "**":
            r = Tri.NO
            # ** absorbs words[i:k]
            for k in range(i, n + 1):
                sub = go(k, j + 1)
                if sub is Tri.YES:
                    r = Tri.YES
                    break
                if sub is Tri.MAYBE:
                    r = Tri.MAYBE
        elif i == n:
            r = Tri.NO
        elif words[i].literal:
            r = go(i + 1, j + 1) if _element_matches(pattern[j], words[i].text) else Tri.NO
        else:
            # a computed word may stand for zero or more pattern elements: at best MAYBE
            r = Tri.NO
            for k in range(j, m + 1):
                if go(i + 1, k) is not Tri.NO:
                    r = Tri.MAYBE
                    break
        memo[key] = r
        return r

    return go(0, 0)


Matcher = PathMatcher | GlobMatcher | RegexMatcher | RangeMatcher | UrlMatcher


# -- rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One deny/ask/allow rule, and where it was written."""

    effect: Effect
    tool: str
    arguments: tuple[tuple[str, Matcher], ...] = ()
    command: ArgvMatcher | None = None
    text: str = ""
    source: str = ""  # "file:line", "--deny", "api"
    layer: str = ""
    inactive: str = ""  # why the rule is loaded but not applied (an untrusted project's allow)

    def label(self) -> str:
        return f"{self.effect.value}:{self.text or self.tool}"

    def matches_arguments(
        self,
        arguments: Mapping[str, Any],
        roots: Sequence[str],
        path_args: frozenset[str] = frozenset(),
    ) -> bool:
        """Every matcher matches its argument; ``path_args`` are further path arguments the
        tool declares (``meta["path_arguments"]``), matched as paths."""
        for name, matcher in self.arguments:
            if name not in arguments:
                return False
            if name in path_args and isinstance(matcher, GlobMatcher):
                matcher = PathMatcher(matcher.patterns)
            value = arguments[name]
            if isinstance(value, list):
                if not value:
                    return False
                # deny/ask: any element; allow: every element
                check = any if self.effect is not Effect.ALLOW else all
                if not check(matcher.matches(v, roots) for v in value):
                    return False
            elif not matcher.matches(value, roots):
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "effect": self.effect.value,
            "rule": self.text or self.tool,
            "source": self.source,
            "layer": self.layer,
        }
        if self.inactive:
            out["inactive"] = self.inactive
        return out


_ARG_START = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*(=|~)")
_ARG_SPLIT = re.compile(r",\s*(?=[A-Za-z_][A-Za-z0-9_.\-]*\s*[=~])")
_RANGE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)?\s*\.\.\s*(-?\d+(?:\.\d+)?)?\s*$")
_TOOL_GLOB = re.compile(r"^[A-Za-z0-9_.\-*?\[\]!]{1,200}$")


def parse_rule(text: str, effect: str | Effect, *, source: str = "", layer: str = "") -> Rule:
    """Parse ``TOOL`` or ``TOOL(SPEC)``: the syntax of ``--allow/--ask/--deny`` and the files.

    SPEC is either shell words for the ``command`` argument (``git status*``;
    a last word ending in ``*`` also admits any further words, ``**`` stands
    for any number of words) or comma-separated argument matchers
    ``name=GLOB``, ``name=LO..HI``, ``name=scheme://host:port/path``,
    ``name~REGEX``. Raises RuleError naming the problem.
    """
    effect = _effect(effect)
    text = text.strip()
    if len(text) > MAX_PATTERN_CHARS:
        raise RuleError(f"rule longer than {MAX_PATTERN_CHARS} characters", field="rule")
    if "(" not in text:
        _check_tool(text)
        return Rule(effect, text, text=text, source=source, layer=layer)
    if not text.endswith(")"):
        raise RuleError(f"rule {text!r}: a '(' must be closed by a final ')'", field="rule")
    tool, spec = text[:-1].split("(", 1)
    tool = tool.strip()
    _check_tool(tool)
    spec = spec.strip()
    if not spec:
        return Rule(effect, tool, text=text, source=source, layer=layer)
    arguments: list[tuple[str, Matcher]] = []
    command: ArgvMatcher | None = None
    if _ARG_START.match(spec) is None:
        command = ArgvMatcher((_shell_pattern(spec),))
    else:
        for item in _ARG_SPLIT.split(spec):
            m = _ARG_START.match(item)
            if m is None:
                raise RuleError(f"rule {text!r}: cannot read {item!r} as name=value", field="rule")
            name, op = m.group(1), m.group(2)
            value = item[m.end() :].strip()
            if name == "command" and op == "=":
                command = ArgvMatcher((_shell_pattern(value),))
            else:
                arguments.append((name, _matcher(name, op, value)))
    return Rule(effect, tool, tuple(arguments), command, text=text, source=source, layer=layer)


def rule_from_table(table: Mapping[str, Any], *, source: str = "", layer: str = "") -> Rule:
    """The long form from a policy file: ``effect``, ``tool``, ``argv``, ``args``."""
    known = {"effect", "tool", "argv", "args"}
    extra = sorted(set(table) - known)
    if extra:
        raise RuleError(
            f"unknown key {extra[0]!r} (a rule has {', '.join(sorted(known))})", field=extra[0]
        )
    if "effect" not in table:
        raise RuleError("a [[rules]] table needs effect = deny|ask|allow", field="effect")
    effect = _effect(table["effect"])
    tool = table.get("tool")
    if not isinstance(tool, str):
        raise RuleError("tool must be a string (a glob over tool names)", field="tool")
    _check_tool(tool)
    command = None
    if "argv" in table:
        argv = table["argv"]
        lists = argv if argv and all(isinstance(a, list) for a in argv) else [argv]
        patterns = []
        for one in lists:
            if not isinstance(one, list) or not one or not all(isinstance(w, str) for w in one):
                raise RuleError(
                    "argv must be a non-empty list of strings (or a list of such lists)",
                    field="argv",
                )
            patterns.append(tuple(one))
        command = ArgvMatcher(tuple(patterns))
    arguments: list[tuple[str, Matcher]] = []
    args = table.get("args", {})
    if not isinstance(args, Mapping):
        raise RuleError("args must be a table of argument matchers", field="args")
    for name, spec in args.items():
        arguments.append((name, _matcher_from_value(name, spec)))
    text = tool
    details = []
    if command is not None:
        details.append(command.describe())
    details += [f"{n}={m.describe()}" for n, m in arguments]
    if details:
        text = f"{tool}({', '.join(details)})"
    return Rule(effect, tool, tuple(arguments), command, text=text, source=source, layer=layer)


def _effect(value: Any) -> Effect:
    try:
        return Effect(value)
    except ValueError:
        raise RuleError(
            f"effect must be deny, ask or allow, not {value!r}", field="effect"
        ) from None


def _check_tool(tool: str) -> None:
    if not _TOOL_GLOB.match(tool):
        raise RuleError(
            f"tool {tool!r} must be a glob over tool names ([A-Za-z0-9_.-] and * ? [])",
            field="tool",
        )


def _shell_pattern(spec: str) -> tuple[str, ...]:
    try:
        words = shlex.split(spec, comments=False, posix=True)
    except ValueError as exc:
        raise RuleError(f"command pattern {spec!r}: {exc}", field="command") from None
    if not words:
        raise RuleError("an empty command pattern", field="command")
    last = words[-1]
    if last == "*":
        words[-1] = "**"
    elif last.endswith("*") and last != "**":
        words.append("**")
    return tuple(words)


def _matcher(name: str, op: str, value: str) -> Matcher:
    if not value:
        raise RuleError(f"argument {name!r} has an empty pattern", field=name)
    if op == "~":
        return RegexMatcher(value)
    if (m := _RANGE.match(value)) and (m.group(1) or m.group(2)):
        lo, hi = m.group(1), m.group(2)
        return RangeMatcher(float(lo) if lo else None, float(hi) if hi else None)
    if "://" in value:
        return _url_matcher(value)
    patterns = tuple(p.strip() for p in value.split("|")) if "|" in value else (value,)
    return PathMatcher(patterns) if _is_path_argument(name) else GlobMatcher(patterns)


def _url_matcher(value: str) -> UrlMatcher:
    scheme, _, rest = value.partition("://")
    hostport, slash, path = rest.partition("/")
    host, colon, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
    ports: tuple[int, ...] = ()
    if colon:
        if not port.isdigit():
            raise RuleError(f"URL pattern {value!r}: port {port!r} is not a number", field="url")
        ports = (int(port),)
    return UrlMatcher(
        tuple(s.lower() for s in scheme.split("|") if s and s != "*"),
        tuple(h.lower() for h in host.split("|") if h and h != "*"),
        ports,
        (slash + path,) if slash else (),
    )


def _strings(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RuleError(f"{name} must be a string or a list of strings", field=name)


def _matcher_from_value(name: str, spec: Any) -> Matcher:
    if isinstance(spec, (str, list)):
        patterns = _strings(name, spec)
        if len(patterns) == 1:
            return _matcher(name, "=", patterns[0])
        return PathMatcher(patterns) if _is_path_argument(name) else GlobMatcher(patterns)
    if not isinstance(spec, Mapping):
        raise RuleError(f"args.{name}: a glob, a list of globs, or a table", field=name)
    keys = set(spec)
    if keys == {"regex"}:
        if not isinstance(spec["regex"], str):
            raise RuleError(f"args.{name}.regex must be a string", field=name)
        return RegexMatcher(spec["regex"])
    if keys and keys <= {"min", "max"}:
        for k in keys:
            if isinstance(spec[k], bool) or not isinstance(spec[k], (int, float)):
                raise RuleError(f"args.{name}.{k} must be a number", field=name)
        return RangeMatcher(spec.get("min"), spec.get("max"))
    if keys and keys <= {"scheme", "host", "port", "path"}:
        ports = spec.get("port", [])
        ports = [ports] if isinstance(ports, int) else ports
        if not isinstance(ports, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in ports
        ):
            raise RuleError(f"args.{name}.port must be a number or a list of numbers", field=name)
        return UrlMatcher(
            tuple(s.lower() for s in _strings(f"{name}.scheme", spec["scheme"]))
            if "scheme" in spec
            else (),
            tuple(h.lower() for h in _strings(f"{name}.host", spec["host"]))
            if "host" in spec
            else (),
            tuple(ports),
            _strings(f"{name}.path", spec["path"]) if "path" in spec else (),
        )
    raise RuleError(
        f"args.{name}: a table takes regex, or min/max, or scheme/host/port/path", field=name
    )


# -- judging a call -------------------------------------------------------------------


@dataclass(frozen=True)
class PartVerdict:
    """One part of a shell command and what the rules say about it (None: no rule)."""

    kind: str  # "command", "write", "read", "unresolved", "argument"
    text: str
    effect: Effect | None
    rule: Rule | None = None
    reason: str = ""
    via: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "part": self.kind,
            "text": self.text,
            "verdict": self.effect.value if self.effect else "unmatched",
        }
        if self.rule is not None:
            out["rule"] = self.rule.label()
            out["source"] = self.rule.source
            out["layer"] = self.rule.layer
        if self.reason:
            out["reason"] = self.reason
        if self.via:
            out["via"] = list(self.via)
        return out


@dataclass(frozen=True)
class PolicyVerdict:
    """What the rules say: ``effect`` None means no verdict (the posture decides)."""

    effect: Effect | None
    rule: Rule | None
    reason: str
    parts: tuple[PartVerdict, ...] = ()


@dataclass(frozen=True)
class Policy:
    """An ordered set of rules and the workspace roots path rules are relative to."""

    rules: tuple[Rule, ...] = ()
    roots: tuple[str, ...] = ()
    # Caches (per policy object; a Policy is immutable, so they never go stale).
    _by_tool: dict[str, tuple[Rule, ...]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )
    _indexes: dict[str, _CommandIndex] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )
    _verdicts: dict[Any, PolicyVerdict | None] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    @classmethod
    def from_strings(
        cls,
        *,
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
        allow: Iterable[str] = (),
        source: str = "api",
        layer: str = "api",
    ) -> Policy:
        rules = [
            parse_rule(text, effect, source=source, layer=layer)
            for effect, texts in (("deny", deny), ("ask", ask), ("allow", allow))
            for text in texts
        ]
        return cls(tuple(rules))

    def with_roots(self, roots: Iterable[Any]) -> Policy:
        return Policy(self.rules, tuple(str(r) for r in roots))

    def __add__(self, other: Policy) -> Policy:
        return Policy(self.rules + other.rules, self.roots or other.roots)

    def for_tool(self, name: str) -> tuple[Rule, ...]:
        """The active rules whose tool glob matches ``name`` (cached per name)."""
        found = self._by_tool.get(name)
        if found is None:
            found = tuple(
                r for r in self.rules if not r.inactive and _element_matches(r.tool, name)
            )
            if len(self._by_tool) < 4096:
                self._by_tool[name] = found
        return found

    def evaluate(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> PolicyVerdict | None:
        """What the rules say about one call; None when no rule speaks.

        Results are cached per (tool, arguments) for hashable JSON-like
        arguments (bounded; the same command line is judged once).
        """
        rules = self.for_tool(name)
        command = arguments.get("command")
        shellish = isinstance(command, (str, list))
        if not rules and not (shellish and self._has_redirect_rules()):
            return None
        declared = (meta or {}).get("path_arguments", ())
        path_args = frozenset(declared) if isinstance(declared, (list, tuple, set)) else frozenset()
        key = _freeze((name, sorted(path_args), arguments))
        if key is not None:
            try:
                return self._verdicts[key]
            except KeyError:
                pass
        if shellish and any(r.command is not None for r in rules):
            verdict: PolicyVerdict | None = self._evaluate_shell(name, rules, arguments, path_args)
        else:
            verdict = self._evaluate_plain(self._plain(name), arguments, path_args)
            if shellish and (verdict is None or verdict.effect is not Effect.DENY):
                # No command rules for this tool, but its redirections still meet the
                # write_file/read_file rules: `echo x > .env` under a write_file(.env) deny.
                verdict = _stricter(verdict, self._redirects_only(arguments))
        if key is not None:
            if len(self._verdicts) >= _VERDICT_CACHE:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        return verdict

    def _plain(self, name: str) -> tuple[Rule, ...]:
        """The active rules for ``name`` that have no argv matcher (cached per name)."""
        key = "\0plain:" + name
        found = self._by_tool.get(key)
        if found is None:
            found = tuple(r for r in self.for_tool(name) if r.command is None)
            if len(self._by_tool) < 4096:
                self._by_tool[key] = found
        return found

    def _has_redirect_rules(self) -> bool:
        return bool(self._plain(SHELL_WRITE_TOOL) or self._plain(SHELL_READ_TOOL))

    def _redirects_only(self, arguments: Mapping[str, Any]) -> PolicyVerdict | None:
        """Deny/ask that a command's redirections meet; None when they meet neither."""
        if not self._has_redirect_rules():
            return None
        command = arguments["command"]
        if not isinstance(command, str):
            return None  # an argv list has no redirections
        parsed = parse_command(command)
        cwd = arguments.get("cwd") if isinstance(arguments.get("cwd"), str) else None
        parts = tuple(
            self._judge_redirect(r, cwd, parsed.changes_directory) for r in parsed.redirects
        )
        for effect in (Effect.DENY, Effect.ASK):
            for p in parts:
                if p.effect is effect and p.rule is not None:
                    return PolicyVerdict(
                        effect, p.rule, f"{p.kind} `{p.text}` {_because(p.rule)}", parts
                    )
        return None

    def _index(self, name: str, rules: tuple[Rule, ...]) -> _CommandIndex:
        index = self._indexes.get(name)
        if index is None:
            index = _CommandIndex.build(rules)
            if len(self._indexes) < 4096:
                self._indexes[name] = index
        return index

    def _evaluate_plain(
        self,
        rules: tuple[Rule, ...],
        arguments: Mapping[str, Any],
        path_args: frozenset[str] = frozenset(),
    ) -> PolicyVerdict | None:
        best: Rule | None = None
        for rule in rules:
            if rule.arguments and not rule.matches_arguments(arguments, self.roots, path_args):
                continue
            if best is None or _RANK[rule.effect] < _RANK[best.effect]:
                best = rule
                if best.effect is Effect.DENY:
                    break
        if best is None:
            return None
        return PolicyVerdict(best.effect, best, _because(best))

    def _evaluate_shell(
        self,
        name: str,
        rules: tuple[Rule, ...],
        arguments: Mapping[str, Any],
        path_args: frozenset[str] = frozenset(),
    ) -> PolicyVerdict:
        command = arguments["command"]
        parsed: ShellParse
        if isinstance(command, str):
            parsed = parse_command(command)
        elif all(isinstance(a, str) for a in command) and command:
            parsed = parse_argv(command)
        else:
            parsed = ShellParse(unresolved=())
        whole = self._evaluate_plain(self._plain(name), arguments, path_args)
        parts: list[PartVerdict] = []
        index = self._index(name, rules)
        for sc in parsed.commands:
            candidates = [
                r
                for r in index.candidates(sc)
                if not r.arguments or r.matches_arguments(arguments, self.roots, path_args)
            ]
            parts.append(_judge_command(sc, candidates))
        cwd = arguments.get("cwd") if isinstance(arguments.get("cwd"), str) else None
        for redirect in parsed.redirects:
            parts.append(self._judge_redirect(redirect, cwd, parsed.changes_directory))
        for u in parsed.unresolved:
            parts.append(PartVerdict("unresolved", u.text, Effect.ASK, reason=u.reason))
        env = arguments.get("env")
        if isinstance(env, Mapping) and env:
            parts.append(
                PartVerdict(
                    "unresolved",
                    "env=" + ",".join(sorted(env)),
                    Effect.ASK,
                    reason="environment variables passed with the call can change what runs",
                )
            )
        if not parsed.commands and not parsed.unresolved:
            parts.append(
                PartVerdict("unresolved", str(command), Effect.ASK, reason="no command found in it")
            )
        return _combine(name, whole, tuple(parts))

    def _judge_redirect(self, redirect: Redirect, cwd: str | None, moved: bool) -> PartVerdict:
        kind = "write" if redirect.write else "read"
        target = redirect.path
        text = f"{redirect.operator} {target.text}"
        if not target.literal:
            return PartVerdict(
                kind, text, Effect.ASK, reason="the redirection target is computed at run time"
            )
        if target.text in _NEUTRAL_TARGETS:
            return PartVerdict(kind, text, Effect.ALLOW, reason="not a file")
        if moved and not posixpath.isabs(target.text):
            return PartVerdict(
                kind, text, Effect.ASK, reason="a cd earlier makes the target's directory unknown"
            )
        path = normalize_path(target.text, self.roots, cwd)
        tool = SHELL_WRITE_TOOL if redirect.write else SHELL_READ_TOOL
        verdict = self._evaluate_plain(self._plain(tool), {"path": path})
        if verdict is None:
            if redirect.write:
                return PartVerdict(
                    kind, text, None, reason=f"no rule for {tool}(path={path}) allows it"
                )
            return PartVerdict(kind, text, Effect.ALLOW, reason="reads are judged by deny/ask only")
        if verdict.effect is Effect.ALLOW and not redirect.write:
            return PartVerdict(kind, text, Effect.ALLOW, verdict.rule)
        return PartVerdict(
            kind, text, verdict.effect, verdict.rule, reason=f"judged as {tool}(path={path})"
        )


_VERDICT_CACHE = 4096


def _stricter(a: PolicyVerdict | None, b: PolicyVerdict | None) -> PolicyVerdict | None:
    if a is None or a.effect is None:
        return b if b is not None else a
    if b is None or b.effect is None:
        return a
    return a if _RANK[a.effect] <= _RANK[b.effect] else b


# Only calls whose arguments hold at most this many characters in all are cached: the
# cache must not keep a write_file's megabytes alive (4096 entries of them).
_CACHE_KEY_CHARS = 8192


def _freeze(value: Any) -> Any:
    """A small hashable stand-in for JSON-like ``value``; None when it has other types or
    more than _CACHE_KEY_CHARS characters of strings."""
    budget = [_CACHE_KEY_CHARS]

    def go(v: Any) -> Any:
        if isinstance(v, str):
            budget[0] -= len(v)
            return None if budget[0] < 0 else ("str", v)
        if isinstance(v, (int, float, bool)) or v is None:
            return (type(v).__name__, v)
        if isinstance(v, (list, tuple)):
            items = [go(x) for x in v]
            return None if any(i is None for i in items) else ("l", tuple(items))
        if isinstance(v, Mapping):
            pairs = [(k, go(x)) for k, x in v.items() if isinstance(k, str)]
            if len(pairs) != len(v) or any(x is None for _, x in pairs):
                return None
            budget[0] -= sum(len(k) for k, _ in pairs)
            return None if budget[0] < 0 else ("d", tuple(sorted(pairs)))
        return None

    return go(value)


@dataclass(frozen=True)
class _CommandIndex:
    """A tool's argv rules by their first word, so a command is checked against few rules."""

    by_first: dict[str, tuple[tuple[int, Rule], ...]]
    # rules whose first word is a glob, by the length and text of its literal prefix
    wild_by_prefix: tuple[tuple[int, dict[str, tuple[tuple[int, Rule], ...]]], ...]
    every: tuple[tuple[int, Rule], ...]

    @classmethod
    def build(cls, rules: Iterable[Rule]) -> _CommandIndex:
        by_first: dict[str, list[tuple[int, Rule]]] = {}
        wild: list[tuple[str, int, Rule]] = []
        every: list[tuple[int, Rule]] = []
        for position, rule in enumerate(rules):
            if rule.command is None:
                continue
            every.append((position, rule))
            firsts = {p[0] for p in rule.command.patterns}
            if any(f == "**" or any(c in f for c in "*?[") for f in firsts):
                prefix = min((re.split(r"[*?\[]", f, maxsplit=1)[0] for f in firsts), key=len)
                wild.append((prefix, position, rule))
                continue
            for first in firsts:
                by_first.setdefault(first, []).append((position, rule))
        buckets: dict[int, dict[str, list[tuple[int, Rule]]]] = {}
        for prefix, position, rule in wild:
            buckets.setdefault(len(prefix), {}).setdefault(prefix, []).append((position, rule))
        wild_by_prefix = tuple(
            (length, {p: tuple(v) for p, v in bucket.items()})
            for length, bucket in sorted(buckets.items())
        )
        return cls({k: tuple(v) for k, v in by_first.items()}, wild_by_prefix, tuple(every))

    def candidates(self, command: SimpleCommand) -> list[Rule]:
        """The rules that could match ``command``, in the policy's order."""
        head = command.argv[0] if command.argv else None
        if head is None or not head.literal:
            return [r for _, r in self.every]
        text = head.text
        base = text.rsplit("/", 1)[-1]
        found: list[tuple[int, Rule]] = []
        for length, bucket in self.wild_by_prefix:
            found.extend(bucket.get(text[:length], ()))
            if base != text:
                found.extend(bucket.get(base[:length], ()))
        found.extend(self.by_first.get(text, ()))
        if base != text:
            found.extend(self.by_first.get(base, ()))
        if len(found) > 1:
            seen: set[int] = set()
            found = [
                t for t in sorted(found, key=lambda t: t[0]) if not (t[0] in seen or seen.add(t[0]))
            ]
        return [r for _, r in found]


def _because(rule: Rule) -> str:
    where = f" ({rule.source})" if rule.source else ""
    verb = {Effect.DENY: "is denied by", Effect.ASK: "asks first by", Effect.ALLOW: "is allowed by"}
    return f"{verb[rule.effect]} the rule {rule.text or rule.tool!r}{where}"


def _judge_command(sc: SimpleCommand, rules: Sequence[Rule]) -> PartVerdict:
    text = sc.display()
    maybe: Rule | None = None
    ask: Rule | None = None
    allow: Rule | None = None
    for rule in rules:
        assert rule.command is not None
        if rule.effect is Effect.ALLOW:
            if allow is None and rule.command.match_command(sc, deny_side=False) is Tri.YES:
                allow = rule
            continue
        r = rule.command.match_command(sc, deny_side=True)
        if r is Tri.YES:
            if rule.effect is Effect.DENY:
                return PartVerdict("command", text, Effect.DENY, rule, via=sc.via)
            ask = ask or rule
        elif r is Tri.MAYBE:
            maybe = maybe or rule
    if ask is not None:
        return PartVerdict("command", text, Effect.ASK, ask, via=sc.via)
    if maybe is not None:
        return PartVerdict(
            "command",
            text,
            Effect.ASK,
            maybe,
            reason=f"a word computed at run time could make it match {maybe.label()}",
            via=sc.via,
        )
    if allow is not None:
        return PartVerdict("command", text, Effect.ALLOW, allow, via=sc.via)
    return PartVerdict("command", text, None, via=sc.via)


def _combine(
    name: str, whole: PolicyVerdict | None, parts: tuple[PartVerdict, ...]
) -> PolicyVerdict:
    if whole is not None and whole.effect is Effect.DENY:
        return PolicyVerdict(Effect.DENY, whole.rule, whole.reason, parts)
    for p in parts:
        if p.effect is Effect.DENY:
            return PolicyVerdict(
                Effect.DENY,
                p.rule,
                f"{p.kind} `{p.text}` {_because(p.rule) if p.rule else 'is denied'}",
                parts,
            )
    if whole is not None and whole.effect is Effect.ASK:
        return PolicyVerdict(Effect.ASK, whole.rule, whole.reason, parts)
    for p in parts:
        if p.effect is Effect.ASK:
            why = p.reason or (_because(p.rule) if p.rule else "asks first")
            return PolicyVerdict(Effect.ASK, p.rule, f"{p.kind} `{p.text}`: {why}", parts)
    if whole is not None and whole.effect is Effect.ALLOW:
        return PolicyVerdict(Effect.ALLOW, whole.rule, whole.reason, parts)
    unmatched = [p for p in parts if p.effect is None]
    commands = [p for p in parts if p.kind == "command"]
    if not unmatched and commands:
        first = commands[0].rule
        return PolicyVerdict(
            Effect.ALLOW,
            first,
            f"every part of the {name} command is allowed ("
            + "; ".join(
                f"`{p.text}` by {p.rule.text!r}" + (f" ({p.rule.source})" if p.rule.source else "")
                for p in commands
                if p.rule
            )
            + ")",
            parts,
        )
    # No verdict from the rules: the posture (and the residual) decide, but explain shows why.
    return PolicyVerdict(
        None,
        None,
        "not every part is matched by an allow rule: "
        + "; ".join(f"`{p.text}`" for p in unmatched),
        parts,
    )
