"""Nothing changes the Gate from outside: owned rule sources, an audited approver,
read-only posture/rules/approver, a narrow executor context, and an architecture
check that no code outside ringfence/runtime assigns to what decides."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import Ledger, register_standard_tools

from ringfence.runtime import (
    ApprovalAnswer,
    CallContext,
    Consequence,
    Denied,
    HeadlessDenyApprover,
    Kernel,
    MemorySink,
    Posture,
    Rules,
    ScriptedApprover,
    ToolSpec,
)

PACKAGE = Path(__file__).resolve().parents[2] / "ringfence"
# What decides a call: only ringfence/runtime may assign these on anything.
DECIDING = frozenset(
    {"rules", "approver", "posture", "_rules", "_approver", "_posture", "_rule_sources"}
)


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr in DECIDING:
                    out.append(f"{path}:{t.lineno} assigns .{t.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in DECIDING
        ):
            out.append(f"{path}:{node.lineno} {node.func.id}(…, {node.args[1].value!r})")
        # An executor's context is not the kernel, and the Gate's grants and keys are its own.
        if isinstance(node, ast.Attribute) and node.attr in ("_kernel", "_grants", "_authority"):
            out.append(f"{path}:{node.lineno} reaches .{node.attr}")
    return out


def test_no_code_outside_runtime_assigns_to_what_decides() -> None:
    files = [p for p in PACKAGE.rglob("*.py") if "runtime" not in p.relative_to(PACKAGE).parts]
    assert len(files) > 50  # the scan sees the package
    offences = [o for p in files for o in _offences(p)]
    assert offences == []


def test_the_architecture_check_catches_an_offence(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(kernel, ctx):\n    kernel.rules = None\n    setattr(kernel, 'approver', 1)\n"
        "    ctx._kernel.set_posture('unrestricted')\n"
    )
    assert len(_offences(bad)) == 3


async def test_posture_rules_and_approver_are_read_only(ledger: Ledger) -> None:
    async with Kernel() as kernel:
        register_standard_tools(kernel, ledger)
        for name, value in [
            ("rules", Rules()),
            ("approver", ScriptedApprover(lambda r: ApprovalAnswer.once())),
            ("posture", Posture.UNRESTRICTED),
        ]:
            with pytest.raises(AttributeError):
                setattr(kernel, name, value)
        outcome = await kernel.invoke("launch", {})
    assert isinstance(outcome.error, Denied) and ledger.runs == []


async def test_set_approver_is_audited(ledger: Ledger) -> None:
    sink = MemorySink()
    async with Kernel(events_sink=sink) as kernel:
        register_standard_tools(kernel, ledger)
        kernel.set_approver(ScriptedApprover(lambda r: ApprovalAnswer.once()), reason="test")
        assert (await kernel.invoke("launch", {})).ok
    (changed,) = [r for r in sink.records() if r["kind"] == "approver_changed"]
    assert changed["old"] == "HeadlessDenyApprover" and changed["new"] == "ScriptedApprover"
    assert changed["reason"] == "test"


async def test_rule_sources_are_owned_merged_and_recorded(ledger: Ledger) -> None:
    sink = MemorySink()
    async with Kernel(posture=Posture.ALLOW_ALL, events_sink=sink) as kernel:
        register_standard_tools(kernel, ledger)
        handle = kernel.add_rules("policy-file", Rules(deny=("launch",)))
        with pytest.raises(ValueError, match="already registered"):
            kernel.add_rules("policy-file", Rules())
        allow = kernel.add_rules("a", Rules(allow=("peek", "launch")))
        with pytest.raises(ValueError, match="allowlist"):  # two cannot merge without widening
            kernel.add_rules("b", Rules(allow=("touch",)))
        assert kernel.rules.deny == ("launch",)
        assert set(kernel.rule_sources()) == {"session", "policy-file", "a"}
        denied = await kernel.invoke("launch", {})
        handle.remove()
        allowed = await kernel.invoke("launch", {})
        allow.remove()
        assert "launch" not in kernel.rules.deny
    assert isinstance(denied.error, Denied) and denied.decision.rule == "deny:launch"
    assert allowed.ok and ledger.names() == ["launch"]
    changes = [(r["source"], r["removed"]) for r in sink.records() if r["kind"] == "rules_changed"]
    assert changes == [("policy-file", False), ("a", False), ("policy-file", True), ("a", True)]


async def test_an_executor_gets_a_narrow_context_not_the_kernel(ledger: Ledger) -> None:
    seen: dict[str, Any] = {}

    async def sneaky(args: dict[str, Any], ctx: CallContext) -> str:
        seen["has_kernel"] = hasattr(ctx, "kernel")
        seen["public"] = sorted(n for n in dir(ctx) if not n.startswith("_"))
        # A nested call re-enters the Gate as this call's child, in its trace.
        outcome = await ctx.invoke("launch", {"x": "nested"})
        seen["nested"] = (outcome.ok, outcome.trace_id == ctx.trace_id)
        return "done"

    sink = MemorySink()
    async with Kernel(approver=HeadlessDenyApprover(), events_sink=sink) as kernel:
        register_standard_tools(kernel, ledger)
        kernel.register(ToolSpec("sneaky", "s", {"type": "object"}, sneaky, Consequence.READ))
        assert (await kernel.invoke("sneaky", {})).ok
        with pytest.raises(TypeError, match="no public constructor"):
            CallContext(kernel, kernel.registry.get("peek"), "c", "t", "direct")
    assert seen["has_kernel"] is False
    assert "set_posture" not in seen["public"] and "approver" not in seen["public"]
    assert seen["nested"] == (False, True)  # asked under ask, headless: denied
    (proposed,) = [r for r in sink.records() if r["kind"] == "proposed" and r["tool"] == "launch"]
    assert proposed["origin"] == "nested" and proposed["parent_id"] is not None
    assert ledger.runs == []


async def test_requests_take_the_gates_road_under_a_name_no_agent_can_call(
    tmp_path: Path, ledger: Ledger
) -> None:
    async def answer(args: dict[str, Any], ctx: CallContext) -> str:
        ledger.runs.append(("server.__request", args))
        return "answered"

    request = ToolSpec("srv.__request", "r", {"type": "object"}, answer, Consequence.IRREVERSIBLE)
    sink = MemorySink()
    approver = ScriptedApprover(lambda r: ApprovalAnswer.once())
    async with Kernel(approver=approver, events_sink=sink) as kernel:
        register_standard_tools(kernel, ledger)
        by_name = await kernel.invoke("srv.__request", {})
        asked = await kernel.invoke_request(request, {}, origin="mcp-sampling")
        with pytest.raises(ValueError, match="registered tool"):
            await kernel.invoke_request(kernel.registry.get("launch"), {}, origin="x")
    assert by_name.error is not None and by_name.error.code == "not_found"
    assert asked.ok and [r.tool for r in approver.requests] == ["srv.__request"]
    # A dry run cannot stage a server's request (nothing could apply it later): refused.
    async with Kernel(
        posture=Posture.ALLOW_ALL, dry_run=True, plan_path=tmp_path / "plan.json"
    ) as kernel:
        staged = await kernel.invoke_request(request, {}, origin="mcp-sampling")
    assert isinstance(staged.error, Denied) and "dry run" in staged.error.message
    assert not (tmp_path / "plan.json").exists()
    assert ledger.runs == [("server.__request", {})]
