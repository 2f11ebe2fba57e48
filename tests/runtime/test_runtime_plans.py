"""Dry runs stage exactly the non-read calls; applying a plan re-gates every call."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio
from cli_helpers import ringfence_process
from runtime_helpers import Ledger, register_standard_tools

from ringfence.runtime import (
    ApprovalAnswer,
    Denied,
    InvalidArguments,
    Kernel,
    Posture,
    Rules,
    ScriptedApprover,
)
from ringfence.runtime._plan import Plan


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


async def test_a_refused_call_is_not_spent_and_applying_again_runs_the_rest(
    tmp_path: Path, ledger: Ledger
) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)
    ledger.runs.clear()
    approver = ScriptedApprover([ApprovalAnswer.once(), ApprovalAnswer.deny()])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        assert [o.ok for o in await kernel.apply_plan(Plan.load(plan_path))] == [True, False]
    plan = Plan.load(plan_path)
    assert [plan.applied_mark(c.call_id) is not None for c in plan.calls] == [True, False, False]
    async with Kernel(approver=ScriptedApprover(lambda r: ApprovalAnswer.once())) as kernel:
        register_standard_tools(kernel, ledger)
        outcomes = await kernel.apply_plan(Plan.load(plan_path))
        assert [o.tool for o in outcomes] == ["launch", "run_shell"]
        with pytest.raises(Denied, match="already applied"):
            await kernel.apply_plan(Plan.load(plan_path))
    assert ledger.names() == ["touch", "launch", "run_shell"]  # each ran once


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


# -- plans that apply once, under their roots and posture (issue 13) ------------------------


def cli(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return ringfence_process(
        *args,
        cwd=cwd,
        env={"RINGFENCE_HOME": str(home)},
        unset=("RINGFENCE_WORKSPACE_ROOTS", "RINGFENCE_POSTURE"),
    )


async def test_staging_into_an_existing_plan_appends(tmp_path: Path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    for x in ("first", "second"):
        async with Kernel(dry_run=True, plan_path=plan_path) as kernel:
            register_standard_tools(kernel, ledger)
            assert (await kernel.invoke("touch", {"x": x})).staged
    plan = Plan.load(plan_path)
    assert [c.arguments["x"] for c in plan.calls] == ["first", "second"]
    assert len({c.session for c in plan.calls}) == 2 and {c.posture for c in plan.calls} == {"ask"}


async def test_plan_records_roots_and_refuses_other_roots(tmp_path: Path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    async with Kernel(dry_run=True, plan_path=plan_path, roots=("/srv/a",)) as kernel:
        register_standard_tools(kernel, ledger)
        await kernel.invoke("touch", {"x": "1"})
    assert Plan.load(plan_path).roots == ("/srv/a",)
    # Staging into it from other roots is refused, and the plan keeps its one call.
    async with Kernel(dry_run=True, plan_path=plan_path, roots=("/srv/b",)) as kernel:
        register_standard_tools(kernel, ledger)
        outcome = await kernel.invoke("touch", {"x": "2"})
    assert isinstance(outcome.error, InvalidArguments) and "/srv/a" in outcome.error.message
    assert len(Plan.load(plan_path).calls) == 1
    approver = ScriptedApprover(lambda r: ApprovalAnswer.once())
    async with Kernel(roots=("/srv/b",), approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        with pytest.raises(Denied, match="--rebase-roots"):
            await kernel.apply_plan(Plan.load(plan_path))
        assert ledger.runs == [] and Plan.load(plan_path).applied == {}
        outcomes = await kernel.apply_plan(Plan.load(plan_path), rebase_roots=True)
    assert [o.ok for o in outcomes] == [True] and ledger.names() == ["touch"]


async def test_apply_never_looser_than_the_staging_posture(tmp_path: Path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)  # staged under ask
    ledger.runs.clear()
    async with Kernel(posture=Posture.ALLOW_ALL) as kernel:
        register_standard_tools(kernel, ledger)
        with pytest.raises(Denied, match="looser than the posture ask"):
            await kernel.apply_plan(Plan.load(plan_path))
    assert ledger.runs == []
    # Explicitly allowed: re-gated under allow-all (launch runs unasked; run_shell still asks).
    async with Kernel(posture=Posture.ALLOW_ALL) as kernel:
        register_standard_tools(kernel, ledger)
        outcomes = await kernel.apply_plan(Plan.load(plan_path), allow_looser_posture=True)
    assert [o.ok for o in outcomes] == [True, True, False]
    assert ledger.names() == ["touch", "launch"]


async def test_plan_applies_once(tmp_path: Path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)
    ledger.runs.clear()
    unapplied = plan_path.read_text()
    approver = ScriptedApprover(lambda r: ApprovalAnswer.once())
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        assert all(o.ok for o in await kernel.apply_plan(Plan.load(plan_path)))
        first_session = kernel.session_id
    applied_text = plan_path.read_text()
    plan = Plan.load(plan_path)
    assert set(plan.applied) == {c.call_id for c in plan.calls}
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        with pytest.raises(Denied, match=f"already applied .*session {first_session}"):
            await kernel.apply_plan(Plan.load(plan_path))
    assert ledger.names() == ["touch", "launch", "run_shell"]  # each ran once
    # A copy taken before the apply, put back: the ledger still knows its calls.
    plan_path.write_text(unapplied)
    assert Plan.load(plan_path).applied == {}
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        with pytest.raises(Denied, match=f"already applied .*session {first_session}"):
            await kernel.apply_plan(Plan.load(plan_path))
    assert ledger.names() == ["touch", "launch", "run_shell"]
    # Dropping the marks from the file is an edit the MAC catches.
    plan_path.write_text(applied_text)
    data = json.loads(plan_path.read_text())
    data["applied"] = {}
    plan_path.write_text(json.dumps(data))
    with pytest.raises(InvalidArguments, match="edited after staging"):
        Plan.load(plan_path)


def test_cli_plan_show_apply_once_and_keys(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("original")
    plan = work / "plan.json"
    for name in ("one.txt", "two.txt"):  # two dry runs into one plan: both kept
        result = cli(
            "call", "write_file", "--args", json.dumps({"path": name, "content": "x"}),
            "--workspace", str(work), "--dry-run", str(plan), cwd=work, home=home,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    shown = cli("plan", "show", "--json", str(plan), cwd=work, home=home)
    data = json.loads(shown.stdout)["result"]
    assert [c["arguments"]["path"] for c in data["calls"]] == ["one.txt", "two.txt"]
    assert data["roots"] == [str(work.resolve())]
    # show under another RINGFENCE_HOME: no key is created, and the message says why.
    other = tmp_path / "other-home"
    result = cli("plan", "show", str(plan), cwd=work, home=other)
    assert result.returncode != 0 and "no plan key" in result.stderr
    assert not (other / "keys" / "plan.key").exists()
    (other / "keys").mkdir(parents=True)
    (other / "keys" / "plan.key").write_bytes(os.urandom(32))
    result = cli("plan", "show", str(plan), cwd=work, home=other)
    assert "signed with a different key" in result.stderr and "edited" not in result.stderr
    # Other roots: refused unless --rebase-roots.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    apply = ("plan", "apply", str(plan), "--approve", "yes")
    result = cli(*apply, "--workspace", str(elsewhere), cwd=work, home=home)
    assert result.returncode != 0 and "--rebase-roots" in result.stderr
    assert list(elsewhere.iterdir()) == []
    result = cli(*apply, "--workspace", str(work), cwd=work, home=home)
    assert result.returncode == 0, result.stderr
    assert (work / "one.txt").read_text() == "x" and (work / "two.txt").read_text() == "x"
    (work / "one.txt").write_text("changed since")
    result = cli(*apply, "--workspace", str(work), cwd=work, home=home)
    assert result.returncode != 0 and "already applied" in result.stderr
    assert "session" in result.stderr and "UTC" in result.stderr
    assert (work / "one.txt").read_text() == "changed since"  # the second apply had no effect


async def test_two_applies_of_copies_read_before_either_ran_run_each_call_once(
    tmp_path: Path, ledger: Ledger
) -> None:
    plan_path = tmp_path / "plan.json"
    await stage_session(plan_path, ledger)
    ledger.runs.clear()
    refused: list[Denied] = []

    async def apply_once(plan: Plan) -> None:
        async with Kernel(approver=ScriptedApprover(lambda r: ApprovalAnswer.once())) as kernel:
            register_standard_tools(kernel, ledger)
            try:
                await kernel.apply_plan(plan)
            except Denied as exc:
                refused.append(exc)

    plans = [Plan.load(plan_path), Plan.load(plan_path)]  # both read before either applies
    assert all(p.first_applied() is None for p in plans)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(apply_once, plans[0])
        nursery.start_soon(apply_once, plans[1])
    assert sorted(ledger.names()) == ["launch", "run_shell", "touch"]  # each exactly once
    assert refused and all("already applied" in e.message for e in refused)
