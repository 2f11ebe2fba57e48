"""Attacks on crash safety and the record's integrity from two ringfence processes at once.

Each test runs real ``python -m ringfence`` processes (or a kernel through the API in a
process of its own) side by side on one event file or one workspace, and asserts what is
on disk afterwards: the tree byte for byte, the event stream's verdict.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from test_workspace_undo_attacks import killed_at, needs_bwrap, needs_strace
from tree_helpers import exact_state

from ringfence import create_kernel
from ringfence.cli._main import main
from ringfence.runtime import _events
from ringfence.runtime._errors import Unavailable

# A session through the API in a process of its own: one call, "ready", then waits for a
# line on stdin before its second call and its seal.
_HELD_SESSION = """
import sys, trio
from ringfence import create_kernel

async def run():
    kernel = create_kernel(roots=[sys.argv[1]], posture="allow-all", events_path=sys.argv[2])
    async with kernel:
        await kernel.invoke("list_directory", {"path": "."})
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        await kernel.invoke("list_directory", {"path": "."})

trio.run(run)
"""


def test_two_sessions_on_one_event_file_never_interleave_their_chains(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session (an API kernel) holds ``events.jsonl`` open between two calls while
    ``ringfence call --events events.jsonl`` runs beside it. Each session chains its records
    onto the last one it wrote itself, so the second session's records landed inside the
    first's, and ``events verify`` called a log nobody had touched ``TAMPERED`` ("record
    outside a session", a broken chain). Now one session writes an event file at a time:
    the second waits for the first's seal, and the log verifies intact, two sealed
    sessions each in one piece."""
    root = tmp_path / "ws"
    root.mkdir()
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "RINGFENCE_HOME": str(ringfence_home)}
    first = subprocess.Popen(
        [sys.executable, "-c", _HELD_SESSION, str(root), str(events)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().strip() == "ready"
        second = subprocess.Popen(
            [sys.executable, "-m", "ringfence", "call", "list_directory", "--args",
             '{"path": "."}', "--workspace", str(root), "--events", str(events),
             "--posture", "allow-all", "--approve", "no", "--json"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # Until the second session wrote into the first's (before the fix), or long enough
        # for it to have (it waits for the first's seal now).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and second.poll() is None:
            if events.read_bytes().count(b'"kind":"session_started"') > 1:
                break
            time.sleep(0.05)
        first.stdin.write("go\n")
        first.stdin.flush()
        assert first.wait(timeout=120) == 0
        out, err = second.communicate(timeout=120)
        assert json.loads(out)["ok"], (out, err[-2000:])
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        for stream in (first.stdin, first.stdout):
            if stream is not None:
                stream.close()
    assert main(["events", "verify", str(events), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["result"]
    assert report["intact"] and not report["tampered"], report
    kinds = [json.loads(line)["kind"] for line in events.read_text().splitlines()]
    assert kinds.count("session_started") == kinds.count("session_sealed") == 2, kinds
    # Each session in one piece: a seal comes before the next session starts.
    assert [k for k in kinds if k in ("session_started", "session_sealed")] == [
        "session_started", "session_sealed", "session_started", "session_sealed",
    ]  # fmt: skip


def test_an_event_file_another_session_holds_is_unavailable_not_interleaved(
    tmp_path: Path, ringfence_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose event file another session holds waits for it, at most its bound,
    and is then ``unavailable`` naming the file (field ``events``), with nothing written
    into the other session's records."""
    root = tmp_path / "ws"
    root.mkdir()
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"")
    monkeypatch.setattr(_events, "EVENT_FILE_WAIT_SECONDS", 0.5)
    fd = os.open(events, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a live session holds
        with pytest.raises(Unavailable) as caught:
            create_kernel(roots=[root], posture="allow-all", events_path=events)
    finally:
        os.close(fd)
    assert caught.value.field == "events"
    assert str(events) in caught.value.message
    assert events.read_bytes() == b""


def _tracee(strace: subprocess.Popen[bytes]) -> int:
    """The pid of the program ``strace`` runs (its child)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for task in os.listdir(f"/proc/{strace.pid}/task"):
            with open(f"/proc/{strace.pid}/task/{task}/children") as f:
                children = f.read().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise AssertionError("strace started no program")


def _waits_for_the_writers_lock(pid: int, home: Path) -> bool:
    """Has process ``pid`` opened a writers' lock file (``$RINGFENCE_HOME/locks``)?"""
    locks = str(home / "locks") + "/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(locks):
                return True
        except OSError:
            continue
    return False


def _holds_a_flock_on(pid: int, path: Path) -> bool:
    """Does process ``pid`` hold a ``flock`` on ``path`` (``/proc/locks``)?"""
    st = path.stat()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks") as f:
        for line in f:
            words = line.split()
            if "FLOCK" in words and "->" not in words and str(pid) in words and inode in words:
                return True
    return False


@needs_strace
@needs_bwrap
@pytest.mark.parametrize("held_at", ["rolling_back", "taking_the_journal"])
def test_a_write_beside_a_recovery_killed_midway_writes_only_once_it_is_rolled_back(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], held_at: str
) -> None:
    """A merge killed midway leaves its set in flight; ``ringfence recover`` starts rolling it
    back, and ``write_file`` of one of the merged files starts beside it: its start finds the
    journal held (the recovery's) and goes on. The recovery is held, then killed (a second
    crash): after two files rolled back (``rolling_back``), or as it has just locked the dead
    journal (``taking_the_journal``: it took the writers' lock only after that, so the write
    did not even wait). The write then wrote over a half-merged tree: its change set recorded
    the killed merge's bytes as its before-image, the next start left that file to it, and
    ``undo`` of the write put the killed merge's bytes back, a tree that was never before
    nor after anything. Now a recovery takes a dead journal only under the writers' lock, and
    every writer, once it holds that lock, rolls back first what a dead process left in
    flight: the write lands on the before tree, and its undo gives that tree back exactly."""
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(1, 41):
        (root / f"f{i}").write_text(f"old-{i}\n")
    before = exact_state(root)
    command = "for i in $(seq 1 40); do echo new-$i > f$i; done"
    killed_at(root, ringfence_home, ["call", "run_shell", "--args",
              json.dumps({"command": command})], "renameat", root, when=10)  # fmt: skip

    def merged() -> list[str]:
        names = [f"f{i}" for i in range(1, 41)]  # not the writers' temporary files
        return [n for n in names if (root / n).read_text() != f"old-{n[1:]}\n"]

    half = merged()
    assert len(half) >= 4, half  # killed midway: part of the set merged
    [journal] = list((ringfence_home / "checkpoints").glob("*/journal/*.log"))
    if held_at == "rolling_back":
        hold = ["-e", "trace=renameat", "-e", "inject=renameat:delay_enter=900000000:when=3",
                "-P", str(root)]  # fmt: skip
    else:
        hold = ["-e", "trace=flock", "-e", "inject=flock:delay_exit=900000000:when=1",
                "-P", str(journal)]  # fmt: skip
    env = {**os.environ, "RINGFENCE_HOME": str(ringfence_home)}
    recovery = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", *hold,
         sys.executable, "-m", "ringfence", "recover", "--workspace", str(root), "--json"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    writer, held = None, 0
    try:
        held = _tracee(recovery)
        deadline = time.monotonic() + 120

        def stalled() -> bool:
            if held_at == "rolling_back":  # two files rolled back: held at its third
                return len(merged()) <= len(half) - 2
            return _holds_a_flock_on(held, journal)

        while not stalled():
            assert time.monotonic() < deadline and recovery.poll() is None
            time.sleep(0.05)
        target = sorted(merged())[0]  # still the killed merge's bytes
        writer = subprocess.Popen(
            [sys.executable, "-m", "ringfence", "call", "write_file", "--args",
             json.dumps({"path": target, "content": "agent\n"}),
             "--workspace", str(root), "--approve", "no", "--json",
             "--posture", "allow-reversible"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # Until it waits for the writers' lock, or (before the fix, taking_the_journal) wrote.
        while not _waits_for_the_writers_lock(writer.pid, ringfence_home):
            assert time.monotonic() < deadline
            if writer.poll() is not None:
                break
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):  # ended already: the oracle still holds
            os.kill(held, signal.SIGKILL)  # the recovery dies midway
        recovery.kill()  # strace itself would wait out its delay first
        recovery.wait(timeout=60)
        out, err = writer.communicate(timeout=120)
        assert json.loads(out)["ok"], (out, err[-2000:])
    finally:
        if held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(held, signal.SIGKILL)  # never left running once strace is gone
        for proc in (recovery, writer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert main(["recover", "--workspace", str(root), "--json"]) == 0
    capsys.readouterr()
    now = exact_state(root)
    assert now == {**before, target: ("file", 0o644, b"agent\n")}, sorted(
        k for k in now if now[k] != before.get(k)
    )
    assert main(["undo", "--last", "1", "--workspace", str(root), "--json",
                 "--approve", "no", "--posture", "allow-reversible"]) == 0  # fmt: skip
    capsys.readouterr()
    assert exact_state(root) == before  # the write's own before-image: the before tree
