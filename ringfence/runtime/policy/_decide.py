"""The decision: the strongest rule that matches the call, else the posture.

:func:`decide` is the only place a verdict is computed. Every path into a
tool (direct, script, MCP client) reaches it through the Gate
(``_gate.authorize``), so the same call gets the same decision whichever way
it arrives.

One model, as codex-rs execpolicy's: every rule is a :class:`~._rules.Rule`
with an :class:`~._rules.Effect`, ordered deny > ask > allow, and the decision
is the strongest effect among the rules that match; of equal ones the first
names the decision. The rules of a :class:`Rules`, in that order:

1. **name rules**: ``Rules.deny``/``Rules.ask`` globs, rules without argument
   matchers, matched on the tool's name alone (so also when no arguments are
   given); ``Rules.allow``, an allowlist, is a deny rule for every name it
   does not list;
2. **argument rules** (``Rules.policy``: policy files, ``--deny/--ask/--allow``,
   ``TOOL(SPEC)`` entries of ``Rules``), judged over the arguments by
   :mod:`._judge` (per simple command and redirection for a shell ``command``).

When no rule decides, the posture does (:func:`_by_posture`): ``unrestricted``
runs everything; a ``residual`` tool asks; an ``autonomous`` tool runs; else
the posture's table of consequences. That is also where a shell line the judge
cannot read whole lands: allow rules never allow it, and with no deny or ask
rule it meets the judge gives no verdict. An allow rule lets a call run under
any posture, the residual included (that is how an operator lets ``git
status`` through ``run_shell`` under ``ask``); under ``unrestricted`` the
decision names the posture, which allows as well.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, final

from .._errors import InvalidArguments
from .._tools import Consequence, ToolSpec
from ._judge import Policy, PolicyVerdict
from ._rules import Effect, Rule

__all__ = [
    "RULE_ALIASES",
    "Decision",
    "Posture",
    "Rules",
    "Verdict",
    "decide",
    "evaluate_policy",
]

# A decision's verdict is a rule's effect: one enum (``Verdict`` is the name the API had).
Verdict = Effect


class Posture(enum.StrEnum):
    """How much autonomy a session grants."""

    ASK = "ask"
    ALLOW_REVERSIBLE = "allow-reversible"
    ALLOW_ALL = "allow-all"
    UNRESTRICTED = "unrestricted"

    @classmethod
    def parse(cls, value: str | Posture) -> Posture:
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise InvalidArguments(
                f"unknown posture {value!r}; choose one of {choices}", field="posture"
            ) from None


# Which consequences each posture lets run without asking.
_POSTURE_ALLOWS: dict[Posture, frozenset[Consequence]] = {
    Posture.ASK: frozenset({Consequence.READ}),
    Posture.ALLOW_REVERSIBLE: frozenset({Consequence.READ, Consequence.REVERSIBLE}),
    Posture.ALLOW_ALL: frozenset(Consequence),
    Posture.UNRESTRICTED: frozenset(Consequence),
}


@final
@dataclass(frozen=True)
class Decision:
    """A verdict and the rule that produced it. Only the Gate makes these."""

    verdict: Effect
    rule: str
    reason: str
    source: str = ""  # where the rule was written ("file:line", "--deny", "api")
    layer: str = ""  # managed, session, user, project, api

    def to_dict(self) -> dict[str, str]:
        out = {"verdict": self.verdict.value, "rule": self.rule, "reason": self.reason}
        if self.source:
            out["source"] = self.source
        if self.layer:
            out["layer"] = self.layer
        return out


_UNRESTRICTED = Decision(Effect.ALLOW, "posture:unrestricted", "the session is unrestricted")


@dataclass(frozen=True)
class _RuleSources:
    """The fields of :class:`Rules`, as kept: names only in ``deny``/``ask``/``allow``."""

    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    allow: tuple[str, ...] | None = None
    autonomous: tuple[str, ...] = ()
    policy: Policy | None = None


class Rules(_RuleSources):
    """A session's rules: globs over tool names, and argument rules (``policy``).

    ``deny``: never runs. ``ask``: always asks. ``allow``: when not ``None``,
    the only tools that may run at all; an empty tuple allows nothing (fail
    closed). ``autonomous``: runs without asking, unless the tool is residual
    or a rule says otherwise. ``policy``: rules over names and arguments.

    An entry with arguments (``run_shell(git status*)``) is an argument rule:
    the constructor moves it into ``policy`` before the fields are set (an
    ``allow`` entry also puts its tool on the allowlist), so the frozen fields
    are never rewritten and ``dataclasses.replace(rules, …)`` carries it along.
    """

    def __init__(
        self,
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
        allow: Iterable[str] | None = None,
        autonomous: Iterable[str] = (),
        policy: Policy | None = None,
    ) -> None:
        deny, deny_args = _split(deny, "deny")
        ask, ask_args = _split(ask, "ask")
        allowlist, allow_args = _split(allow or (), "allow")
        if deny_args or ask_args or allow_args:
            extra = Policy.from_strings(deny=deny_args, ask=ask_args, allow=allow_args)
            policy = extra if policy is None else policy + extra
        if allow is not None:
            # TOOL(SPEC) puts TOOL on the allowlist; its arguments are judged by the policy
            allowlist += tuple(v.split("(", 1)[0].strip() for v in allow_args)
        autonomous = _globs(autonomous, "autonomous")
        super().__init__(deny, ask, allowlist if allow is not None else None, autonomous, policy)

    @property
    def effective_policy(self) -> Policy | None:
        """The argument rules in force (``policy``, which includes the TOOL(SPEC) entries)."""
        return self.policy

    @functools.cached_property
    def _names(self) -> _NameRules:
        # derived once from the fields (which stay as they are): a memo, not a field
        rules = tuple(Rule(Effect.DENY, p, text=p) for p in self.deny) + tuple(
            Rule(Effect.ASK, p, text=p) for p in self.ask
        )
        return _NameRules(rules, self.allow)


# ToolSpec.meta key: names a tool was known by that rules written for them still restrict
# (an MCP tool renamed with a suffix when a look-alike appeared: mcp.notes.delete_all).
RULE_ALIASES = "rule_aliases"


def _globs(values: Iterable[str], key: str) -> tuple[str, ...]:
    if isinstance(values, str):  # its letters would be globs that match nothing: refused
        raise InvalidArguments(f"Rules({key}=…) takes a tuple of rules, not one string", field=key)
    return tuple(values)


def _split(values: Iterable[str], key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Names, and entries with arguments (``TOOL(SPEC)``)."""
    values = _globs(values, key)
    return tuple(v for v in values if "(" not in v), tuple(v for v in values if "(" in v)


