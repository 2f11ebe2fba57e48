"""How a call is judged: a :class:`Policy` (an ordered set of rules) and its verdicts.

:meth:`Policy.evaluate` returns a :class:`PolicyVerdict` or ``None`` (no rule
speaks; the posture decides). Precedence is deny > ask > allow whatever the
layer a rule came from. A redirection is judged as a ``write_file`` or
``read_file`` call on its target would be.

A shell command (``command``) is judged per simple command, and:

- ``allow`` holds only if the whole line is *resolved* (:attr:`ShellParse.resolved`:
  nothing in it becomes code only at run time) and every simple command matches an
  allow rule and no part matches deny or ask. An unresolved line never gets
  ``allow`` from an allow rule: at best the posture decides.
- A deny rule the judge cannot check on the text (an unresolved line, a word
  computed at run time that *could* match, a program not known to start nothing
  else) is carried by the tool when it is ``exec_checked`` (every ``execve`` is
  checked against the deny rules): then the posture decides. On a tool that is not,
  such a line is at least ``ask``; so it is on every tool for a deny rule that could
  name a shell builtin (``printf``, ``kill``, ``cd``: they run inside the shell, where
  no exec check sees them), and for a deny rule over the line's *text* (``command~REGEX``,
  or a ``[[rules]]`` ``args.command`` glob): no exec check carries one, and the text
  of an unread line is not what runs.
- An ask rule is never enforced at exec: an unresolved line, a computed word that
  could match one, or a program not known to start nothing else that no rule names,
  asks while any applies (on every tool, as a deny rule does where there is no exec check).

Rules and their syntax are :mod:`._rules`; what one pattern matches is
:mod:`._matchers`.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..shell._programs import SHELL_BUILTINS
from ..shell._words import Redirect, ShellParse, SimpleCommand, parse_argv, parse_command
from ._matchers import ArgvMatcher, Tri, element_matches, normalize_path
from ._rules import Effect, Rule, parse_rule

__all__ = [
    "ASK_HIDDEN",
    "BUILTIN_UNENFORCED",
    "SHELL_READ_TOOL",
    "SHELL_WRITE_TOOL",
    "TEXT_UNENFORCED",
    "UNENFORCED",
    "UNKNOWN_PROGRAM",
    "UNKNOWN_PROGRAM_ASK",
    "PartVerdict",
    "Policy",
    "PolicyVerdict",
    "with_defaults",
]

# A shell redirection is judged as a call to these tools with path=<target> would be.
SHELL_WRITE_TOOL = "write_file"
SHELL_READ_TOOL = "read_file"
# Redirection targets that are not files in any sense a rule cares about.
_NEUTRAL_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
# Why a part the judge cannot check against a deny rule asks on a tool without the exec check.
UNENFORCED = (
    "this line cannot be read whole and the deny rules cannot be enforced at exec on this backend"
)
UNKNOWN_PROGRAM = (
    "a program the judge does not know may start others, and the deny rules cannot be "
    "enforced at exec on this backend"
)
BUILTIN_UNENFORCED = (
    "a deny rule names a shell builtin, which runs inside the shell where no exec check sees it"
)
TEXT_UNENFORCED = (
    "a deny rule matches the line's text (command~…), and no exec check enforces one: the "
    "text of a line that cannot be read whole is not what runs"
)
ASK_HIDDEN = "an ask rule could match what it runs, and ask rules are not enforced at exec"
# A PATH that may name a directory commands write (a persistent shell's, changed by an earlier
# command; or one with a relative entry or an entry inside a root): a name the judge knows
# (`ls`) may then reach a file commands wrote. The tool says so (meta `path_carries_over`).
PATH_CARRIED = (
    "the command's PATH is not the session's start or holds a directory commands write "
    "(relative, or inside a root), so this name may run a file commands wrote"
)
UNKNOWN_PROGRAM_ASK = (
    "a program the judge does not know may start others, and ask rules are not enforced at exec"
)


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
            found = tuple(r for r in self.rules if not r.inactive and r.matches_tool(name))
            if len(self._by_tool) < 4096:
                self._by_tool[name] = found
        return found

    def evaluate(
        self,
        name: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
        *,
        exec_checked: bool = False,
    ) -> PolicyVerdict | None:
        """What the rules say about one call; None when no rule speaks.

        ``exec_checked``: the tool enforces the deny rules at every ``execve``
        (``ToolSpec.exec_checked``), so a command line the judge cannot check
        against them is left to the posture rather than asked about.
        Results are cached per (tool, arguments) for hashable JSON-like
        arguments (bounded; the same command line is judged once). An argument the call
        leaves out is judged as the value the tool uses for it (:func:`with_defaults`).
        """
        rules = self.for_tool(name)
        # A persistent shell starts a call without `cwd` where the last one left it: a
        # relative redirection's directory is then unknown, as after a `cd` in the line.
        moved = bool((meta or {}).get("cwd_carries_over")) and "cwd" not in arguments
        # ... and with the PATH an earlier command left, which decides what a name runs.
        path_moved = bool((meta or {}).get("path_carries_over"))
        arguments = with_defaults(arguments, meta)
        command = arguments.get("command")
        shellish = isinstance(command, (str, list))
        if not rules and not (shellish and self._has_redirect_rules()):
            return None
        moved = moved and self._has_redirect_rules()  # only file rules judge a target's place
        declared = (meta or {}).get("path_arguments", ())
        path_args = frozenset(declared) if isinstance(declared, (list, tuple, set)) else frozenset()
        key = _freeze((name, sorted(path_args), exec_checked, moved, path_moved, arguments))
        if key is not None:
            try:
                return self._verdicts[key]
            except KeyError:
                pass
        if shellish and any(r.command is not None or _over_text(r) for r in rules):
            verdict: PolicyVerdict | None = self._evaluate_shell(
                name, rules, arguments, path_args, exec_checked, moved, path_moved
            )
        else:
            verdict = self._evaluate_plain(self._plain(name), arguments, path_args)
            if shellish and (verdict is None or verdict.effect is not Effect.DENY):
                # No command rules for this tool, but its redirections still meet the
                # write_file/read_file rules: `echo x > .env` under a write_file(.env) deny.
                verdict = _stricter(verdict, self._redirects_only(arguments, moved))
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

    def _text_rules(self, name: str) -> tuple[Rule, ...]:
        """The active deny and ask rules for ``name`` over the ``command`` argument's text
        (cached per name)."""
        key = "\0text:" + name
        found = self._by_tool.get(key)
        if found is None:
            found = tuple(
                r for r in self.for_tool(name) if r.effect is not Effect.ALLOW and _over_text(r)
            )
            if len(self._by_tool) < 4096:
                self._by_tool[key] = found
        return found

    def _has_redirect_rules(self) -> bool:
        return bool(self._plain(SHELL_WRITE_TOOL) or self._plain(SHELL_READ_TOOL))

    def _redirects_only(
        self, arguments: Mapping[str, Any], moved: bool = False
    ) -> PolicyVerdict | None:
        """Deny/ask that a command's redirections meet; None when they meet neither.

        A redirection whose file the text does not settle (a target computed at run time,
        a relative one after a ``cd``) asks, as it does beside argv rules: it was dropped
        here (no rule of its own), so ``cd sub && echo x > .env`` wrote ``sub/.env`` unasked
        under ``write_file(path=sub/.env)`` when the policy had no ``run_shell`` rule."""
        if not self._has_redirect_rules():
            return None
        command = arguments["command"]
        if not isinstance(command, str):
            return None  # an argv list has no redirections
        parsed = parse_command(command)
        cwd = arguments.get("cwd") if isinstance(arguments.get("cwd"), str) else None
        parts = tuple(
            self._judge_redirect(r, cwd, moved or parsed.changes_directory)
            for r in parsed.redirects
        ) + ((_UNSEEN_REDIRECTS,) if parsed.damaged else ())
        for effect in (Effect.DENY, Effect.ASK):
            for p in parts:
                if p.effect is effect:
                    why = f" {p.rule.because()}" if p.rule is not None else f": {p.reason}"
                    return PolicyVerdict(effect, p.rule, f"{p.kind} `{p.text}`{why}", parts)
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
            if best is None or rule.effect > best.effect:  # the strongest; the first of a tie
                best = rule
                if best.effect is Effect.DENY:
                    break
        if best is None:
            return None
        return PolicyVerdict(best.effect, best, best.because())

    def _evaluate_shell(
        self,
        name: str,
        rules: tuple[Rule, ...],
        arguments: Mapping[str, Any],
        path_args: frozenset[str] = frozenset(),
        exec_checked: bool = False,
        moved: bool = False,
        path_moved: bool = False,
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
        if isinstance(command, list) and self._text_rules(name):
            # A rule over the line's text (command~…) sees an argv list as the line it stands
            # for: matched element by element, ["rm", "-rf", "x"] passed command~rm\s+-rf.
            line = {**arguments, "command": shlex.join(str(w) for w in command)}
            whole = _stricter(whole, self._evaluate_plain(self._plain(name), line, path_args))
        parts: list[PartVerdict] = []
        index = self._index(name, rules)
        # what a part the text cannot settle must do: ask for an ask rule (never enforced at
        # exec), and for a deny rule when the tool has no exec check
        hidden_ask, unenforced = index.has_ask, index.has_deny and not exec_checked
        builtin = index.deny_builtin and exec_checked  # what the exec checks cannot see
        if builtin:
            unenforced, exec_checked = True, False
        why_unenforced = BUILTIN_UNENFORCED if builtin else UNENFORCED
        # Rules over the line's text (command~…): the text is all they see, on every tool.
        for rule in self._text_rules(name):
            if not rule.matches_arguments(arguments, self.roots, path_args, skip=_COMMAND):
                continue
            if rule.effect is Effect.ASK:
                hidden_ask = True
            elif not builtin:
                unenforced, why_unenforced = True, TEXT_UNENFORCED
        for sc in parsed.commands:
            candidates = [
                r
                for r in index.candidates(sc)
                if not r.arguments or r.matches_arguments(arguments, self.roots, path_args)
            ]
            part = _judge_command(sc, candidates, exec_checked)
            known = sc.known and not path_moved
            if part.effect is None and unenforced and not known:
                reason = (
                    BUILTIN_UNENFORCED
                    if builtin
                    else TEXT_UNENFORCED
                    if why_unenforced is TEXT_UNENFORCED
                    else f"{PATH_CARRIED}; {UNENFORCED}"
                    if sc.known
                    else UNKNOWN_PROGRAM
                )
                part = PartVerdict("command", part.text, Effect.ASK, reason=reason, via=sc.via)
            elif part.effect is None and hidden_ask and not known:
                # An ask rule has no exec check anywhere: what a program the judge does not
                # know starts (`numactl -C 0 git push`, `ssh -o ProxyCommand=…`) it cannot see.
                reason = f"{PATH_CARRIED}; {ASK_HIDDEN}" if sc.known else UNKNOWN_PROGRAM_ASK
                part = PartVerdict("command", part.text, Effect.ASK, reason=reason, via=sc.via)
            parts.append(part)
        cwd = arguments.get("cwd") if isinstance(arguments.get("cwd"), str) else None
        for redirect in parsed.redirects:
            parts.append(self._judge_redirect(redirect, cwd, moved or parsed.changes_directory))
        if parsed.damaged and self._has_redirect_rules():
            parts.append(_UNSEEN_REDIRECTS)
        for u in parsed.unresolved:
            if hidden_ask or unenforced:
                why = f"{u.reason}; {ASK_HIDDEN if hidden_ask else why_unenforced}"
                parts.append(PartVerdict("unresolved", u.text, Effect.ASK, reason=why))
            else:
                parts.append(PartVerdict("unresolved", u.text, None, reason=u.reason))
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
                kind,
                text,
                Effect.ASK,
                reason="a cd earlier (in the line, or a persistent shell's earlier command) "
                "makes the target's directory unknown",
            )
        path = normalize_path(target.text, self.roots, cwd or ".")
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


def with_defaults(
    arguments: Mapping[str, Any], meta: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """``arguments`` with the values the tool uses for the ones left out
    (``meta["argument_defaults"]``), which is what rules must judge.

    A matcher on an argument the call does not hold never matches: a call that left out
    ``cwd`` (the command starts in the first root) or ``timeout_seconds`` (120 s) passed
    ``run_shell(cwd=!src/**, command=rm *)`` and ``run_shell(timeout_seconds=100..)``,
    which the same call spelling those values met.
    """
    defaults = (meta or {}).get("argument_defaults")
    if not isinstance(defaults, Mapping) or not defaults:
        return arguments
    if all(key in arguments for key in defaults):
        return arguments
    return {**defaults, **arguments}


# A line whose own syntax the parser could not read whole, judged where file rules apply: its
# redirections were not all seen (tree-sitter-bash reads `ls 1<>f`, which opens f for writing,
# as `ls 1<f` and an error), so which files it writes is unknown.
_UNSEEN_REDIRECTS = PartVerdict(
    "unresolved",
    "redirections",
    Effect.ASK,
    reason="the shell parser cannot read the whole line, so which files its redirections open "
    "is unknown, and write_file/read_file rules apply to them",
)

_VERDICT_CACHE = 4096


def _stricter(a: PolicyVerdict | None, b: PolicyVerdict | None) -> PolicyVerdict | None:
    if a is None or a.effect is None:
        return b if b is not None else a
    if b is None or b.effect is None:
        return a
    return a if a.effect >= b.effect else b


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
    # whether any argv rule asks / denies (what an unread part of a line could hide)
    has_ask: bool = False
    has_deny: bool = False
    deny_builtin: bool = False  # a deny rule could name a shell builtin

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
            # a program named by a path is also found by its name (see _by_name)
            firsts |= {f.rsplit("/", 1)[-1] for f in firsts if "/" in f}
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
        return cls(
            {k: tuple(v) for k, v in by_first.items()},
            wild_by_prefix,
            tuple(every),
            has_ask=any(r.effect is Effect.ASK for _, r in every),
            has_deny=any(r.effect is Effect.DENY for _, r in every),
            deny_builtin=any(
                r.effect is Effect.DENY and _names_builtin(r.command.patterns)
                for _, r in every
                if r.command is not None
            ),
        )

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


_COMMAND = "command"


def _over_text(rule: Rule) -> bool:
    """Whether ``rule`` matches the ``command`` argument as text (``command~REGEX``, a
    ``[[rules]]`` ``args.command`` glob) rather than as the commands of the line."""
    return any(name == _COMMAND for name, _ in rule.arguments)


def _names_builtin(patterns: tuple[tuple[str, ...], ...]) -> bool:
    """Whether a pattern's program (its first element, or its last path component) could
    be a shell builtin's name."""
    for pattern in patterns:
        first = pattern[0] if pattern else "**"
        if first == "**":
            return True
        if any(
            element_matches(first, name) or element_matches(first.rsplit("/", 1)[-1], name)
            for name in SHELL_BUILTINS
        ):
            return True
    return False


def _by_name(command: ArgvMatcher) -> ArgvMatcher | None:
    """The patterns that name their program by a path (``/bin/rm *``, ``/usr/bin/tou* *``,
    ``scripts/deploy.sh *``), naming it by its last component instead; None when none does.

    A command that names such a program otherwise (``rm x``, ``/usr/bin/rm x`` for
    ``/bin/rm``, ``cd scripts && ./deploy.sh``) *could* be that file: which file a name
    reaches is the shell's ``PATH`` search and the links on the way, known at exec only.
    Without an exec check (``host``, ``docker``) the Gate asks about it rather than letting
    a known name through: ``rm keep`` ran on the host under ``run_shell(/bin/rm *)``.
    """
    patterns = tuple(
        (p[0].rsplit("/", 1)[-1], *p[1:]) for p in command.patterns if p and "/" in p[0]
    )
    return ArgvMatcher(patterns) if patterns else None


def _judge_command(sc: SimpleCommand, rules: Sequence[Rule], exec_checked: bool) -> PartVerdict:
    text = sc.display()
    maybe: Rule | None = None
    maybe_why = ""
    ask: Rule | None = None
    allow: Rule | None = None
    for rule in rules:
        assert rule.command is not None
        if rule.effect is Effect.ALLOW:
            if allow is None and rule.command.match_command(sc, deny_side=False) is Tri.YES:
                allow = rule
            continue
        r = rule.command.match_command(sc, deny_side=True)
        by_name = _by_name(rule.command) if r is Tri.NO else None
        # `rm x` under run_shell(/bin/rm *): which file `rm` is, the text does not say
        named = by_name is not None and by_name.match_command(sc, deny_side=True) is not Tri.NO
        if named:
            r = Tri.MAYBE
        if r is Tri.YES:
            if rule.effect is Effect.DENY:
                return PartVerdict("command", text, Effect.DENY, rule, via=sc.via)
            ask = ask or rule
        elif maybe is None and r is Tri.MAYBE and not (exec_checked and rule.effect is Effect.DENY):
            # a deny rule a computed word could match is checked at exec on such a tool
            maybe = rule
            maybe_why = (
                f"{rule.label()} names its program by a path, and which file this "
                "command's name reaches is known only when it starts"
                if named
                else f"a word computed at run time could make it match {rule.label()}"
            )
    if ask is not None:
        return PartVerdict("command", text, Effect.ASK, ask, via=sc.via)
    if maybe is not None:
        return PartVerdict(
            "command",
            text,
            Effect.ASK,
            maybe,
            reason=maybe_why,
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
                f"{p.kind} `{p.text}` {p.rule.because() if p.rule else 'is denied'}",
                parts,
            )
    if whole is not None and whole.effect is Effect.ASK:
        return PolicyVerdict(Effect.ASK, whole.rule, whole.reason, parts)
    # an ask rule's own part first, then what could not be read, then the rest
    asks = sorted(
        (p for p in parts if p.effect is Effect.ASK),
        key=lambda p: 0 if p.rule is not None else 1 if p.kind == "unresolved" else 2,
    )
    for p in asks[:1]:
        why = p.reason or (p.rule.because() if p.rule else "asks first")
        return PolicyVerdict(Effect.ASK, p.rule, f"{p.kind} `{p.text}`: {why}", parts)
    if whole is not None and whole.effect is Effect.ALLOW:
        # a rule over the tool or its other arguments allows whatever the line says
        return PolicyVerdict(Effect.ALLOW, whole.rule, whole.reason, parts)
    unread = [p for p in parts if p.kind == "unresolved"]
    if unread:
        # An argv rule speaks of what the judge read: a line that is not read whole is the
        # posture's to decide, whatever allows its parts.
        return PolicyVerdict(
            None,
            None,
            "this line cannot be read whole, so no allow rule applies: "
            + "; ".join(f"`{p.text}`: {p.reason}" for p in unread),
            parts,
        )
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
