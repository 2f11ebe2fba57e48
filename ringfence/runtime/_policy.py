"""The decision function: deny rules > ask > allow.

:func:`decide` is the only place a verdict is computed. Every path into a
tool (direct, script, MCP client) reaches it through ``Kernel.invoke``, so the
same call gets the same decision whichever way it arrives.

Order, first answer wins::

    name deny globs → allowlist → policy deny → name ask globs → policy ask
    → unrestricted → policy allow → residual → autonomous → posture

Policy rules (:mod:`._rules`, over names *and* arguments, shell-aware for
``command``; judged by :mod:`._judge`) come from ``Rules.policy`` and from entries of ``deny``/``ask``/
``allow`` written as ``TOOL(SPEC)``. A policy ``allow`` lets a call run
without asking under any posture, the residual included (that is how an
operator lets ``git status`` through ``run_shell`` under ``ask``); it never
beats a deny or ask rule from any layer.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, final

from ._errors import InvalidArguments
from ._judge import Policy, PolicyVerdict
from ._rules import Effect
from ._tools import Consequence, ToolSpec

__all__ = ["Decision", "Posture", "Rules", "Verdict", "decide"]


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


class Verdict(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


# Which consequences each posture lets run without asking.
_POSTURE_ALLOWS: dict[Posture, frozenset[Consequence]] = {
    Posture.ASK: frozenset({Consequence.READ}),
    Posture.ALLOW_REVERSIBLE: frozenset({Consequence.READ, Consequence.REVERSIBLE}),
    Posture.ALLOW_ALL: frozenset(Consequence),
    Posture.UNRESTRICTED: frozenset(Consequence),
}


@dataclass(frozen=True)
class Rules:
    """Per-tool rules, as glob patterns over tool names.

    ``deny``: never runs. ``ask``: always asks (beats allow). ``allow``: when
    not ``None``, the only tools that may run at all; an empty tuple allows
    nothing (fail closed). ``autonomous``: runs without asking, unless the tool
    is in the residual or an ask rule names it.
    """

    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    allow: tuple[str, ...] | None = None
    autonomous: tuple[str, ...] = ()
    policy: Policy | None = None

    def __post_init__(self) -> None:
        # Entries with arguments (``run_shell(git status*)``) are policy rules; an ``allow``
        # entry with arguments is a policy allow, not an allowlist entry.
        def split(values: tuple[str, ...] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
            values = tuple(values or ())
            return (
                tuple(v for v in values if "(" not in v),
                tuple(v for v in values if "(" in v),
            )

        deny, deny_args = split(self.deny)
        ask, ask_args = split(self.ask)
        allow, allow_args = split(self.allow)
        combined = self.policy
        if deny_args or ask_args or allow_args:
            object.__setattr__(self, "deny", deny)
            object.__setattr__(self, "ask", ask)
            if self.allow is not None:
                # TOOL(SPEC) puts TOOL on the allowlist; its arguments are judged by the policy
                names = tuple(v.split("(", 1)[0].strip() for v in allow_args)
                object.__setattr__(self, "allow", allow + names)
            extra = Policy.from_strings(deny=deny_args, ask=ask_args, allow=allow_args)
            combined = extra if combined is None else combined + extra
            # kept in ``policy`` itself, so dataclasses.replace(rules, …) carries them along
            object.__setattr__(self, "policy", combined)

    @property
    def effective_policy(self) -> Policy | None:
        """The policy rules in force (``policy``, which includes the TOOL(SPEC) entries)."""
        return self.policy


@final
@dataclass(frozen=True)
class Decision:
    """A verdict and the rule that produced it. Only the Gate makes these."""

    verdict: Verdict
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


def _first_match(name: str, patterns: tuple[str, ...]) -> str | None:
    if not patterns:  # the common case: no generator to build
        return None
    return next((p for p in patterns if fnmatchcase(name, p)), None)


@functools.cache
def _posture_decision(posture: Posture, consequence: Consequence) -> Decision:
    """The posture's own decision for a consequence: a frozen value, built once."""
    if consequence in _POSTURE_ALLOWS[posture]:
        return Decision(
            Verdict.ALLOW,
            f"posture:{posture.value}",
            f"posture {posture.value} runs {consequence.value} tools without asking",
        )
    return Decision(
        Verdict.ASK,
        f"posture:{posture.value}",
        f"posture {posture.value} asks before {consequence.value} tools",
    )


def _from_policy(name: str, pv: PolicyVerdict) -> Decision:
    verdict = Verdict(pv.effect.value) if pv.effect is not None else Verdict.ASK
    rule = pv.rule
    if rule is None:
        label = f"{verdict.value}:shell-unresolved"
    elif rule.effect.value != verdict.value:  # a deny rule a computed word could match: ask
        label = f"{verdict.value}:could-match:{rule.label()}"
    else:
        label = rule.label()
    return Decision(
        verdict,
        label,
        f"{name}: {pv.reason}",
        source=rule.source if rule is not None else "",
        layer=rule.layer if rule is not None else "",
    )


def evaluate_policy(
    spec: ToolSpec, rules: Rules, arguments: Mapping[str, Any] | None
) -> PolicyVerdict | None:
    """What the policy rules alone say about a call (None: no rule applies); a tool that
    checks every exec against the deny rules (``spec.exec_checked``) is judged so."""
    policy = rules.effective_policy
    if policy is None or not isinstance(arguments, Mapping):
        return None
    return policy.evaluate(spec.name, arguments, spec.meta, exec_checked=spec.exec_checked)


def decide(
    spec: ToolSpec,
    posture: Posture,
    rules: Rules,
    arguments: Mapping[str, Any] | None = None,
) -> Decision:
    """Decide one call from the tool's declaration, the posture, the rules and the arguments.

    Without ``arguments`` only rules over names apply (rules with argument
    matchers cannot be judged and are skipped, and so are tool-wide policy
    rules: pass the arguments).
    """
    name = spec.name
    if (p := _first_match(name, rules.deny)) is not None:
        return Decision(Verdict.DENY, f"deny:{p}", f"{name} is denied by the rule {p!r}")
    if rules.allow is not None and _first_match(name, rules.allow) is None:
        return Decision(
            Verdict.DENY, "allowlist", f"{name} is not in the allowlist of tools that may run"
        )
    pv = evaluate_policy(spec, rules, arguments)
    if pv is not None and pv.effect is Effect.DENY:
        return _from_policy(name, pv)
    if (p := _first_match(name, rules.ask)) is not None:
        return Decision(Verdict.ASK, f"ask:{p}", f"{name} asks first by the rule {p!r}")
    if pv is not None and pv.effect is Effect.ASK:
        return _from_policy(name, pv)
    if posture is Posture.UNRESTRICTED:
        return Decision(Verdict.ALLOW, "posture:unrestricted", "the session is unrestricted")
    if pv is not None and pv.effect is Effect.ALLOW:
        return _from_policy(name, pv)
    if spec.residual:
        return Decision(
            Verdict.ASK,
            "residual",
            f"{name} asks first under every posture short of unrestricted",
        )
    if (p := _first_match(name, rules.autonomous)) is not None:
        return Decision(Verdict.ALLOW, f"autonomous:{p}", f"{name} is autonomous by {p!r}")
    return _posture_decision(posture, spec.consequence)