@dataclass(frozen=True)
class _NameRules:
    """The name rules of a :class:`Rules`: its deny globs, then its ask globs; and the allowlist."""

    rules: tuple[Rule, ...]
    allowlist: tuple[str, ...] | None
    _decided: dict[str, Decision | None] = field(default_factory=dict, compare=False, repr=False)

    def strongest(self, name: str) -> Decision | None:
        """The decision of the strongest name rule that matches ``name`` (cached per name)."""
        if not self.rules and self.allowlist is None:
            return None
        try:
            return self._decided[name]
        except KeyError:
            pass
        first = next((r for r in self.rules if r.matches_tool(name)), None)  # denies come first
        if first is not None and first.effect is Effect.DENY:
            found: Decision | None = _named(name, first)
        elif self.allowlist is not None and _first_match(name, self.allowlist) is None:
            found = Decision(
                Effect.DENY, "allowlist", f"{name} is not in the allowlist of tools that may run"
            )
        else:
            found = _named(name, first) if first is not None else None
        if len(self._decided) < 4096:
            self._decided[name] = found
        return found


def _first_match(name: str, patterns: tuple[str, ...]) -> str | None:
    if not patterns:  # the common case: no generator to build
        return None
    return next((p for p in patterns if fnmatchcase(name, p)), None)


def _named(name: str, rule: Rule) -> Decision:
    return Decision(rule.effect, rule.label(), f"{name} {rule.because()}", rule.source, rule.layer)


def _from_policy(name: str, pv: PolicyVerdict) -> Decision:
    """The judge's verdict (an effect, never None here) as a decision."""
    assert pv.effect is not None
    rule = pv.rule
    if rule is None:
        label = f"{pv.effect.value}:shell-unresolved"
    elif rule.effect is not pv.effect:  # a deny rule a computed word could match: ask
        label = f"{pv.effect.value}:could-match:{rule.label()}"
    else:
        label = rule.label()
    return Decision(
        pv.effect,
        label,
        f"{name}: {pv.reason}",
        source=rule.source if rule is not None else "",
        layer=rule.layer if rule is not None else "",
    )


