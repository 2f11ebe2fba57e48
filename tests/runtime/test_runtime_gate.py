"""The decision function: deny > ask > allow, every posture, rules, residual."""

from __future__ import annotations

import pytest
from runtime_helpers import Ledger, make_tool, register_standard_tools

from ringfence.runtime import (
    ApprovalAnswer,
    Consequence,
    Denied,
    InvalidArguments,
    Kernel,
    NotFound,
    Posture,
    Rules,
    ScriptedApprover,
    Verdict,
)
from ringfence.runtime.policy._decide import decide

# posture → verdict for (read, reversible, irreversible, residual)
POSTURE_TABLE = {
    Posture.ASK: ("allow", "ask", "ask", "ask"),
    Posture.ALLOW_REVERSIBLE: ("allow", "allow", "ask", "ask"),
    Posture.ALLOW_ALL: ("allow", "allow", "allow", "ask"),
    Posture.UNRESTRICTED: ("allow", "allow", "allow", "allow"),
}
TOOLS = ("peek", "touch", "launch", "run_shell")


@pytest.mark.parametrize("posture", list(Posture))
def test_posture_table(posture: Posture, ledger: Ledger) -> None:
    kernel = Kernel(posture=posture)
    register_standard_tools(kernel, ledger)
    got = tuple(decide(kernel.registry.get(t), posture, Rules()).verdict.value for t in TOOLS)
    assert got == POSTURE_TABLE[posture]


@pytest.mark.parametrize("posture", list(Posture))
async def test_posture_table_end_to_end(posture: Posture, ledger: Ledger) -> None:
    """Through invoke: 'ask' verdicts reach the approver (which denies), 'allow' ones run."""
    approver = ScriptedApprover(lambda r: ApprovalAnswer.deny())
    async with Kernel(posture=posture, approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        for tool, expected in zip(TOOLS, POSTURE_TABLE[posture], strict=True):
            outcome = await kernel.invoke(tool, {})
            assert outcome.ok is (expected == "allow"), tool
    asked = [r.tool for r in approver.requests]
    assert asked == [t for t, v in zip(TOOLS, POSTURE_TABLE[posture], strict=True) if v == "ask"]
    assert ledger.names() == [
        t for t, v in zip(TOOLS, POSTURE_TABLE[posture], strict=True) if v == "allow"
    ]


def test_deny_beats_allow_and_autonomous(ledger: Ledger) -> None:
    spec = make_tool("mcp.fs.write_file", Consequence.REVERSIBLE, ledger)
    rules = Rules(deny=("mcp.fs.write_*",), allow=("mcp.fs.*",), autonomous=("mcp.fs.*",))
    for posture in Posture:
        decision = decide(spec, posture, rules)
        assert decision.verdict is Verdict.DENY
        assert decision.rule == "deny:mcp.fs.write_*"


def test_ask_rule_beats_autonomous_and_posture(ledger: Ledger) -> None:
    spec = make_tool("peek", Consequence.READ, ledger)
    decision = decide(spec, Posture.ALLOW_ALL, Rules(ask=("pe*",), autonomous=("peek",)))
    assert (decision.verdict, decision.rule) == (Verdict.ASK, "ask:pe*")


def test_autonomous_allows_but_not_residual(ledger: Ledger) -> None:
    launch = make_tool("launch", Consequence.IRREVERSIBLE, ledger)
    shell = make_tool("run_shell", Consequence.IRREVERSIBLE, ledger, residual=True)
    rules = Rules(autonomous=("*",))
    assert decide(launch, Posture.ASK, rules).rule == "autonomous:*"
    assert decide(shell, Posture.ALLOW_ALL, rules).rule == "residual"


def test_allowlist_fails_closed(ledger: Ledger) -> None:
    spec = make_tool("peek", Consequence.READ, ledger)
    assert decide(spec, Posture.UNRESTRICTED, Rules(allow=())).verdict is Verdict.DENY
    assert decide(spec, Posture.ASK, Rules(allow=("peek",))).verdict is Verdict.ALLOW


async def test_denied_call_never_runs_and_carries_rule(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED, rules=Rules(deny=("launch",))) as kernel:
        register_standard_tools(kernel, ledger)
        outcome = await kernel.invoke("launch", {})
    assert isinstance(outcome.error, Denied)
    assert outcome.decision is not None and outcome.decision.rule == "deny:launch"
    assert ledger.runs == []


async def test_invalid_arguments_name_the_field_and_nothing_runs(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_standard_tools(kernel, ledger)
        bad_type = await kernel.invoke("launch", {"n": "three"})
        extra = await kernel.invoke("launch", {"x": "a", "zzz": 1})
        negative = await kernel.invoke("launch", {"n": -1})
        not_object = await kernel.invoke("launch", ["x"])  # type: ignore[arg-type]
        unknown = await kernel.invoke("nope", {})
    assert isinstance(bad_type.error, InvalidArguments) and bad_type.error.field == "n"
    assert isinstance(extra.error, InvalidArguments) and extra.error.field == "zzz"
    assert isinstance(negative.error, InvalidArguments) and negative.error.field == "n"
    assert isinstance(not_object.error, InvalidArguments) and not_object.error.field == "arguments"
    assert isinstance(unknown.error, NotFound)
    assert ledger.runs == []


async def test_unknown_posture_is_invalid_arguments() -> None:
    with pytest.raises(InvalidArguments) as info:
        Kernel(posture="yolo")
    assert info.value.field == "posture"


async def test_set_posture_applies_to_next_call(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.ASK) as kernel:
        register_standard_tools(kernel, ledger)
        assert not (await kernel.invoke("touch", {})).ok
        kernel.set_posture("allow-reversible")
        assert (await kernel.invoke("touch", {})).ok
    assert ledger.names() == ["touch"]
