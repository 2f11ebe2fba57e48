"""Attacks on the proof (event streams, plans) through the real command line.

Each test runs ``python -m ringfence`` as a process and asserts a clear refusal (an
error code naming the file, no traceback) and no effect (no file changed).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import isolated, ringfence_process

__all__ = ["isolated"]

DEPTH = 100_000


def _sealed_log(ws: Path, home: Path, events: Path) -> list[bytes]:
    proc = ringfence_process(
        "call",
        "read_file",
        "--args",
        json.dumps({"path": "a.txt"}),
        "--events",
        str(events),
        "--posture",
        "allow-all",
        cwd=ws,
        env={"RINGFENCE_HOME": str(home)},
    )
    assert proc.returncode == 0, proc.stderr
    return events.read_bytes().splitlines(keepends=True)


def _deep_record() -> bytes:
    """A line nested ``DEPTH`` deep, with a hash that matches its body (so it is parsed)."""
    body = b'{"kind":"output","a":' + b"[" * DEPTH + b"]" * DEPTH + b"}"
    return body[:-1] + b',"hash":"' + hashlib.sha256(body).hexdigest().encode() + b'"}\n'


def _no_crash(proc, code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-500:])
    assert "unexpected error" not in proc.stderr, proc.stderr[-500:]
    assert "RecursionError" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    home = tmp_path / "home"
    return ws, home


def test_deep_json_in_an_event_file_is_a_clear_verdict_not_a_crash(
    place: tuple[Path, Path], tmp_path: Path
) -> None:
    """A line nested 100,000 deep (first line, or mid-file with a matching hash):
    ``events verify`` says TAMPERED or "not an event file", ``events show`` names
    the line, and a session asked to append to it refuses before writing; until
    2026-12-07 each ended in an unexpected RecursionError."""
    ws, home = place
    env = {"RINGFENCE_HOME": str(home)}
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"[" * DEPTH + b"]" * DEPTH + b"\n")
    proc = ringfence_process("events", "verify", str(first), env=env)
    _no_crash(proc, 2)
    assert "line 1 is not a JSON record" in proc.stderr

    inside = tmp_path / "inside.jsonl"
    lines = _sealed_log(ws, home, tmp_path / "good.jsonl")
    inside.write_bytes(b"".join([*lines[:2], _deep_record(), *lines[2:]]))
    proc = ringfence_process("events", "verify", str(inside), env=env)
    _no_crash(proc, 1)
    assert "TAMPERED" in proc.stdout and "line 3" in proc.stdout
    proc = ringfence_process("events", "show", str(inside), env=env)
    _no_crash(proc, 2)
    assert "line 3" in proc.stderr

    # A session appending to a file whose last line is that deep refuses, file untouched.
    tail = tmp_path / "tail.jsonl"
    tail.write_bytes(b"".join(lines) + _deep_record())
    before = tail.read_bytes()
    proc = ringfence_process(
        "call",
        "read_file",
        "--args",
        json.dumps({"path": "a.txt"}),
        "--events",
        str(tail),
        cwd=ws,
        env=env,
    )
    assert proc.returncode != 0
    assert "unexpected error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "does not end with a whole event record" in proc.stderr
    assert tail.read_bytes() == before


def test_a_deep_plan_file_is_refused_by_plan_show_and_apply(
    place: tuple[Path, Path], tmp_path: Path
) -> None:
    """``plan show``/``plan apply`` of a file nested 100,000 deep: refused as not a
    plan (exit 2), nothing applied; it was an unexpected RecursionError."""
    ws, home = place
    plan = tmp_path / "plan.json"
    plan.write_text('{"ringfence_plan":' + "[" * DEPTH + "]" * DEPTH + "}")
    for verb in ("show", "apply"):
        proc = ringfence_process("plan", verb, str(plan), cwd=ws, env={"RINGFENCE_HOME": str(home)})
        _no_crash(proc, 2)
        assert "is not a JSON plan" in proc.stderr
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"]
    assert (ws / "a.txt").read_text() == "hello\n"


# Started from a small launcher, not from this test process: a process's peak RSS counts the
# memory of the one it was forked from (and, across exec, of the one it was vforked from), so
# a child of a pytest worker grown to 1 GB reported 1 GB whatever it used itself.
_LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def _verify_peak(
    path: Path, home: Path, tmp_path: Path, *extra: str, verb: str = "verify"
) -> tuple[int, str, int]:
    """``events VERB PATH``: exit code, stdout, and that process's own peak RSS in KiB."""
    out_path, err_path, usage_path = tmp_path / "out", tmp_path / "err", tmp_path / "usage"
    argv = [sys.executable, "-m", "ringfence", "events", verb, str(path), *extra]
    with open(out_path, "wb") as out_f, open(err_path, "wb") as err_f:
        subprocess.run(
            [sys.executable, "-c", _LAUNCHER, str(usage_path), *argv],
            stdout=out_f,
            stderr=err_f,
            env={**os.environ, "RINGFENCE_HOME": str(home)},
            check=True,
        )
    code, peak = (int(word) for word in usage_path.read_text().split())
    return code, out_path.read_text(), peak


