"""The event stream: every step recorded, chained, sealed, tamper-evident, redacted."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import ringfence_process as ringfence_cli
from kernel_helpers import event_records
from runtime_helpers import Ledger, rechain, register_standard_tools

from ringfence.runtime import (
    ApprovalAnswer,
    FileSink,
    Kernel,
    MemorySink,
    Posture,
    ScriptedApprover,
    verify_file,
)


async def write_session(path: Path, ledger: Ledger) -> Kernel:
    approver = ScriptedApprover([ApprovalAnswer.once(), ApprovalAnswer.deny()])
    async with Kernel(events_sink=FileSink(path), approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        await kernel.invoke("peek", {"x": "r"})
        await kernel.invoke("launch", {"x": "yes"})
        await kernel.invoke("launch", {"x": "no"})
    return kernel


async def test_every_step_is_an_event(ledger: Ledger) -> None:
    sink = MemorySink()
    approver = ScriptedApprover([ApprovalAnswer.once()])
    async with Kernel(events_sink=sink, approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        outcome = await kernel.invoke("launch", {"x": "1"})
    kinds = [(r["kind"], r.get("call_id")) for r in sink.records()]
    call = outcome.call_id
    assert kinds == [
        ("session_started", None),
        ("proposed", call),
        ("decided", call),
        ("approval_asked", call),
        ("approval_answered", call),
        ("started", call),
        ("finished", call),
        ("session_sealed", None),
    ]
    assert all(r["trace_id"] == outcome.trace_id for r in sink.records()[1:-1])


async def test_chain_verifies_and_catches_an_edited_line(tmp_path: Path, ledger: Ledger) -> None:
    path = tmp_path / "events.jsonl"
    await write_session(path, ledger)
    report = verify_file(path)
    assert report.ok and report.sealed_sessions == 1, report.problems
    assert ringfence_cli("events", "verify", str(path)).returncode == 0

    lines = path.read_text().splitlines()
    record = json.loads(lines[5])
    assert record["kind"] == "proposed" and record["tool"] == "launch"
    record["tool"] = "peek"  # make a launch look like a read
    lines[5] = json.dumps(record, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
    result = ringfence_cli("events", "verify", "--json", str(path))
    assert result.returncode == 1
    problems = json.loads(result.stdout)["error"]["details"]["report"]["problems"]
    assert any(p.startswith("line 6: record was edited") for p in problems)


async def test_deleted_line_breaks_the_chain(tmp_path: Path, ledger: Ledger) -> None:
    path = tmp_path / "events.jsonl"
    await write_session(path, ledger)
    lines = path.read_text().splitlines()
    del lines[3]
    path.write_text("\n".join(lines) + "\n")
    report = verify_file(path)
    assert not report.ok
    assert any("chain broken" in p for p in report.problems)


async def test_rewritten_chain_fails_the_pinned_key(tmp_path: Path, ledger: Ledger) -> None:
    path = tmp_path / "events.jsonl"
    kernel = await write_session(path, ledger)
    pem = tmp_path / "key.pem"
    pem.write_text(kernel.public_key_pem())
    assert ringfence_cli("events", "verify", "--public-key", str(pem), str(path)).returncode == 0
    # A second, self-consistent session written by another key does not pass the pinned key.
    other = tmp_path / "other.jsonl"
    await write_session(other, ledger)
    assert verify_file(other).ok
    result = ringfence_cli("events", "verify", "--public-key", str(pem), str(other))
    assert result.returncode == 1 and "is not one of the pinned keys" in result.stdout


async def test_sessions_append_to_one_chain(tmp_path: Path, ledger: Ledger) -> None:
    path = tmp_path / "events.jsonl"
    await write_session(path, ledger)
    await write_session(path, ledger)
    report = verify_file(path)
    assert report.ok and report.sealed_sessions == 2


def test_verify_missing_file_is_not_found(tmp_path: Path) -> None:
    result = ringfence_cli("events", "verify", "--json", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["code"] == "not_found"


async def test_events_of_a_posture(ledger: Ledger) -> None:
    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL) as kernel:
        register_standard_tools(kernel, ledger)
        await kernel.invoke("launch", {})
    decided = next(r for r in sink.records() if r["kind"] == "decided")
    assert decided["verdict"] == "allow" and decided["rule"] == "posture:allow-all"


async def test_a_rewritten_chain_cannot_forge_a_calls_intent(
    tmp_path: Path, ledger: Ledger
) -> None:
    """Recomputing every hash makes the chain consistent again, but not the seal, and the
    forged intent no longer matches the call's decision."""
    path = tmp_path / "events.jsonl"
    await write_session(path, ledger)
    records = event_records(path)
    started = [r for r in records if r["kind"] == "started"]
    # No per-call signature: the intent is described, the seal signs the chain.
    assert len(started) == 2 and not any("signature" in r["intent"] for r in started)
    assert verify_file(path).ok

    # The forger turns the approved launch into a call "allowed by the posture" and re-chains.
    victim = next(r for r in started if r["tool"] == "launch")
    victim["intent"]["rule"] = "posture:ask"
    path.write_bytes(rechain(records))
    report = verify_file(path)
    assert not report.ok
    assert not any("hash mismatch" in p or "chain broken" in p for p in report.problems)
    assert any("seal signature does not verify" in p for p in report.problems)
    assert any("started without an allowed decision" in p for p in report.problems), report.problems
