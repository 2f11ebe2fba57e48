"""One policy model: one ordered Effect, name globs as rules, decide() = the strongest rule, else
the posture; checked against the ten-step order it replaced on a grid of calls."""

from __future__ import annotations

import ast
import dataclasses
import itertools
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import shell_corpus

import ringfence.mcp_host as mcp_host
from ringfence.runtime import (
    Consequence,
    Effect,
    InvalidArguments,
    Policy,
    Posture,
    Rules,
    ToolSpec,
    Verdict,
)
from ringfence.runtime.policy._decide import Decision, decide, evaluate_policy
from ringfence.runtime.policy._judge import PolicyVerdict

POLICY_DIR = Path(__file__).parents[2] / "ringfence" / "runtime" / "policy"


def test_one_effect_ordered_so_the_strongest_wins_with_max() -> None:
    assert Verdict is Effect and mcp_host.Policy is Effect
    assert Effect.DENY > Effect.ASK > Effect.ALLOW
    assert max(Effect.ALLOW, Effect.DENY, Effect.ASK) is Effect.DENY
    assert sorted([Effect.DENY, Effect.ALLOW, Effect.ASK]) == [
        Effect.ALLOW,
        Effect.ASK,
        Effect.DENY,
    ]
    assert [e.value for e in Effect] == ["deny", "ask", "allow"]  # a policy file's keys, in order
    assert Effect("deny") is Effect.DENY and Effect.ASK == "ask"


