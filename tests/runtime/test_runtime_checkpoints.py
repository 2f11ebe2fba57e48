"""Signed chain checkpoints instead of a signature per call: what the verifier still proves.

The session key signs the chain head every few records (and at the seal); a
``started`` record carries its intent's description, no signature. Each
attack is a real edit of a log a real Kernel wrote, by a forger who knows the
chain algorithm (``rechain``) but not the session's private key, checked
through ``ringfence events verify`` and :func:`verify_file`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import trio
from cli_helpers import ringfence_process
from kernel_helpers import event_records
from runtime_helpers import Ledger, rechain, register_standard_tools

from ringfence.runtime import ApprovalAnswer, FileSink, Kernel, ScriptedApprover, verify_file
from ringfence.runtime._canonical import canonical_json
from ringfence.runtime._events import CHECKPOINT_CONTEXT, GENESIS
from ringfence.runtime._intents import IntentAuthority
from ringfence.runtime._verify import ChainReport


async def write_log(path: Path, ledger: Ledger, **kernel: Any) -> Kernel:
    """Reads that run, an approved launch, a refused launch: checkpoints every 6 records."""
    approver = ScriptedApprover([ApprovalAnswer.once(), ApprovalAnswer.deny()])
    # By count only (no time-driven checkpoint), so where they fall does not depend on load.
    options = {"checkpoint_records": 6, "checkpoint_seconds": 3600.0, **kernel}
    async with Kernel(events_sink=FileSink(path), approver=approver, **options) as k:
        register_standard_tools(k, ledger)
        await k.invoke("peek", {"x": "a"})
        await k.invoke("launch", {"x": "yes"})
        await k.invoke("peek", {"x": "b"})
        await k.invoke("launch", {"x": "no"})
        await k.invoke("peek", {"x": "c"})
    return k


def both(path: Path, *options: str) -> tuple[ChainReport, dict[str, Any], int]:
    """The API's report, and the CLI's (``--json``) with its exit code, for the same file."""
    api = verify_file(path, allow_open="--allow-open" in options)
    result = ringfence_process("events", "verify", "--json", *options, str(path))
    body = json.loads(result.stdout)
    cli = body["result"] if body["ok"] else body["error"]["details"]["report"]
    assert api.ok == (result.returncode == 0) and list(api.problems) == cli["problems"]
    return api, cli, result.returncode


def line_of(records: list[dict[str, Any]], **match: Any) -> int:
    return next(i for i, r in enumerate(records) if all(r.get(k) == v for k, v in match.items()))


def without_seal(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert records[-1]["kind"] == "session_sealed"
    return records[:-1]


async def test_checkpoints_sign_the_chain_and_started_records_carry_no_signature(
    tmp_path: Path, ledger: Ledger
) -> None:
    path = tmp_path / "events.jsonl"
    await write_log(path, ledger)
    records = event_records(path)
    kinds = [r["kind"] for r in records]
    # At the first flush points after 6 records: before the approval, after reads and at the end.
    assert kinds.count("chain_checkpoint") == 3 and kinds[-2] == "chain_checkpoint", kinds
    started = [r for r in records if r["kind"] == "started"]
    assert len(started) == 4 and not any("signature" in r["intent"] for r in started)
    decided = {r["call_id"]: r for r in records if r["kind"] == "decided"}
    assert all(r["intent"]["arguments_sha256"] == decided[r["call_id"]]["arguments_sha256"]
               for r in started)  # fmt: skip
    report, cli, code = both(path)
    assert report.ok and code == 0 and report.unauthenticated is None, report.problems
    assert cli["unauthenticated_records"] == 0

    # A crash after the refused launch (the last read and the seal never written): intact
    # with --allow-open, and what follows the last checkpoint is the unauthenticated tail.
    end = max(i for i, r in enumerate(records, 1) if r["kind"] == "failed")
    last_checkpoint = max(i for i, k in enumerate(kinds[:end], 1) if k == "chain_checkpoint")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:end]))
    report, cli, code = both(path, "--allow-open")
    assert code == 0, cli
    assert report.unauthenticated == (last_checkpoint + 1, end)
    assert cli["unauthenticated_lines"] == [last_checkpoint + 1, end]
    assert cli["unauthenticated_records"] == end - last_checkpoint == 5
    report, cli, code = both(path)
    assert code == 1 and any("session is not sealed" in p for p in report.problems)


async def test_a_record_edited_before_a_checkpoint_fails_even_in_an_open_log(
    tmp_path: Path, ledger: Ledger
) -> None:
    path = tmp_path / "events.jsonl"
    await write_log(path, ledger)
    records = without_seal(event_records(path))
    # Make the first read look like it read something else, and re-hash the whole chain.
    n = line_of(records, kind="proposed", tool="peek")
    assert n < line_of(records, kind="chain_checkpoint")
    records[n]["arguments"] = {"x": "z"}
    path.write_bytes(rechain(records))
    report, _cli, code = both(path, "--allow-open")
    assert code == 1 and not report.ok
    assert not any("hash mismatch" in p or "chain broken" in p for p in report.problems)
    assert any("checkpoint signature does not verify" in p for p in report.problems), report
    # The digest the Gate decided on no longer matches the edited arguments either.
    assert any("do not hash to the intent's argument digest" in p for p in report.problems)


async def test_a_started_without_an_allowed_decision_fails(tmp_path: Path, ledger: Ledger) -> None:
    """The refused launch, rewritten as run: its `decided` says ask, and nobody approved."""
    path = tmp_path / "events.jsonl"
    await write_log(path, ledger)
    assert ledger.names() == ["peek", "launch", "peek", "peek"]
    records = event_records(path)
    refused = next(r for r in records if r["kind"] == "failed" and r["tool"] == "launch")["call_id"]
    decided = next(r for r in records if r["kind"] == "decided" and r["call_id"] == refused)
    intent = {
        "tool": "launch",
        "arguments_sha256": decided["arguments_sha256"],
        "verdict": "allow",
        "rule": "approved:once",
        "nonce": "forged",
        "expires_at": 9e9,
    }
    forged: list[dict[str, Any]] = []
    for r in records:
        if r.get("call_id") == refused and r["kind"] in ("approval_answered", "failed"):
            continue
        forged.append(r)
        if r is decided:
            base = {k: r[k] for k in ("seq", "ts", "trace_id", "call_id", "tool")}
            forged += [
                {**base, "kind": "started", "intent": intent},
                {**base, "kind": "finished", "output": "launched"},
            ]
    started_line = line_of(forged, kind="started", call_id=refused) + 1
    path.write_bytes(rechain(forged))
    report, _cli, code = both(path)
    assert code == 1
    assert (
        f"line {started_line}: started without an allowed decision: the Gate decided 'ask' "
        f"({decided['rule']}), the intent says 'approved:once'"
    ) in report.problems, report.problems
    # In an open log too, where no signature could refute it: the match itself fails.
    path.write_bytes(rechain(without_seal(forged)))
    report, _cli, code = both(path, "--allow-open")
    assert code == 1 and any(
        p.startswith(f"line {started_line}: started without an allowed decision")
        for p in report.problems
    ), report.problems


async def test_a_started_moved_before_its_decision_fails(tmp_path: Path, ledger: Ledger) -> None:
    path = tmp_path / "events.jsonl"
    await write_log(path, ledger)
    records = without_seal(event_records(path))
    started = line_of(records, kind="started", tool="launch")
    call_id = records[started]["call_id"]
    decided = line_of(records, kind="decided", call_id=call_id)
    moved = (
        records[:decided]
        + [records[started]]
        + [r for i, r in enumerate(records[decided:], decided) if i != started]
    )
    path.write_bytes(rechain(moved))
    report, _cli, code = both(path, "--allow-open")
    assert code == 1
    assert (
        f"line {decided + 1}: started without an allowed decision: "
        "no decision for this call before it started"
    ) in report.problems, report.problems


def resign(records: list[dict[str, Any]], authority: IntentAuthority) -> bytes:
    """A forger with a key of their own: the key swapped in, every signature made anew."""
    prev, out = GENESIS, b""
    for record in records:
        r = {k: v for k, v in record.items() if k != "hash"}
        if r["kind"] == "session_started":
            r["public_key"] = authority.public_key_pem()
        context = {"chain_checkpoint": CHECKPOINT_CONTEXT, "session_sealed": b""}.get(r["kind"])
        if context is not None:
            r["signature"] = base64.b64encode(
                authority.sign_bytes(context + prev.encode())
            ).decode()
        body = canonical_json({**r, "prev": prev})
        prev = hashlib.sha256(body).hexdigest()
        out += body[:-1] + f',"hash":"{prev}"}}\n'.encode()
    return out


async def test_a_swapped_key_fails(tmp_path: Path, ledger: Ledger) -> None:
    path = tmp_path / "events.jsonl"
    kernel = await write_log(path, ledger)
    records = event_records(path)
    pem = tmp_path / "key.pem"
    pem.write_text(kernel.public_key_pem())

    # Another key in session_started, the old signatures left: none of them verifies.
    swapped = [dict(r) for r in records]
    swapped[0]["public_key"] = IntentAuthority().public_key_pem()
    path.write_bytes(rechain(swapped))
    report, _cli, code = both(path)
    assert code == 1
    assert "seal signature does not verify" in report.problems[-1]
    assert sum("checkpoint signature does not verify" in p for p in report.problems) == sum(
        r["kind"] == "chain_checkpoint" for r in records
    )

    # Every signature re-made under the forger's key: self-consistent, so only the pinned
    # key refutes it (the documented limit of an unpinned verify).
    forged = records[:]
    launch = line_of(forged, kind="proposed", tool="launch")
    forged[launch] = {**forged[launch], "arguments": {"x": "rm -rf /"}}
    path.write_bytes(resign(forged, IntentAuthority()))
    result = ringfence_process("events", "verify", "--json", "--public-key", str(pem), str(path))
    assert result.returncode == 1
    problems = json.loads(result.stdout)["error"]["details"]["report"]["problems"]
    assert any("is not one of the pinned keys" in p for p in problems), problems
    assert not verify_file(path, pem.read_text()).ok


async def test_a_tail_left_idle_is_checkpointed(tmp_path: Path, ledger: Ledger) -> None:
    """A kernel in `async with` signs records left unsigned for a period, calls or not, so a
    crash after an idle spell leaves no unauthenticated tail."""
    path = tmp_path / "events.jsonl"
    async with Kernel(events_sink=FileSink(path), checkpoint_seconds=0.05) as kernel:
        register_standard_tools(kernel, ledger)
        await kernel.invoke("peek", {"x": "a"})
        await trio.sleep(0.3)
        snapshot = path.read_bytes()  # what a crash now would leave
    records = [json.loads(line) for line in snapshot.splitlines()]
    assert records[-1]["kind"] == "chain_checkpoint", [r["kind"] for r in records]
    open_log = tmp_path / "open.jsonl"
    open_log.write_bytes(snapshot)
    report, cli, code = both(open_log, "--allow-open")
    assert code == 0 and report.unauthenticated is None, cli


async def test_a_secret_that_happens_to_be_in_a_digest_does_not_break_verification(
    tmp_path: Path, ledger: Ledger
) -> None:
    """Redaction may hit a digest's hex digits (a short all-hex secret); the verifier then
    matches the decision's digest only, and the log still verifies."""
    from ringfence.runtime._canonical import arguments_digest

    arguments = {"x": "a"}
    secret = arguments_digest(arguments)[10:18]
    path = tmp_path / "events.jsonl"
    async with Kernel(events_sink=FileSink(path), secrets=[secret]) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("peek", arguments)).ok
    started = next(r for r in event_records(path) if r["kind"] == "started")
    assert "[REDACTED SECRET]" in started["intent"]["arguments_sha256"]
    report, _cli, code = both(path)
    assert report.ok and code == 0, report.problems
