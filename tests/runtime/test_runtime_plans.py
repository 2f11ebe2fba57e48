"""Dry runs stage exactly the non-read calls; applying a plan re-gates every call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_helpers import Ledger, register_standard_tools

from ringfence.runtime import (
    ApprovalAnswer,
    Denied,
    InvalidArguments,
    Kernel,
    Plan,
    Posture,
    Rules,
    ScriptedApprover,
)


async def stage_session(plan_path: Path, ledger: Ledger, posture: Posture = Posture.ASK) -> list:
    approver = ScriptedApprover([])  # a dry run never asks: asking happens when applying
    async with Kernel(
        posture=posture, approver=approver, dry_run=True, plan_path=plan_path
    ) as kernel:
        register_standard_tools(kernel, ledger)
        outcomes = [
            await kernel.invoke("peek", {"x": "1"}),
            await kernel.invoke("touch", {"x": "2"}),
            await kernel.invoke("launch", {"x": "3"}),
            await kernel.invoke("run_shell", {"x": "4"}),
        ]
    assert approver.requests == []
    return outcomes


@pytest.mark.parametrize("posture", [Posture.ASK, Posture.ALLOW_ALL])
async def test_dry_run_stages_exactly_the_non_read_calls(
    tmp_path: Path, ledger: Ledger, posture: Posture
) -> None:
    plan_path = tmp_path / "plan.json"
    outcomes = await stage_session(plan_path, ledger, posture)
    assert [o.staged for o in outcomes] == [False, True, True, True]
    assert ledger.names() == ["peek"]  # only the read ran
    assert outcomes[2].value["staged"] is True and "launch" in outcomes[2].value["message"]
    plan = Plan.load(plan_path)
    assert [(c.tool, c.arguments) for c in plan.calls] == [
        ("touch", {"x": "2"}),
        ("launch", {"x": "3"}),
        ("run_shell", {"x": "4"}),
    ]


async def test_denied_call_is_not_staged(tmp_path: Path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    async with Kernel(dry_run=True, plan_path=plan_path, rules=Rules(deny=("launch",))) as kernel:
        register_standard_tools(kernel, ledger)
        outcome = await kernel.invoke("launch", {})
    assert isinstance(outcome.error, Denied)
    assert not plan_path.exists()


async def test_apply_regates_and_runs_exactly_the_staged_calls(
    tmp_path: Path, ledger: Ledger
) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)
    ledger.runs.clear()
    approver = ScriptedApprover([ApprovalAnswer.once()] * 3)
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        outcomes = await kernel.apply_plan(Plan.load(plan_path))
    assert all(o.ok for o in outcomes)
    assert [r.tool for r in approver.requests] == ["touch", "launch", "run_shell"]
    assert ledger.runs == [("touch", {"x": "2"}), ("launch", {"x": "3"}), ("run_shell", {"x": "4"})]


async def test_apply_stops_at_first_refusal(tmp_path: Path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)
    ledger.runs.clear()
    approver = ScriptedApprover([ApprovalAnswer.once(), ApprovalAnswer.deny()])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        outcomes = await kernel.apply_plan(Plan.load(plan_path))
    assert [o.ok for o in outcomes] == [True, False]
    assert ledger.names() == ["touch"]


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["calls"][1]["arguments"].update(x="rm -rf /"),
        lambda d: d["calls"].append(dict(d["calls"][0], tool="launch")),
        lambda d: d["calls"].pop(0),
        lambda d: d.update(mac="0" * 64),
    ],
)
async def test_edited_plan_is_refused(tmp_path: Path, ledger: Ledger, edit) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)
    data = json.loads(plan_path.read_text())
    edit(data)
    plan_path.write_text(json.dumps(data))
    with pytest.raises(InvalidArguments, match="edited after staging"):
        Plan.load(plan_path)


def test_malformed_plan_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidArguments, match=r"bad\.json is not a JSON plan"):
        Plan.load(bad)
    with pytest.raises(InvalidArguments, match="no plan file"):
        Plan.load(tmp_path / "missing.json")
