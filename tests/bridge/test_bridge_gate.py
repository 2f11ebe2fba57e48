"""Every call_tool passes the same Gate as a direct call: decisions, denials, approvals, dry run."""

from __future__ import annotations

import pytest
import trio
from bridge_helpers import TOOLS, Ledger, events, kinds, register_tools, run

from ringfence.bridge import register_script_tool
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import (
    ApprovalAnswer,
    ApprovalRequest,
    Kernel,
    Posture,
    Rules,
    ScriptedApprover,
)
from ringfence.runtime._plan import Plan

ALL_CALLS = "\n".join(
    f"""
try:
    call_tool({t!r}, x="same")
except ToolError as e:
    pass"""
    for t in TOOLS
)


def gate_decisions(kernel: Kernel, origin: str) -> list[tuple[str, dict]]:
    """(tool, first verdict of the Gate) for each call from ``origin``, from the event stream."""
    proposed = {e["call_id"]: e for e in kinds(kernel, "proposed") if e["origin"] == origin}
    return [
        (e["tool"], {k: e[k] for k in ("verdict", "rule", "reason")})
        for e in kinds(kernel, "decided")
        if e["call_id"] in proposed
    ]


@pytest.mark.parametrize("answer", ["once", "deny"])
@pytest.mark.parametrize("posture", list(Posture))
async def test_same_decision_direct_and_from_a_script(
    posture: Posture, answer: str, ledger: Ledger
) -> None:
    approver = ScriptedApprover(
        lambda r: ApprovalAnswer.once() if answer == "once" else ApprovalAnswer.deny()
    )
    async with Kernel(posture=posture, approver=approver) as kernel:
        register_tools(kernel, ledger)
        direct = [await kernel.invoke(t, {"x": "same"}) for t in TOOLS]
        result = await run(kernel, ALL_CALLS)
    assert result.status == "ok", result
    assert [c["tool"] for c in result.calls] == list(TOOLS)
    # The final decision (after any approval) and whether the call ran are the same.
    for outcome, call in zip(direct, result.calls, strict=True):
        assert call["decision"] == outcome.decision.to_dict(), call["tool"]
        assert call["ok"] is outcome.ok
    # So is the Gate's first verdict, as written to the event stream.
    assert gate_decisions(kernel, "script") == gate_decisions(kernel, "direct")
    # Each tool that ran, ran once per path.
    assert sorted(ledger.names()) == sorted([o.tool for o in direct if o.ok] * 2)


async def test_deny_rules_apply_to_script_calls(ledger: Ledger) -> None:
    rules = Rules(deny=("launch",))
    async with Kernel(posture=Posture.UNRESTRICTED, rules=rules) as kernel:
        register_tools(kernel, ledger)
        direct = await kernel.invoke("launch", {})
        result = await run(kernel, ALL_CALLS)
    launch = next(c for c in result.calls if c["tool"] == "launch")
    assert launch["decision"] == direct.decision.to_dict()
    assert launch["decision"]["rule"] == "deny:launch"
    assert "launch" not in ledger.names()


async def test_a_denied_call_raises_and_the_script_continues(ledger: Ledger) -> None:
    script = """
log = []
try:
    call_tool("launch", x="rocket")
    log.append("launched")
except ToolError as e:
    log.append(e.code)
    print("refused:", e.code, e.decision["rule"], e.tool)
log.append(call_tool("peek", x="after")["tool"])
result = log
"""
    async with Kernel(posture=Posture.ASK) as kernel:  # headless: asking means no
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "ok"
    assert result.result == ["denied", "peek"]
    assert result.output == "refused: denied approver:posture:ask launch\n"
    assert ledger.names() == ["peek"]
    assert [(c["tool"], c["ok"]) for c in result.calls] == [("launch", False), ("peek", True)]


async def test_an_uncaught_refusal_ends_the_script_with_its_line(ledger: Ledger) -> None:
    script = 'call_tool("peek")\n\ncall_tool("launch")\ncall_tool("peek")\n'
    async with Kernel(posture=Posture.ASK) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "error"
    assert result.error["type"] == "ToolError"
    assert result.error["code"] == "denied"
    assert result.error["line"] == 3
    assert 'call_tool("launch")' in result.error["traceback"]
    assert ledger.names() == ["peek"]  # nothing after the failure ran


