"""More attacks on the review page, each performed through its public interface.

* A plan file swapped between the read whose sha256 the person confirmed and the
  read the plan is run from (a named pipe makes the race exact: what an agent
  that can write the plan's directory gets by swapping two signed plans in a
  loop): the swapped-in plan never runs, and nothing is written.
* A plan file replaced by a directory after it was confirmed: that action fails,
  saying why, and the page goes on (it stopped the whole process before).
* A watched stream replaced by a directory or a named pipe: the page stays up, keeps
  what it read, says the file cannot be read, and still stops promptly.
* A query of more fields than the page reads: a clear 400, with the page's
  headers, no traceback, nothing done.
* An event stream (``--watch``, or ``--events`` read at start) holding a record
  whose time cannot be drawn (out of range, not a number): every view still
  answers, nothing is hidden, no traceback.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import http.client
import json
import os
import stat
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import choose, confirm, job_done, records, ringfence_process, visit

# -- a plan swapped under the page --------------------------------------------------------


def stage(workspace: Path, plan: Path, path: str, content: str) -> bytes:
    """A dry run of ``write_file`` staged (signed) into ``plan``: the plan's bytes."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "ringfence", "call", "write_file",
            "--args", json.dumps({"path": path, "content": content}),
            "--workspace", str(workspace), "--posture", "allow-all", "--dry-run", str(plan),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return plan.read_bytes()


class SwappingPlan:
    """A named pipe standing for a plan file: each open by process ``pid`` reads
    ``default``, except the opens queued in ``next`` (in order). One reader at a time: its
    bytes are written once it opened, and the next is served once it has read them and
    closed (``/proc/PID/fd``). It stops once the path is no longer a pipe (the apply
    wrote its marks over it)."""

    def __init__(self, path: Path, default: bytes) -> None:
        self.path = path
        self.default = default
        self.next: list[bytes] = []
        self.pid: int | None = None
        self._stop = threading.Event()
        os.mkfifo(path)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _readers(self) -> int:
        fds = Path(f"/proc/{self.pid}/fd")
        count = 0
        for fd in list(fds.iterdir()) if fds.exists() else []:
            with contextlib.suppress(OSError):
                count += os.readlink(fd) == str(self.path)
        return count

    def _wait(self, done: Any) -> None:
        while not done() and not self._stop.is_set():
            time.sleep(0.001)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno in (errno.ENXIO, errno.ENOENT):  # no reader yet / being replaced
                    time.sleep(0.001)
                    continue
                raise
            try:
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    return  # a regular file now: never write into it
                os.set_blocking(fd, True)
                os.write(fd, self.next.pop(0) if self.next else self.default)
                unread = array.array("i", [0])

                def drained(fd: int = fd, unread: array.array = unread) -> bool:
                    fcntl.ioctl(fd, termios.FIONREAD, unread)
                    return unread[0] == 0

                self._wait(drained)
            finally:
                os.close(fd)
            self._wait(lambda: self._readers() == 0)

    @contextlib.contextmanager
    def running(self) -> Iterator[SwappingPlan]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)


