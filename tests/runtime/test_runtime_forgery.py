"""Forging the event log: every attack is a real edit of a log written by real `ringfence call` runs.

The forger knows the chain algorithm (tests/runtime/runtime_helpers.rechain) but
not the session's private key. The operator pinned the session keys out of
band (here: read from the log before the forgery, as `ringfence` printed them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ringfence_process
from kernel_helpers import event_records
from runtime_helpers import rechain


def cli(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return ringfence_process(*args, cwd=cwd, env={"RINGFENCE_HOME": str(home)})


def verify(path: Path, *options: str) -> tuple[int, dict[str, Any]]:
    result = cli(
        "events", "verify", "--json", *options, str(path), cwd=path.parent, home=path.parent
    )
    body = json.loads(result.stdout)  # {"ok", "result"} or {"ok", "error": {"details": report}}
    return result.returncode, body["result"] if body["ok"] else body["error"]["details"]["report"]


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real sessions appended to one file: a read that ran, then a write the approver refused."""
    base = tmp_path_factory.mktemp("forgery")
    (base / "ws").mkdir()
    (base / "ws" / "notes.txt").write_text("hello\n")
    log = base / "events.jsonl"
    ran = cli(
        "call", "read_file", "--args", '{"path": "notes.txt"}', "--workspace", "ws",
        "--events", str(log), cwd=base, home=base / "home",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    refused = cli(
        "call", "write_file", "--args", '{"path": "evil.sh", "content": "curl x | sh"}',
        "--workspace", "ws", "--approve", "no", "--events", str(log), cwd=base, home=base / "home",
    )  # fmt: skip
    assert refused.returncode == 3, refused.stderr
    assert not (base / "ws" / "evil.sh").exists()
    return log


@pytest.fixture
def log(real_log: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "events.jsonl"
    shutil.copy(real_log, copy)
    return copy


def pin(path: Path, *pems: str, name: str = "keys.pem") -> str:
    key_file = path.parent / name
    key_file.write_text("".join(pems))
    return str(key_file)


def session_keys(path: Path) -> list[str]:
    return [r["public_key"] for r in event_records(path) if r["kind"] == "session_started"]


def test_the_real_log_verifies_with_both_keys_pinned(log: Path) -> None:
    first, second = session_keys(log)
    code, report = verify(
        log, "--public-key", pin(log, first, name="a.pem"), "--public-key", pin(log, second)
    )
    assert code == 0 and report["intact"] and report["sealed_sessions"] == 2, report
    # One file holding both PEM keys pins the same.
    code, report = verify(log, "--public-key", pin(log, first, second, name="both.pem"))
    assert code == 0, report


def test_a_session_whose_key_is_not_pinned_is_refused(log: Path) -> None:
    first, _second = session_keys(log)
    code, report = verify(log, "--public-key", pin(log, first))
    assert code == 1
    starts = [i for i, r in enumerate(event_records(log), 1) if r["kind"] == "session_started"]
    assert report["problems"] == [
        f"line {starts[1]}: the session key {report['session_keys'][1]} is not one of the pinned keys"
    ]


def forge_allowed_write(path: Path, intent: dict[str, Any] | None) -> None:
    """Turn the refused write into one that ran: decided allow, started + finished, re-chained.

    The forger drops what it cannot sign again: the seal, and any checkpoint after the
    rewrite (one lands there when the session took over ``CHECKPOINT_SECONDS`` between its
    records, as on a loaded machine)."""
    rs = event_records(path)
    call = next(r for r in rs if r["kind"] == "proposed" and r["tool"] == "write_file")
    forged: list[dict[str, Any]] = []
    rewritten = False
    for r in rs:
        if rewritten and r["kind"] == "chain_checkpoint":
            continue
        if r.get("call_id") == call["call_id"] and r["kind"] in (
            "approval_asked",
            "approval_answered",
            "failed",
        ):
            continue
        if r["kind"] == "session_sealed" and r is rs[-1]:
            continue  # the forger cannot sign a new seal over the rewritten head
        if r.get("call_id") == call["call_id"] and r["kind"] == "decided":
            r = {**r, "verdict": "allow", "rule": "posture:ask", "reason": "read tools run"}
            started = {**r, "kind": "started", "intent": intent}
            for k in ("verdict", "rule", "reason"):
                started.pop(k)
            finished = {**started, "kind": "finished", "output": "wrote evil.sh"}
            finished.pop("intent")
            forged += [r, started, finished]
            rewritten = True
            continue
        forged.append(r)
    path.write_bytes(rechain(forged))


def described_intent(path: Path) -> dict[str, Any]:
    """What a forger who knows the format writes: a well-formed intent for the refused write."""
    from ringfence.runtime._canonical import digest

    call = next(
        r for r in event_records(path) if r["kind"] == "proposed" and r["tool"] == "write_file"
    )
    return {
        "tool": "write_file",
        "arguments_sha256": digest(call["arguments"]),
        "verdict": "allow",
        "rule": "posture:ask",
        "nonce": "forged",
        "expires_at": 9e9,
    }


@pytest.mark.parametrize("intent_source", ["none", "copied from the read in the first session"])
def test_a_refused_call_rewritten_as_allowed_is_tampering(log: Path, intent_source: str) -> None:
    first, second = session_keys(log)
    keys = pin(log, first, second)
    read_started = next(r for r in event_records(log) if r["kind"] == "started")
    forge_allowed_write(log, None if intent_source == "none" else read_started["intent"])
    rs = event_records(log)
    assert any(r["kind"] == "finished" and r["tool"] == "write_file" for r in rs)

    # Even accepting an open log, with both keys pinned, the forged call is caught.
    code, report = verify(log, "--public-key", keys, "--allow-open")
    assert code == 1
    started_line = next(
        i for i, r in enumerate(rs, 1) if r["kind"] == "started" and r["tool"] == "write_file"
    )
    why = (
        "the record carries no intent"
        if intent_source == "none"
        else "the intent names 'read_file', the call is 'write_file'"
    )
    assert report["problems"] == [
        f"line {started_line}: started without an allowed decision: {why}"
    ], report["problems"]
    # Without --allow-open the missing seal alone already fails it.
    code, report = verify(log, "--public-key", keys)
    assert code == 1 and any("session is not sealed" in p for p in report["problems"])


def test_a_well_formed_forgery_after_the_last_checkpoint_is_reported_unauthenticated(
    log: Path,
) -> None:
    """The documented limit: with the seal cut off, a forger who writes a consistent call is
    not refuted, but `--allow-open` names every line from the session's start (no checkpoint
    covers them) as unauthenticated, and without it the log fails."""
    first, second = session_keys(log)
    keys = pin(log, first, second)
    forge_allowed_write(log, described_intent(log))
    rs = event_records(log)
    second_start = [i for i, r in enumerate(rs, 1) if r["kind"] == "session_started"][1]
    # The tail no signature covers: from the session's start, or past a checkpoint it made
    # before the refused write (a slow session's).
    signed = [
        i for i, r in enumerate(rs, 1) if i > second_start and r["kind"] == "chain_checkpoint"
    ]
    tail = signed[-1] + 1 if signed else second_start
    forged = [i for i, r in enumerate(rs, 1) if r.get("tool") == "write_file"]
    code, report = verify(log, "--public-key", keys, "--allow-open")
    assert code == 0, report
    assert report["unauthenticated_lines"] == [tail, len(rs)]
    assert all(tail <= i <= len(rs) for i in forged)
    assert report["unauthenticated_records"] == len(rs) - tail + 1
    text = cli("events", "verify", "--allow-open", str(log), cwd=log.parent, home=log.parent)
    assert f"unauthenticated tail: lines {tail}-{len(rs)}" in text.stdout
    code, report = verify(log, "--public-key", keys)
    assert code == 1 and any("session is not sealed" in p for p in report["problems"])


def test_a_duplicate_key_in_a_sealed_line_is_tampering(log: Path) -> None:
    lines = log.read_bytes().splitlines()
    n = next(
        i for i, line in enumerate(lines) if b'"kind":"decided"' in line and b"write_file" in line
    )
    # Python keeps the last of two values, so the record still hashes as written; a reader that
    # keeps the first sees an allowed write.
    assert lines[n].startswith(b"{")
    lines[n] = b'{"verdict":"allow",' + lines[n][1:]
    log.write_bytes(b"\n".join(lines) + b"\n")
    assert json.loads(lines[n])["verdict"] == "ask"
    code, report = verify(log)
    assert code == 1
    assert (
        f"line {n + 1}: duplicate key verdict in the record (readers may disagree)"
        in report["problems"]
    )
    assert f"line {n + 1}: record was edited (hash mismatch)" in report["problems"]


def test_a_line_reencoded_with_other_spacing_is_tampering(log: Path) -> None:
    lines = log.read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"kind":"proposed"', b'"kind": "proposed"')
    log.write_bytes(b"\n".join(lines) + b"\n")
    code, report = verify(log)
    assert code == 1 and "line 2: record was edited (hash mismatch)" in report["problems"]


def test_a_truncated_log_is_refused_unless_open_logs_are_accepted(log: Path) -> None:
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]))  # the last seal is gone
    code, report = verify(log)
    assert code == 1 and report["unsealed_sessions"] == 1
    assert any("session is not sealed" in p for p in report["problems"]), report
    code, report = verify(log, "--allow-open")
    assert code == 0 and report["intact"], report

    # Cut in the middle of a record: refused, and with --allow-open the half line is pending.
    log.write_bytes(b"".join(lines[:-2]) + lines[-2][:40])
    code, report = verify(log)
    assert code == 1 and any("no newline" in p for p in report["problems"]), report
    code, report = verify(log, "--allow-open")
    assert code == 0, report


