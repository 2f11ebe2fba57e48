"""More attacks on the review page, each performed through its public interface.

* A plan file swapped between the read whose sha256 the person confirmed and the
  read the plan is run from (another signed plan put in its place while the first
  read is under way: what an agent that can write the plan's directory gets by
  swapping two plans in a loop): the swapped-in plan never runs, nothing is written.
* A plan file replaced by a directory after it was confirmed: that action fails,
  saying why, and the page goes on (it stopped the whole process before).
* A plan file replaced by a named pipe no one writes: refused at once, and the page
  still stops on SIGTERM (the view hung, and so did the stop, before).
* A watched stream replaced by a directory or a named pipe: the page stays up, keeps
  what it read, says the file cannot be read, and still stops promptly.
* A query of more fields than the page reads: a clear 400, with the page's
  headers, no traceback, nothing done.
* An event stream (``--watch``, or ``--events`` read at start) holding a record
  whose time cannot be drawn (out of range, not a number): every view still
  answers, nothing is hidden, no traceback.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    choose,
    confirm,
    get,
    job_done,
    page_address,
    records,
    ringfence_process,
    visit,
)

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


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p]  # fmt: skip
_IN_OPEN = 0x20
_IN_CLOEXEC = os.O_CLOEXEC
_FAN_CLASS_CONTENT, _FAN_CLOEXEC, _FAN_MARK_ADD = 0x4, 0x1, 0x1
_FAN_OPEN_PERM, _FAN_ALLOW, _AT_FDCWD = 0x10000, 0x1, -100
_FAN_EVENT = "IBBHQii"  # struct fanotify_event_metadata: len, vers, reserved, len, mask, fd, pid


class SwapOnOpen:
    """Once armed, replaces ``path`` with ``other`` (``os.replace``) the moment anyone opens
    ``path``, so the read that open began goes on with the old file and the next open gets
    ``other``. With fanotify (root: CAP_SYS_ADMIN) the open waits for the swap (a
    permission event, answered "allow" once ``other`` is in place): no race at all. Without
    it, inotify reports the open as it returns and ``padded`` says the plan must be padded
    so that its read outlasts the watcher's wake-up (an inotify run on a loaded CI machine
    lost that race twice at 64 MiB)."""

    def __init__(self, path: Path, other: Path) -> None:
        self.path = path
        self.other = other
        self.swapped = threading.Event()
        self._stop = threading.Event()
        self._fd = _LIBC.fanotify_init(_FAN_CLASS_CONTENT | _FAN_CLOEXEC, os.O_RDONLY)
        self.padded = self._fd < 0
        if self.padded:
            self._fd = _LIBC.inotify_init1(_IN_CLOEXEC)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def arm(self) -> None:
        if self.padded:
            added = _LIBC.inotify_add_watch(self._fd, os.fsencode(self.path), _IN_OPEN)
        else:
            added = _LIBC.fanotify_mark(
                self._fd, _FAN_MARK_ADD, _FAN_OPEN_PERM, _AT_FDCWD, os.fsencode(self.path)
            )
        if added < 0:
            raise OSError(ctypes.get_errno(), "watching the plan's opens")
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.1)
            if not ready:
                continue
            if self.padded:
                os.replace(self.other, self.path)
                self.swapped.set()
                return
            data, offset = os.read(self._fd, 4096), 0
            while offset < len(data):  # every open read at once is answered, each once
                length, *_, event_fd, _pid = struct.unpack_from(_FAN_EVENT, data, offset)
                offset += length
                try:
                    if not self.swapped.is_set():
                        os.replace(self.other, self.path)
                        self.swapped.set()
                finally:  # the opener waits for this answer, whatever happened above
                    os.write(self._fd, struct.pack("iI", event_fd, _FAN_ALLOW))
                    os.close(event_fd)

    @contextlib.contextmanager
    def running(self) -> Iterator[SwapOnOpen]:
        try:
            yield self
        finally:
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join(10)
            os.close(self._fd)


def test_a_plan_swapped_after_its_digest_was_checked_never_runs(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    stage(workspace, plan, "benign.txt", "shown and confirmed\n")
    evil = tmp_path / "evil.json"
    stage(workspace, evil, "evil.txt", "never confirmed\n")
    events = tmp_path / "events.jsonl"
    swap = SwapOnOpen(plan, evil)
    if swap.padded:  # inotify only: the same plan, its read slower (under the page's bound)
        with plan.open("ab") as f:
            f.write(b" " * (120 << 20))
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--plan", str(plan))  # fmt: skip
    with swap.running(), ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + "plans/0")
        shown = page.inner_text("main")
        assert "benign.txt" in shown and "evil.txt" not in shown, shown
        choose(page, "#apply-plan")
        assert "benign.txt" in page.inner_text("main")
        # Confirmed: the apply's read of the plan is under way when the other one is put in.
        swap.arm()
        confirm(page)
        ok, text = job_done(page)
        assert swap.swapped.is_set()
        assert not ok, (text, sorted(p.name for p in workspace.iterdir()))
        assert "changed" in text
        assert list(workspace.iterdir()) == []
        # The plan now at the path is the other one: shown as it is, it is what would apply.
        visit(page, base + "plans/0")
        shown = page.inner_text("main")
        assert "evil.txt" in shown and "benign.txt" not in shown, shown
    assert list(workspace.iterdir()) == []
    recs = records(events)
    assert not any(r["kind"] == "proposed" for r in recs)
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["apply"]


# -- a query of too many fields -----------------------------------------------------------


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


def _raw_answer(port: int, request: bytes) -> tuple[int, dict[str, str], list[str]]:
    """``request`` sent as it is on a fresh connection: the status and headers answered (and
    the names of every header, repeated ones as many times)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.connect()
        assert conn.sock is not None
        conn.sock.sendall(request)
        response = http.client.HTTPResponse(conn.sock, method="GET")
        response.begin()
        response.read()  # the whole answer, as a client does, before the connection closes
        names = [k.lower() for k, _ in response.getheaders()]
        return response.status, {k.lower(): v for k, v in response.getheaders()}, names
    finally:
        conn.close()


