"""The decision function: deny rules > ask > allow.

:func:`decide` is the only place a verdict is computed. Every path into a
tool (direct, script, MCP client) reaches it through ``Kernel.invoke``, so the
same call gets the same decision whichever way it arrives.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import final

from ._errors import InvalidArguments
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


@final
@dataclass(frozen=True)
class Decision:
    """A verdict and the rule that produced it. Only the Gate makes these."""

    verdict: Verdict
    rule: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict.value, "rule": self.rule, "reason": self.reason}


def _first_match(name: str, patterns: tuple[str, ...]) -> str | None:
    return next((p for p in patterns if fnmatchcase(name, p)), None)


def decide(spec: ToolSpec, posture: Posture, rules: Rules) -> Decision:
    """Decide one call from the tool's declaration, the posture and the rules."""
    name = spec.name
    if (p := _first_match(name, rules.deny)) is not None:
        return Decision(Verdict.DENY, f"deny:{p}", f"{name} is denied by the rule {p!r}")
    if rules.allow is not None and _first_match(name, rules.allow) is None:
        return Decision(
            Verdict.DENY, "allowlist", f"{name} is not in the allowlist of tools that may run"
        )
    if (p := _first_match(name, rules.ask)) is not None:
        return Decision(Verdict.ASK, f"ask:{p}", f"{name} asks first by the rule {p!r}")
    if posture is Posture.UNRESTRICTED:
        return Decision(Verdict.ALLOW, "posture:unrestricted", "the session is unrestricted")
    if spec.residual:
        return Decision(
            Verdict.ASK,
            "residual",
            f"{name} asks first under every posture short of unrestricted",
        )
    if (p := _first_match(name, rules.autonomous)) is not None:
        return Decision(Verdict.ALLOW, f"autonomous:{p}", f"{name} is autonomous by {p!r}")
    if spec.consequence in _POSTURE_ALLOWS[posture]:
        return Decision(
            Verdict.ALLOW,
            f"posture:{posture.value}",
            f"posture {posture.value} runs {spec.consequence.value} tools without asking",
        )
    return Decision(
        Verdict.ASK,
        f"posture:{posture.value}",
        f"posture {posture.value} asks before {spec.consequence.value} tools",
    )