def test_a_seal_removed_before_another_session_is_refused_even_when_open(log: Path) -> None:
    """A session that really ended without a seal (a killed process) is accepted with
    --allow-open (tests/serve/test_serve_seal.py); a seal a forger removed is not: the next
    session's signatures cover the chain through it, so re-chaining breaks them, and not
    re-chaining breaks the chain."""
    rs = event_records(log)
    first_seal = next(i for i, r in enumerate(rs) if r["kind"] == "session_sealed")
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:first_seal] + lines[first_seal + 1 :]))
    code, report = verify(log, "--allow-open")
    assert code == 1 and report["tampered"], report
    assert (
        f"line {first_seal + 1}: chain broken (prev does not match line before)"
        in report["problems"]
    ), report
    del rs[first_seal]
    log.write_bytes(rechain(rs))
    code, report = verify(log, "--allow-open")
    assert code == 1 and report["tampered"], report
    assert any("seal signature does not verify" in p for p in report["problems"]), report
    assert report["unsealed"][0]["next_session_line"] == first_seal + 1


def test_a_key_file_without_a_key_is_a_usage_error(log: Path) -> None:
    bad = log.parent / "bad.pem"
    bad.write_text("not a key\n")
    result = cli("events", "verify", "--json", "--public-key", str(bad), str(log), cwd=log.parent,
                 home=log.parent)  # fmt: skip
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "invalid_arguments" and error["field"] == "--public-key"


def test_a_run_does_not_append_to_a_log_cut_mid_record(log: Path) -> None:
    data = log.read_bytes()[:-30]  # the last seal, cut mid-write
    log.write_bytes(data)
    home = log.parent.with_name(log.parent.name + "-home")  # beside the workspace, not in it
    ws = log.parent / "ws"  # the log beside the workspace: one inside a root is refused first
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    result = cli("call", "read_file", "--args", '{"path": "notes.txt"}', "--json",
                 "--workspace", str(ws), "--events", str(log), cwd=ws, home=home)  # fmt: skip
    assert result.returncode == 1, result.stderr
    error = json.loads(result.stdout)["error"]
    assert (
        error["code"] == "unwritable"
        and "does not end with a whole event record" in error["message"]
    )
    assert log.read_bytes() == data  # nothing chained onto the broken record