def test_events_verify_holds_one_line_not_the_whole_file(
    place: tuple[Path, Path], tmp_path: Path
) -> None:
    """A 300 MB stream of 10 MB lines: ``events verify`` reads it a chunk at a time and
    names the lines that are not records; it read the file whole and split it (630 MB
    peak; now under 200 MB, a line over 256 MiB never held whole)."""
    ws, home = place
    lines = _sealed_log(ws, home, tmp_path / "good.jsonl")
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.write(lines[0])
        for _ in range(30):
            f.write(b'{"x":"' + b"a" * 10_000_000 + b'"}\n')
    code, out, peak = _verify_peak(big, home, tmp_path)
    assert code == 1
    assert "TAMPERED" in out and "line 31: not a ringfence event record" in out
    assert peak < 200 * 1024, f"events verify peaked at {peak} KiB"


def test_events_show_holds_one_line_not_the_whole_file(
    place: tuple[Path, Path], tmp_path: Path
) -> None:
    """``events show`` of a 300 MB stream (a session, then records of 10 MB each) folds the
    records as it reads them; it read every record into a list first (over 600 MB peak; now
    under 200 MB). A line over 256 MiB (a sparse file's 1 GiB) is refused by number and bound,
    never held whole (at most the bound and a chunk)."""
    ws, home = place
    lines = _sealed_log(ws, home, tmp_path / "good.jsonl")
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.writelines(lines)
        for _ in range(30):
            f.write(b'{"kind":"note","x":"' + b"a" * 10_000_000 + b'"}\n')
    code, out, peak = _verify_peak(big, home, tmp_path, "--json", verb="show")
    assert code == 0, out
    assert [c["tool"] for c in json.loads(out)["result"]["sessions"][0]["calls"]] == ["read_file"]
    assert peak < 200 * 1024, f"events show peaked at {peak} KiB"

    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as f:
        f.writelines(lines)
        f.truncate(f.tell() + (1 << 30))  # one line of 1 GiB (NUL bytes, not on disk)
    code, out, peak = _verify_peak(huge, home, tmp_path, "--json", verb="show")
    assert code == 2
    error = json.loads(out)["error"]
    assert (
        error["field"] == "FILE"
        and f"line {len(lines) + 1} is longer than 256 MiB" in (error["message"])
    )
    assert peak < 400 * 1024, f"events show peaked at {peak} KiB"


def test_events_verify_keeps_a_bounded_report(place: tuple[Path, Path], tmp_path: Path) -> None:
    """Two million lines that are no records (6 MB): ``events verify`` names the first
    thousand and counts the rest (with the open session's, 2,000,001 problems); it kept every message (350 MB, 850 MB for 5 million;
    ``--json`` printed 279 MB). A record quoting a 5 MB call id is named head…tail."""
    ws, home = place
    lines = _sealed_log(ws, home, tmp_path / "good.jsonl")
    many = tmp_path / "many.jsonl"
    with open(many, "wb") as f:
        f.write(lines[0])
        f.write(b"{}\n" * 2_000_000)
    code, out, peak = _verify_peak(many, home, tmp_path)
    assert code == 1
    assert "TAMPERED" in out and "1,999,001 more problem(s), not shown" in out
    assert len(out) < 200_000 and peak < 200 * 1024, (len(out), peak)
    code, out, peak = _verify_peak(many, home, tmp_path, "--json")
    assert code == 1
    body = json.loads(out)
    assert body["error"]["details"]["report"]["problems_not_shown"] == 1_999_001
    assert body["error"]["details"]["report"]["tampered"] is True
    assert len(out) < 200_000 and peak < 200 * 1024, (len(out), peak)

    first = json.loads(lines[0])
    record = {"call_id": "A" * 5_000_000, "kind": "started", "prev": first["hash"], "seq": 1}
    body_bytes = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(body_bytes).hexdigest().encode()
    long_id = tmp_path / "long_id.jsonl"
    long_id.write_bytes(lines[0] + body_bytes[:-1] + b',"hash":"' + digest + b'"}\n')
    code, out, _ = _verify_peak(long_id, home, tmp_path)
    assert code == 1 and "TAMPERED" in out
    assert "which was never proposed" in out or "characters)" in out
    assert len(out) < 4_000, len(out)