def test_a_plan_swapped_after_its_digest_was_checked_never_runs(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    benign = stage(workspace, tmp_path / "benign.json", "benign.txt", "shown and confirmed\n")
    evil = stage(workspace, tmp_path / "evil.json", "evil.txt", "never confirmed\n")
    assert benign != evil
    events = tmp_path / "events.jsonl"
    swapping = SwappingPlan(tmp_path / "plan.json", benign)
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--plan", str(swapping.path))  # fmt: skip
    with swapping.running(), ringfence_process(*argv) as rf:
        swapping.pid = rf.process.pid
        base = rf.wait_for_url()
        visit(page, base + "plans/0")
        shown = page.inner_text("main")
        assert "benign.txt" in shown and "evil.txt" not in shown, shown
        choose(page, "#apply-plan")
        assert "benign.txt" in page.inner_text("main")
        # Confirmed: the apply's first read is the plan shown, its second the other one.
        swapping.next = [benign, evil]
        confirm(page)
        ok, text = job_done(page)
        assert not ok, (text, sorted(p.name for p in workspace.iterdir()))
        assert "changed" in text
        assert not (workspace / "evil.txt").exists() and not (workspace / "benign.txt").exists()
        assert list(workspace.iterdir()) == []

        # The plan as shown, not swapped, applies: the check was the only stop.
        visit(page, base + "plans/0")
        choose(page, "#apply-plan")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
    assert (workspace / "benign.txt").read_text() == "shown and confirmed\n"
    assert not (workspace / "evil.txt").exists()
    recs = records(events)
    written = [r["arguments"]["path"] for r in recs if r["kind"] == "proposed"]
    assert written == ["benign.txt"], written
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["apply", "apply"]


# -- a query of too many fields -----------------------------------------------------------


def get(url: str) -> tuple[int, dict[str, str], str]:
    """``GET url`` on a fresh connection: status, headers (lower-cased names), body."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/" + path)
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def test_a_query_of_too_many_fields_is_a_clear_400(workspace: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        query = "&".join(f"f{i}=x" for i in range(40))
        for path in (f"calls?{query}", f"?{query}", f"approvals?{query}"):
            status, headers, body = get(base + path)
            assert status == 400, (path, status, body)
            assert "16" in body and "field" in body
            assert headers["content-security-policy"].startswith("default-src 'none'")
            assert headers["x-frame-options"] == "DENY"
        status, _, _ = get(base + "calls?tool=x")  # the page goes on
        assert status == 200
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert not any(r["kind"] == "review_action" for r in records(events))


# -- a record whose time cannot be drawn ------------------------------------------------------


# Numbers JSON holds that no clock can draw (NaN and Infinity are not JSON: not records at all).
IMPOSSIBLE_TIMES: list[Any] = [1e308, -1e308, 1e20, 2**63, -(2**70)]


def test_a_record_with_an_impossible_time_takes_no_view_down(
    workspace: Path, tmp_path: Path
) -> None:
    watched = tmp_path / "watched.jsonl"
    lines = [{"kind": "session_started", "ts": 1e308, "trace_id": "t0", "posture": "ask"}]
    for i, ts in enumerate(IMPOSSIBLE_TIMES):
        lines.append(
            {
                "kind": "proposed",
                "call_id": f"c{i}",
                "tool": "read_file",
                "ts": ts,
                "arguments": {"path": f"odd-{i}.txt"},
                "origin": "agent",
            }
        )
        lines.append({"kind": "finished", "call_id": f"c{i}", "ts": ts, "output": "x"})
    lines.append(
        {
            "kind": "proposed",
            "call_id": "fine",
            "tool": "read_file",
            "ts": time.time(),
            "arguments": {"path": "fine.txt"},
            "origin": "agent",
        }
    )
    watched.write_text("".join(json.dumps(r) + "\n" for r in lines))
    before = watched.read_bytes()
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--watch", str(watched))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        for path in ("", "calls", "calls?tool=read_file", "calls?q=odd", "calls/fine",
                     *(f"calls/c{i}" for i in range(len(IMPOSSIBLE_TIMES)))):  # fmt: skip
            status, _, body = get(base + path)
            assert status == 200, (path, status, body[-2000:])
        status, _, body = get(base + "calls")
        assert (
            all(f"odd-{i}.txt" in body for i in range(len(IMPOSSIBLE_TIMES))) and "fine.txt" in body
        )
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert watched.read_bytes() == before  # read-only: the watched stream is unchanged
    assert not any(r["kind"] == "review_action" for r in records(events))


# -- a plan file replaced by something that cannot be read ------------------------------------


def test_a_plan_replaced_by_a_directory_is_refused_and_the_page_goes_on(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    stage(workspace, plan, "staged.txt", "staged\n")
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--plan", str(plan))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + "plans/0")
        choose(page, "#apply-plan")
        plan.unlink()
        plan.mkdir()  # between the confirmation and the apply: not a file any more
        confirm(page)
        ok, text = job_done(page)
        assert not ok and str(plan) in text, text
        status, _, body = get(base + "plans/0")  # the page goes on, and says why
        assert status == 409 and "directory" in body.lower(), (status, body[-1500:])
        assert rf.process.poll() is None
    assert list(workspace.iterdir()) == []
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert not any(r["kind"] == "proposed" for r in records(events))


# -- a watched stream replaced by what cannot be followed ---------------------------------------


def test_a_watched_stream_replaced_by_a_directory_or_a_pipe_leaves_the_page_up(
    workspace: Path, tmp_path: Path
) -> None:
    watched = tmp_path / "watched.jsonl"
    call = {"kind": "proposed", "call_id": "c1", "tool": "read_file", "ts": time.time(),
            "arguments": {"path": "seen.txt"}, "origin": "agent"}  # fmt: skip
    watched.write_text(json.dumps(call) + "\n")
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--watch", str(watched))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        status, _, body = get(base + "calls")
        assert status == 200 and "seen.txt" in body
        for replace in (lambda: watched.mkdir(), lambda: os.mkfifo(watched)):
            if watched.is_dir():
                watched.rmdir()
            else:
                watched.unlink()
            replace()
            time.sleep(1.5)  # the page polls the file every 0.5 s
            assert rf.process.poll() is None, "".join(rf.stderr)[-3000:]
            status, _, body = get(base + "calls")
            assert status == 200 and "seen.txt" in body  # what was read stays shown
            assert "cannot be read" in body, body[-2000:]
        started = time.monotonic()
        assert rf.stop() == 0  # SIGTERM: no thread left blocked on the pipe
        assert time.monotonic() - started < 20
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert not any(r["kind"] == "review_action" for r in records(events))
