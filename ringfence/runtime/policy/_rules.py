"""Policy rules: a deny/ask/allow :class:`Rule` over tool names and arguments; their syntax.

A :class:`Rule` says ``deny``, ``ask`` or ``allow`` for a tool (a glob over
names, ``mcp.<server>.<tool>`` included) and, optionally, its arguments, each
through a matcher of :mod:`._matchers` (path glob, string glob, regex, range,
URL, shell-aware argv). :func:`parse_rule` reads the short form of
``--allow/--ask/--deny`` and the policy files; :func:`rule_from_table` the long
``[[rules]]`` form. How a call is judged against rules is :mod:`._judge`.

Rules compare names: ``src/link/x`` is judged here as under ``src/`` whatever
``link`` points at, and ``a/../b`` as ``b`` even where ``a`` is a symlink. The
file tools then hand the Gate the name their resolver reached (every link
followed) and the call is judged again with it (``_gate.judge_resolved_path``,
``workspace/_judged.py``). Confinement to the workspace is the resolver's job.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._matchers import (
    MAX_PATTERN_CHARS,
    ArgvMatcher,
    GlobMatcher,
    Matcher,
    PathMatcher,
    RangeMatcher,
    RegexMatcher,
    RuleError,
    UrlMatcher,
    element_matches,
)

__all__ = [
    "EFFECTS",
    "Effect",
    "Rule",
    "RuleError",
    "command_pattern",
    "parse_rule",
    "rule_from_table",
]


# How strong each effect is: the strongest matching rule decides.
_STRENGTH = {"allow": 0, "ask": 1, "deny": 2}


class Effect(enum.StrEnum):
    """What a rule says about a call, and what a decision is: ordered deny > ask > allow.

    The one enum for it (a decision's ``Verdict`` and ``mcp_host.Policy`` are this
    class), ordered by strength so that the strongest of several rules that match is
    ``max()`` of them, as codex-rs execpolicy's ``Decision``: no rule, whichever layer
    wrote it, can weaken a stronger one. Listed (and iterated) strongest first.
    """

    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Effect):
            return NotImplemented
        return _STRENGTH[self] < _STRENGTH[other]

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Effect):
            return NotImplemented
        return _STRENGTH[self] <= _STRENGTH[other]

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Effect):
            return NotImplemented
        return _STRENGTH[self] > _STRENGTH[other]

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Effect):
            return NotImplemented
        return _STRENGTH[self] >= _STRENGTH[other]


_VERB = {Effect.DENY: "is denied by", Effect.ASK: "asks first by", Effect.ALLOW: "is allowed by"}

# The keys of a policy file, strongest first (the order its rules are read in).
EFFECTS = tuple(e.value for e in Effect)

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


def _is_path_argument(name: str) -> bool:
    return name in PATH_ARGUMENTS or name.endswith(("_path", "_file", "_dir", "_paths"))


@dataclass(frozen=True)
class Rule:
    """One deny/ask/allow rule, and where it was written.

    ``tool`` is a glob over tool names; ``arguments`` and ``command`` narrow the rule
    to some calls. A rule without them (a *name rule*: ``Rules.deny``'s globs, or
    ``write_file`` in a policy file) matches every call of the tools it names.
    """

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

    def because(self) -> str:
        """Why a call meets this rule, for a reason: ``is denied by the rule 'x' (file:1)``."""
        where = f" ({self.source})" if self.source else ""
        return f"{_VERB[self.effect]} the rule {self.text or self.tool!r}{where}"

    def matches_tool(self, name: str) -> bool:
        """The tool glob matches ``name`` (the whole name; ``*`` crosses dots)."""
        return element_matches(self.tool, name)

    def matches_arguments(
        self,
        arguments: Mapping[str, Any],
        roots: Sequence[str],
        path_args: frozenset[str] = frozenset(),
        skip: str | None = None,
    ) -> bool:
        """Every matcher matches its argument; ``path_args`` are further path arguments the
        tool declares (``meta["path_arguments"]``), matched as paths. ``skip``: an argument
        whose matchers are left out (whether the rest of the rule applies to the call)."""
        for name, matcher in self.arguments:
            if name == skip:
                continue
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
_RANGE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)?\s*\.\.\s*(-?\d+(?:\.\d+)?)?\s*\Z")
_TOOL_GLOB = re.compile(r"^[A-Za-z0-9_.\-*?\[\]!]{1,200}\Z")


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
        command = ArgvMatcher((command_pattern(spec),))
    else:
        for item in _ARG_SPLIT.split(spec):
            m = _ARG_START.match(item)
            if m is None:
                raise RuleError(f"rule {text!r}: cannot read {item!r} as name=value", field="rule")
            name, op = m.group(1), m.group(2)
            value = item[m.end() :].strip()
            if name == "command" and op == "=":
                command = ArgvMatcher((command_pattern(value),))
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


def command_pattern(spec: str) -> tuple[str, ...]:
    """A command pattern's words (``git status*`` is ``("git", "status*", "**")``): shell
    words; a last word ending in ``*`` also admits any further words. Raises RuleError."""
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
