"""Attacks on crash safety and the record's integrity from two ringfence processes at once.

Each test runs real ``python -m ringfence`` processes (or a kernel through the API in a
process of its own) side by side on one event file or one workspace, and asserts what is
on disk afterwards: the tree byte for byte, the event stream's verdict.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)

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