def test_no_value_of_the_policy_is_rewritten_after_it_is_built() -> None:
    """No object.__setattr__ in runtime/policy; Rules' own form is its fixed point."""
    for path in sorted(POLICY_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "__setattr__":
                pytest.fail(f"{path.name}:{node.lineno} writes into a frozen value")
    rules = Rules(deny=["write_file(path=.env)", "x"], allow=["write_file(path=src/**)"])
    assert (rules.deny, rules.allow) == (("x",), ("write_file",))
    again = Rules(**{f.name: getattr(rules, f.name) for f in dataclasses.fields(rules)})
    assert again == rules == dataclasses.replace(rules)
    assert len(again.policy.rules) == 2  # the rules with arguments, once
    with pytest.raises(dataclasses.FrozenInstanceError):
        rules.deny = ()  # type: ignore[misc]


@pytest.mark.parametrize("key", ["deny", "ask", "allow", "autonomous"])
def test_one_string_for_a_tuple_of_rules_is_refused_naming_the_field(key: str) -> None:
    """``Rules(deny="run_shell")`` would be the globs r, u, n, …: a deny that denies nothing."""
    with pytest.raises(InvalidArguments) as caught:
        Rules(**{key: "run_shell"})
    assert caught.value.field == key


# -- the order decide() replaced, as it was written: the oracle --------------------------


def _first(name: str, patterns: tuple[str, ...]) -> str | None:
    return next((p for p in patterns if fnmatchcase(name, p)), None)


def _old_from_policy(name: str, pv: PolicyVerdict) -> Decision:
    verdict = Verdict(pv.effect.value) if pv.effect is not None else Verdict.ASK
    rule = pv.rule
    if rule is None:
        label = f"{verdict.value}:shell-unresolved"
    elif rule.effect.value != verdict.value:
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


_ALLOWS = {
    Posture.ASK: {Consequence.READ},
    Posture.ALLOW_REVERSIBLE: {Consequence.READ, Consequence.REVERSIBLE},
    Posture.ALLOW_ALL: set(Consequence),
    Posture.UNRESTRICTED: set(Consequence),
}


def _old_decide(
    spec: ToolSpec, posture: Posture, rules: Rules, arguments: Mapping[str, Any] | None
) -> Decision:
    """name deny → allowlist → policy deny → name ask → policy ask → unrestricted →
    policy allow → residual → autonomous → posture (the first answer wins)."""
    name = spec.name
    if (p := _first(name, rules.deny)) is not None:
        return Decision(Verdict.DENY, f"deny:{p}", f"{name} is denied by the rule {p!r}")
    if rules.allow is not None and _first(name, rules.allow) is None:
        return Decision(
            Verdict.DENY, "allowlist", f"{name} is not in the allowlist of tools that may run"
        )
    pv = evaluate_policy(spec, rules, arguments)
    if pv is not None and pv.effect is Effect.DENY:
        return _old_from_policy(name, pv)
    if (p := _first(name, rules.ask)) is not None:
        return Decision(Verdict.ASK, f"ask:{p}", f"{name} asks first by the rule {p!r}")
    if pv is not None and pv.effect is Effect.ASK:
        return _old_from_policy(name, pv)
    if posture is Posture.UNRESTRICTED:
        return Decision(Verdict.ALLOW, "posture:unrestricted", "the session is unrestricted")
    if pv is not None and pv.effect is Effect.ALLOW:
        return _old_from_policy(name, pv)
    if spec.residual:
        return Decision(
            Verdict.ASK, "residual", f"{name} asks first under every posture short of unrestricted"
        )
    if (p := _first(name, rules.autonomous)) is not None:
        return Decision(Verdict.ALLOW, f"autonomous:{p}", f"{name} is autonomous by {p!r}")
    verb = "runs" if spec.consequence in _ALLOWS[posture] else "asks before"
    tail = "tools without asking" if verb == "runs" else "tools"
    return Decision(
        Verdict.ALLOW if verb == "runs" else Verdict.ASK,
        f"posture:{posture.value}",
        f"posture {posture.value} {verb} {spec.consequence.value} {tail}",
    )


# -- the grid ---------------------------------------------------------------------------


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("not run")


def _spec(name: str, consequence: Consequence, **kw: Any) -> ToolSpec:
    return ToolSpec(name, "", {"type": "object"}, _never, consequence, **kw)


SPECS = [
    _spec("run_shell", Consequence.IRREVERSIBLE, residual=True),
    _spec("run_shell", Consequence.IRREVERSIBLE, residual=True, exec_checked=True),
    _spec("write_file", Consequence.REVERSIBLE),
    _spec("read_file", Consequence.READ),
    _spec("mcp.fs.write_file", Consequence.REVERSIBLE, meta={"path_arguments": ["location"]}),
    _spec("mcp.fs.read", Consequence.READ),
    _spec("launch", Consequence.IRREVERSIBLE),
]

POLICIES: list[Policy | None] = [
    None,
    Policy.from_strings(
        deny=[
            "run_shell(curl *)",
            "run_shell(rm -rf *)",
            "write_file(path=.env)",
            "mcp.fs.*(location=deploy/**)",
        ],
        ask=["run_shell(git push*)", "write_file(path=deploy/**)", "read_file"],
        allow=[
            "run_shell(git status*)",
            "run_shell(ls *)",
            "run_shell(echo *)",
            "write_file(path=src/**)",
            "launch(n=1..3)",
        ],
    ).with_roots(["/ws"]),
    Policy.from_strings(
        deny=list(shell_corpus.DENY),
        allow=list(shell_corpus.ALLOW),
        source="team.toml:3",
        layer="user",
    ).with_roots(["/ws"]),
    Policy.from_strings(allow=["run_shell", "mcp.fs.*"], ask=["run_shell(ls*)"], deny=["launch"]),
]

NAME_RULES: list[dict[str, Any]] = [
    {},
    {"deny": ("write_*",)},
    {"ask": ("run_*", "mcp.fs.*")},
    {"allow": ()},
    {"allow": ("mcp.fs.*", "read_file", "run_shell")},
    {"autonomous": ("*",)},
    {"autonomous": ("launch", "mcp.fs.write_file")},
    {
        "deny": ("launch",),
        "ask": ("write_file",),
        "autonomous": ("*",),
        "allow": ("write_file", "launch", "run_shell"),
    },
    {
        "deny": ("write_file(path=.env)",),
        "ask": ("read_file(path=secret/**)",),
        "allow": ("write_file(path=src/**)", "read_file"),
    },
]

COMMANDS = [
    "git status",
    "git status && curl x",
    "ls -la | grep x > out.txt",
    "echo $(cat .env)",
    "git push origin main",
    'eval "$X"',
    "rm -rf /",
    "",
] + [line.command for line in shell_corpus.CORPUS[::7]]

ARGUMENTS: list[dict[str, Any] | None] = [
    None,
    {},
    {"path": ".env"},
    {"path": "src/a.py"},
    {"path": "notes/../deploy/x"},
    {"path": "secret/k"},
    {"location": "deploy/app"},
    {"n": 2},
    {"n": 9},
    {"command": "ls", "env": {"X": "1"}},
    *({"command": c} for c in COMMANDS),
]


def _grid() -> list[tuple[ToolSpec, Rules]]:
    return [
        (spec, Rules(policy=policy, **names))
        for spec, policy, names in itertools.product(SPECS, POLICIES, NAME_RULES)
    ]


@pytest.mark.parametrize("posture", list(Posture))
def test_decide_agrees_with_the_ten_step_order_it_replaced(posture: Posture) -> None:
    checked = 0
    for spec, rules in _grid():
        for arguments in ARGUMENTS:
            new = decide(spec, posture, rules, arguments)
            old = _old_decide(spec, posture, rules, arguments)
            assert new == old, (spec.name, rules, arguments)
            checked += 1
    assert checked > 5000
