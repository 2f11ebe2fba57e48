"""Approvers and session grants keyed on the normalized call."""

from __future__ import annotations

import io

from runtime_helpers import Ledger, register_standard_tools

from ringfence.runtime import (
    ApprovalAnswer,
    Choice,
    Denied,
    HeadlessDenyApprover,
    Kernel,
    Posture,
    ScriptedApprover,
    TerminalApprover,
)


async def test_once_asks_again_every_time(ledger: Ledger) -> None:
    approver = ScriptedApprover([ApprovalAnswer.once(), ApprovalAnswer.once()])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("launch", {"x": "a"})).ok
        assert (await kernel.invoke("launch", {"x": "a"})).ok
    assert len(approver.requests) == 2
    assert ledger.names() == ["launch", "launch"]


async def test_session_grant_matches_equivalent_call_only(ledger: Ledger) -> None:
    approver = ScriptedApprover([ApprovalAnswer.session(), ApprovalAnswer.deny()])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        first = await kernel.invoke("launch", {"x": "a", "n": 1})
        # Same call, arguments in another order: the normalized call is equal, no question.
        again = await kernel.invoke("launch", {"n": 1, "x": "a"})
        # A different argument value is a different call: asked, and denied.
        other = await kernel.invoke("launch", {"x": "b", "n": 1})
        # Same arguments, another tool: not covered either.
        other_tool = await kernel.invoke("touch", {"x": "a", "n": 1})
    assert first.ok and again.ok
    assert again.decision is not None and again.decision.rule == "grant:session"
    assert isinstance(other.error, Denied)
    assert isinstance(other_tool.error, Denied)
    assert [r.arguments for r in approver.requests] == [
        {"x": "a", "n": 1},
        {"x": "b", "n": 1},
        {"x": "a", "n": 1},
    ]
    assert ledger.names() == ["launch", "launch"]


async def test_pattern_grant(ledger: Ledger) -> None:
    approver = ScriptedApprover([ApprovalAnswer.session(pattern={"x": "src/*"})])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("launch", {"x": "src/a.py"})).ok
        assert (await kernel.invoke("launch", {"x": "src/b.py"})).ok
        assert not (await kernel.invoke("launch", {"x": "etc/passwd"})).ok
        assert not (await kernel.invoke("launch", {"n": 3})).ok  # the pattern's key is absent
    assert len(approver.requests) == 3


async def test_headless_denies_with_reason(ledger: Ledger) -> None:
    async with Kernel(approver=HeadlessDenyApprover()) as kernel:
        register_standard_tools(kernel, ledger)
        outcome = await kernel.invoke("launch", {})
    assert isinstance(outcome.error, Denied)
    assert "headless" in outcome.error.message
    assert "asks before irreversible" in outcome.error.message
    assert ledger.runs == []


async def test_terminal_prompt_once_session_deny(ledger: Ledger) -> None:
    stdin = io.StringIO("maybe\ns\nd\n")
    out = io.StringIO()
    async with Kernel(approver=TerminalApprover(stdin, out), posture=Posture.ASK) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("touch", {"x": "1"})).ok  # "maybe" re-asked, then session
        assert (await kernel.invoke("touch", {"x": "1"})).ok  # granted, not asked
        assert not (await kernel.invoke("touch", {"x": "2"})).ok  # d
        assert not (await kernel.invoke("touch", {"x": "3"})).ok  # end of input denies
    text = out.getvalue()
    assert text.count("ringfence asks: touch") == 4  # once re-asked + x=2 + x=3
    assert "please answer" in text
    assert ledger.names() == ["touch", "touch"]


async def test_scripted_callable_sees_redacted_arguments(ledger: Ledger) -> None:
    approver = ScriptedApprover(lambda r: ApprovalAnswer(Choice.ONCE))
    async with Kernel(approver=approver, secrets=["hunter2-secret"]) as kernel:
        register_standard_tools(kernel, ledger)
        await kernel.invoke("launch", {"x": "pw=hunter2-secret"})
    assert approver.requests[0].arguments == {"x": "pw=[REDACTED SECRET]"}
    assert ledger.runs == [("launch", {"x": "pw=hunter2-secret"})]