def test_plan_show_redacts_the_secrets_a_staged_call_carries(
    place: tuple[Path, Path], tmp_path: Path
) -> None:
    """A dry run stages ``write_file`` with a URL password in its content: the call's
    records show it redacted, and now so do ``plan show`` and ``plan show --json`` (they
    printed it whole); ``plan apply`` still writes the bytes that were staged."""
    ws, home = place
    env = {"RINGFENCE_HOME": str(home)}
    plan = tmp_path / "plan.json"
    events = tmp_path / "events.jsonl"
    content = "remote = https://bob:hunter2pass@example.com/repo.git\n"
    proc = ringfence_process(
        "call",
        "write_file",
        "--args",
        json.dumps({"path": "conf.txt", "content": content}),
        "--dry-run",
        str(plan),
        "--events",
        str(events),
        "--posture",
        "allow-all",
        cwd=ws,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hunter2pass" not in events.read_text()
    assert "hunter2pass" in plan.read_text()  # the plan keeps what it will run

    shown = ringfence_process("plan", "show", str(plan), cwd=ws, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "hunter2pass" not in shown.stdout + shown.stderr
    assert "https://[REDACTED SECRET]@example.com" in shown.stdout
    as_json = ringfence_process("plan", "show", str(plan), "--json", cwd=ws, env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert "hunter2pass" not in as_json.stdout + as_json.stderr
    assert "[REDACTED SECRET]" in as_json.stdout

    applied = ringfence_process(
        "plan", "apply", str(plan), "--posture", "allow-all", cwd=ws, env=env
    )
    assert applied.returncode == 0, applied.stderr
    assert "hunter2pass" not in applied.stdout + applied.stderr
    assert (ws / "conf.txt").read_text() == content


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_plan_or_key_file_that_is_a_pipe_or_a_device_is_refused_unread(
    place: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    """``plan show|apply`` of a pipe no one writes (the agent's ``ringfence-plan.json``
    made a FIFO by a ``--no-change-sets`` command) or of ``/dev/zero``, and
    ``events verify --public-key`` naming either: refused in a moment, naming the
    file; each waited on the pipe, or read the device until memory ran out."""
    ws, home = place
    good = tmp_path / "good.jsonl"
    _sealed_log(ws, home, good)
    if kind == "fifo":
        target = ws / "ringfence-plan.json"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    before = sorted(p.name for p in ws.iterdir())
    env = {**os.environ, "RINGFENCE_HOME": str(home)}
    for argv in (
        ["plan", "show", str(target)],
        ["plan", "apply", str(target), "--posture", "allow-all"],
        ["events", "verify", str(good), "--public-key", str(target)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "ringfence", *argv],
            capture_output=True,
            text=True,
            timeout=20,
            cwd=ws,
            env=env,
            check=False,
        )
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "not a regular file" in proc.stderr and str(target) in proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in ws.iterdir()) == before
    assert (ws / "a.txt").read_text() == "hello\n"


@pytest.mark.parametrize("value", [b"1e999", b'"\\ud800"'], ids=["infinite", "lone-surrogate"])
def test_a_record_no_writer_writes_is_tampering_not_a_key_error(
    place: tuple[Path, Path], tmp_path: Path, value: bytes
) -> None:
    """A sealed log's third line is swapped for a record holding ``1e999`` or an escaped
    lone surrogate, with a hash that matches it (so it is parsed): JSON no event writer
    writes. ``events verify`` ended with "invalid_arguments: --public-key: Out of range float
    values are not JSON compliant" (or "… surrogates not allowed"): no verdict, the wrong
    field blamed. Now it is TAMPERED, naming the line."""
    ws, home = place
    env = {"RINGFENCE_HOME": str(home)}
    lines = _sealed_log(ws, home, tmp_path / "good.jsonl")
    record = json.loads(lines[2])
    body = json.dumps(
        {k: v for k, v in record.items() if k != "hash"}, sort_keys=True, separators=(",", ":")
    ).encode()
    body = body[:-1] + b',"zz":' + value + b"}"
    forged = body[:-1] + b',"hash":"' + hashlib.sha256(body).hexdigest().encode() + b'"}\n'
    log = tmp_path / "forged.jsonl"
    log.write_bytes(b"".join([*lines[:2], forged, *lines[3:]]))
    for extra in ((), ("--allow-open",), ("--json",)):
        proc = ringfence_process("events", "verify", str(log), *extra, env=env)
        _no_crash(proc, 1)
        assert "public-key" not in proc.stderr + proc.stdout, proc.stderr
        if extra == ("--json",):
            report = json.loads(proc.stdout)["error"]["details"]["report"]
            assert report["tampered"] and not report["intact"], report
            assert any(p.startswith("line 3:") for p in report["problems"]), report
        else:
            assert "TAMPERED" in proc.stdout and "line 3" in proc.stdout, proc.stdout


def test_a_key_file_with_no_key_is_the_public_key_error(
    place: tuple[Path, Path], tmp_path: Path
) -> None:
    """What is still a ``--public-key`` error once the keys are parsed apart from the log."""
    ws, home = place
    log = tmp_path / "good.jsonl"
    _sealed_log(ws, home, log)
    pem = tmp_path / "bad.pem"
    pem.write_text("not a key\n")
    proc = ringfence_process(
        "events", "verify", str(log), "--public-key", str(pem), "--json",
        env={"RINGFENCE_HOME": str(home)},
    )  # fmt: skip
    _no_crash(proc, 2)
    error = json.loads(proc.stdout)["error"]
    assert error["field"] == "--public-key" and "no PEM public key" in error["message"], error


@pytest.mark.parametrize("where", ["inside", "link", "hard-link"])
def test_an_event_file_the_sessions_tools_could_rewrite_is_refused(
    place: tuple[Path, Path], tmp_path: Path, where: str
) -> None:
    """``--events ev.jsonl`` inside the workspace: the session's own ``write_file ev.jsonl``
    replaced the file with one line while the kernel went on appending to the unlinked one,
    so the session's whole record was gone. Now such a file is refused before anything runs,
    also through a link into the root or a second name (a hard link) on its file system."""
    ws, home = place
    events = ws / "ev.jsonl"
    if where == "link":
        (ws / "logs").mkdir()
        events = tmp_path / "logs"
        events.symlink_to(ws / "logs")
        events = events / "ev.jsonl"
    elif where == "hard-link":
        events = tmp_path / "ev.jsonl"
        events.write_text("")
        (ws / "ev-copy.jsonl").hardlink_to(events)
    before = sorted(p.name for p in ws.rglob("*"))
    proc = ringfence_process(
        "call", "write_file", "--args", json.dumps({"path": "a.txt", "content": "x"}),
        "--workspace", str(ws), "--events", str(events), "--approve", "yes", "--json",
        cwd=ws, env={"RINGFENCE_HOME": str(home)},
    )  # fmt: skip
    _no_crash(proc, 2)
    error = json.loads(proc.stdout)["error"]
    assert error["field"] == "events_path" and "could overwrite" in error["message"], error
    assert sorted(p.name for p in ws.rglob("*")) == before
    assert (ws / "a.txt").read_text() == "hello\n"
    assert not events.exists() or events.read_text() == ""


async def test_an_embedding_host_is_refused_an_event_file_inside_a_root(tmp_path: Path) -> None:
    from ringfence import create_kernel
    from ringfence.runtime import InvalidArguments

    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(InvalidArguments) as caught:
        create_kernel(roots=[ws], events_path=ws / "sub" / "ev.jsonl")
    assert caught.value.field == "events_path"
    assert list(ws.iterdir()) == []
    async with create_kernel(roots=[ws], events_path=tmp_path / "ev.jsonl") as kernel:
        await kernel.invoke("list_directory", {"path": "."})
    assert (tmp_path / "ev.jsonl").stat().st_size > 0