async def test_each_call_is_asked_about_individually_with_its_origin(ledger: Ledger) -> None:
    answers = iter([ApprovalAnswer.once(), ApprovalAnswer.deny(), ApprovalAnswer.once()])
    approver = ScriptedApprover(lambda r: next(answers))
    script = """
out = []
for i in range(3):
    try:
        call_tool("touch", n=i)
        out.append("ran")
    except ToolError as e:
        out.append(e.code)
result = out
"""
    async with Kernel(posture=Posture.ASK, approver=approver) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.result == ["ran", "denied", "ran"]
    assert [(r.tool, dict(r.arguments), r.origin) for r in approver.requests] == [
        ("touch", {"n": i}, "script") for i in range(3)
    ]
    assert ledger.runs == [("touch", {"n": 0}), ("touch", {"n": 2})]


async def test_calls_carry_the_scripts_trace_and_parent(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.ASK) as kernel:
        register_tools(kernel, ledger)
        await run(kernel, 'call_tool("peek")\ncall_tool("peek")')
    proposed = [e for e in kinds(kernel, "proposed") if e["origin"] == "script"]
    assert len(proposed) == 2
    assert {(e["trace_id"], e["parent_id"]) for e in proposed} == {("trace-test", "parent-test")}
    assert all(
        e["trace_id"] == "trace-test"
        for e in events(kernel)
        if e.get("call_id") in {p["call_id"] for p in proposed}
    )


async def test_the_timeout_clock_stops_while_a_person_is_asked(ledger: Ledger) -> None:
    class SlowPerson:
        async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
            await trio.sleep(2.5)  # longer than the script's whole timeout
            return ApprovalAnswer.once("took a while")

    async with Kernel(posture=Posture.ASK, approver=SlowPerson()) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, 'result = call_tool("touch", x="slow")["tool"]', timeout=1.5)
    assert result.status == "ok", result.error
    assert result.result == "touch"
    assert kinds(kernel, "script_finished")[-1]["paused_seconds"] >= 2.4


async def test_the_timeout_still_applies_outside_of_asking(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.ALLOW_ALL) as kernel:
        register_tools(kernel, ledger)
        result = await run(
            kernel, 'call_tool("touch")\nprint("looping")\nwhile True:\n    pass', timeout=1
        )
    assert result.status == "timeout"
    assert result.output == "looping\n"
    assert ledger.names() == ["touch"]


async def test_dry_run_stages_changes_runs_reads_and_the_plan_applies_exactly_them(
    tmp_path, ledger: Ledger
) -> None:
    plan_path = tmp_path / "plan.json"
    script = """
seen = call_tool("peek", x="config")
a = call_tool("touch", x="a")
b = call_tool("launch", x="b", n=2)
result = {"peek": seen["tool"], "touch_staged": a["staged"], "launch_staged": b["staged"]}
"""
    approver = ScriptedApprover(lambda r: ApprovalAnswer.once())
    async with Kernel(
        posture=Posture.ASK, approver=approver, dry_run=True, plan_path=plan_path
    ) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script, "timeout_seconds": 20})
    assert outcome.ok, outcome.error
    assert not outcome.staged  # the script itself ran: it has no effect of its own
    assert outcome.value["result"] == {"peek": "peek", "touch_staged": True, "launch_staged": True}
    assert ledger.runs == [("peek", {"x": "config"})]  # only the read ran
    # The staged calls were not asked about (staging grants nothing); the script was.
    assert [r.tool for r in approver.requests] == [SCRIPT_TOOL]

    plan = Plan.load(plan_path)
    assert [(c.tool, c.arguments, c.origin) for c in plan.calls] == [
        ("touch", {"x": "a"}, "script"),
        ("launch", {"x": "b", "n": 2}, "script"),
    ]
    ledger.runs.clear()
    async with Kernel(posture=Posture.ALLOW_ALL) as kernel:
        register_tools(kernel, ledger)
        # Staged under ask, applied under allow-all: looser, so it must be said explicitly.
        applied = await kernel.apply_plan(plan, allow_looser_posture=True)
    assert all(o.ok for o in applied)
    assert ledger.runs == [("touch", {"x": "a"}), ("launch", {"x": "b", "n": 2})]