def evaluate_policy(
    spec: ToolSpec, rules: Rules, arguments: Mapping[str, Any] | None
) -> PolicyVerdict | None:
    """What the argument rules alone say about a call (None: no rule applies); a tool that
    checks every exec against the deny rules (``spec.exec_checked``) is judged so."""
    policy = rules.effective_policy
    if policy is None or not isinstance(arguments, Mapping):
        return None
    return policy.evaluate(spec.name, arguments, spec.meta, exec_checked=spec.exec_checked)


def _strongest_rule(
    spec: ToolSpec, rules: Rules, arguments: Mapping[str, Any] | None
) -> Decision | None:
    """The decision of the strongest rule that matches the call (a name rule wins a tie)."""
    by_name = rules._names.strongest(spec.name)
    if by_name is not None and by_name.verdict is Effect.DENY:
        return by_name  # nothing is stronger: the arguments need not be judged
    verdict = evaluate_policy(spec, rules, arguments)
    if verdict is None or verdict.effect is None:
        return by_name
    by_arguments = _from_policy(spec.name, verdict)
    if by_name is None or by_arguments.verdict > by_name.verdict:
        return by_arguments
    return by_name


@functools.cache
def _posture_decision(posture: Posture, consequence: Consequence) -> Decision:
    """The posture's own decision for a consequence: a frozen value, built once."""
    if consequence in _POSTURE_ALLOWS[posture]:
        return Decision(
            Effect.ALLOW,
            f"posture:{posture.value}",
            f"posture {posture.value} runs {consequence.value} tools without asking",
        )
    return Decision(
        Effect.ASK,
        f"posture:{posture.value}",
        f"posture {posture.value} asks before {consequence.value} tools",
    )


def _by_posture(spec: ToolSpec, posture: Posture, rules: Rules) -> Decision:
    """No rule decided: the session's posture for this tool."""
    name = spec.name
    if posture is Posture.UNRESTRICTED:
        return _UNRESTRICTED
    if spec.residual:
        return Decision(
            Effect.ASK, "residual", f"{name} asks first under every posture short of unrestricted"
        )
    if (p := _first_match(name, rules.autonomous)) is not None:
        return Decision(Effect.ALLOW, f"autonomous:{p}", f"{name} is autonomous by {p!r}")
    return _posture_decision(posture, spec.consequence)


def decide(
    spec: ToolSpec,
    posture: Posture,
    rules: Rules,
    arguments: Mapping[str, Any] | None = None,
) -> Decision:
    """Decide one call: the strongest rule that matches it, else the posture.

    Without ``arguments`` only name rules apply (argument rules cannot be
    judged, and are skipped: pass the arguments).
    """
    ruled = _strongest_rule(spec, rules, arguments)
    if ruled is None or (ruled.verdict is Effect.ALLOW and posture is Posture.UNRESTRICTED):
        decision = _by_posture(spec, posture, rules)
    else:
        decision = ruled
    aliases = spec.meta.get(RULE_ALIASES)
    return decision if not aliases else _narrowed(decision, spec, rules, arguments, aliases)


def _narrowed(
    decision: Decision,
    spec: ToolSpec,
    rules: Rules,
    arguments: Mapping[str, Any] | None,
    aliases: Iterable[str],
) -> Decision:
    """``decision``, made stronger by the deny and ask rules that match one of the tool's
    ``RULE_ALIASES``; such a rule never allows (nor does an allowlist that leaves it out
    deny): the aliases are names a rule may have been written for, not names of their own."""
    policy = rules.effective_policy
    for alias in aliases:
        alias = str(alias)
        found: list[Decision] = []
        named = next((r for r in rules._names.rules if r.matches_tool(alias)), None)
        if named is not None:
            found.append(_named(spec.name, named))
        if policy is not None and isinstance(arguments, Mapping):
            pv = policy.evaluate(alias, arguments, spec.meta, exec_checked=spec.exec_checked)
            if pv is not None and pv.effect is not None:
                found.append(_from_policy(spec.name, pv))
        for other in found:
            if other.verdict is not Effect.ALLOW and other.verdict > decision.verdict:
                decision = other
    return decision
