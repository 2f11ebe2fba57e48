"""A flood of unauthenticated requests against a real ``ringfence serve --transport http``.

Each refusal used to append a signed ``serve_refused`` record holding the whole
path: 2,000 requests with long paths grew the event log by megabytes in about a
second. Now the log grows by a bounded amount per window and still verifies.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
import trio
from serve_helpers import http_serve_process, real_command, records

from ringfence.runtime import verify_file
from ringfence.serve._http import MAX_RECORDED_PATH, RefusalAudit, clip_middle

REQUESTS = 2000
PATH_CHARS = 10_000
GROWTH_BOUND = 48 * 1024  # 20 records of <= 256-char paths, one summary, the seal


@pytest.mark.slow
async def test_a_flood_of_refused_requests_grows_the_log_by_a_bounded_amount(
    workspace: Path, events: Path
) -> None:
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    async with http_serve_process(argv) as server:
        before = events.stat().st_size
        base = server.url.rsplit("/", 1)[0]
        statuses: list[int] = []

        async def attacker(n: int) -> None:
            # A new connection per request: reusing a kept-alive one races the server closing
            # it ("Server disconnected without sending a response") on a loaded machine.
            limits = httpx2.Limits(max_keepalive_connections=0)
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0), limits=limits) as http:
                for i in range(n, REQUESTS, 16):
                    path = f"/{i:05d}" + "A" * PATH_CHARS + "\u202e"
                    statuses.append((await http.post(base + path, content=b"{}")).status_code)

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for n in range(16):
                    nursery.start_soon(attacker, n)
        assert statuses == [401] * REQUESTS
        assert await server.stop() == 0

    growth = events.stat().st_size - before
    assert growth < GROWTH_BOUND, f"the event log grew by {growth} bytes"
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems
    recs = records(events)
    single = [r for r in recs if r["kind"] == "serve_refused"]
    summaries = [r for r in recs if r["kind"] == "serve_refused_summary"]
    assert 0 < len(single) <= 20
    assert all(len(r["path"]) <= MAX_RECORDED_PATH for r in single)
    assert all(r["path_length"] == PATH_CHARS + 7 and "\\u202e" in r["path"] for r in single)
    assert "\u202e" not in events.read_text(encoding="utf-8")  # bidi escaped, never raw
    assert len(single) + sum(s["count"] for s in summaries) == REQUESTS
    assert all(s["statuses"] == {"401": s["count"]} for s in summaries)
    assert "A" * 1000 not in json.dumps(recs)


def test_the_audit_records_the_first_refusals_per_window_then_sums_up() -> None:
    now = [0.0]
    written: list[tuple[str, dict]] = []
    audit = RefusalAudit(
        emit=lambda kind, **data: written.append((kind, data)),
        clock=lambda: now[0],
        per_window=3,
        window_seconds=10.0,
    )
    scope = {"method": "GET", "path": "/x", "client": ("127.0.0.1", 5)}
    for _ in range(10):
        audit.refused(401, scope)
    assert [k for k, _ in written] == ["serve_refused"] * 3
    now[0] = 11.0  # the next window: the summary of the last one, then records again
    audit.refused(421, scope)
    assert [k for k, _ in written][3:] == ["serve_refused_summary", "serve_refused"]
    summary = written[3][1]
    assert summary["count"] == 7 and summary["statuses"] == {"401": 7}
    assert summary["clients"] == ["127.0.0.1"]
    audit.flush()  # nothing counted since: nothing written
    assert len(written) == 5


def test_clip_middle_keeps_head_and_tail_escaped() -> None:
    clipped = clip_middle("/head" + "x" * 60_000 + "\x1b[2Jtail")
    assert len(clipped) <= MAX_RECORDED_PATH
    assert clipped.startswith("/head") and clipped.endswith("\\u001b[2Jtail") and "…" in clipped
    assert clip_middle("/mcp") == "/mcp"