def test_every_refusal_carries_the_pages_frame_and_sniffing_headers(
    workspace: Path, tmp_path: Path
) -> None:
    """The guard answers a wrong token, a foreign Host or Origin and a body too large before
    the page's routes: until 2026-12-07 those answers carried none of the page's headers (no
    X-Frame-Options, no frame-ancestors, no nosniff, no no-store), so another site could
    frame them and a browser keep them. Every answer carries them now."""
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        port, token, host = page_address(base)
        asked = {
            401: f"GET /not-the-token/ HTTP/1.1\r\nHost: {host}\r\n\r\n",
            421: f"GET /{token}/ HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n",
            403: f"GET /{token}/ HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n\r\n",
            413: f"POST /{token}/confirm HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 200000\r\n\r\n",
            404: f"GET /{token}/nowhere HTTP/1.1\r\nHost: {host}\r\n\r\n",
            200: f"GET /{token}/calls HTTP/1.1\r\nHost: {host}\r\n\r\n",
        }
        for expected, request in asked.items():
            status, headers, names = _raw_answer(port, request.encode())
            assert status == expected, (expected, status, headers)
            assert headers.get("x-frame-options") == "DENY", (status, headers)
            assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), headers
            assert headers.get("x-content-type-options") == "nosniff", (status, headers)
            assert headers.get("cache-control") == "no-store", (status, headers)
            assert names.count("x-frame-options") == names.count("content-security-policy") == 1
        status, _, _ = get(base + "calls")  # the page goes on
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


def test_a_plan_replaced_by_a_pipe_hangs_neither_the_page_nor_its_stop(
    workspace: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    stage(workspace, plan, "staged.txt", "staged\n")
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--plan", str(plan))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        status, _, body = get(base + "plans/0")
        assert status == 200 and "staged.txt" in body
        plan.unlink()
        os.mkfifo(plan)  # no writer ever comes: a blocking open would wait forever
        status, _, body = get(base + "plans/0")
        assert status == 409 and "not a regular file" in body, (status, body[-1500:])
        started = time.monotonic()
        assert rf.stop() == 0  # SIGTERM: the page stops, the session seals
        assert time.monotonic() - started < 20
    assert list(workspace.iterdir()) == []
    assert records(events)[-1]["kind"] == "session_sealed"
    assert not any(r["kind"] in ("proposed", "review_action") for r in records(events))


def test_clients_closing_mid_body_never_take_the_page_down(workspace: Path, tmp_path: Path) -> None:
    """A request that declares a body and closes before sending it, answered at once (413 for
    a body over the bound, 401 without the token): hypercorn closed the connection while its
    protocol answered the cut request, trio refused the second sender (BusyResourceError),
    and that error left hypercorn's connection task and ended the page, after a few dozen
    such connections from any local process. Now the page goes on and prints no error."""
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        port, token, host = page_address(base)
        cut = [
            f"POST /{token}/confirm HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 200000\r\n\r\n",
            f"POST /not-the-token/confirm HTTP/1.1\r\nHost: {host}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 200000\r\n\r\n",
        ]
        for round_ in range(60):
            for request in cut:
                with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                    conn.sendall(request.encode())
                    if round_ % 2:
                        conn.recv(100)
            assert rf.process.poll() is None, "".join(rf.stderr)[-3000:]
        status, _, _ = get(base + "calls")  # the page goes on
        assert status == 200
    assert "BusyResourceError" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert "unexpected error" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
