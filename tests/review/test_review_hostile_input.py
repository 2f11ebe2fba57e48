"""Attacks on the review page through what it reads and what it is sent, each through its
public interface (``ringfence review``, raw HTTP and a real browser).

* A watched event stream holding records nested deeper than any the kernel writes
  (``[[[[…]]]]`` 1,020 levels in a call's arguments, its tool, a session's trace id): the
  page stays up (it exited with "unexpected error: RecursionError", its session with it),
  every view answers, the deep lines are shown as not records, the chain as tampered.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import records, ringfence_process, visit, wait_until


def get(url: str) -> tuple[int, str]:
    """``GET url`` on a fresh connection: status, body."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/" + path)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


# -- records nested past every renderer's depth -------------------------------------------------

DEEP = "[" * 1020 + "]" * 1020  # past Python's recursion limit, within orjson's parser's 1,024
NESTED = "[" * 200 + "]" * 200  # within the bound: drawn


def test_a_watched_record_nested_past_the_renderers_depth_takes_no_view_down(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    now = time.time()

    def line(record: dict[str, Any]) -> str:
        """``record`` as a line, its ``"<DEEP>"``/``"<NESTED>"`` strings as those lists."""
        return json.dumps(record).replace('"<DEEP>"', DEEP).replace('"<NESTED>"', NESTED)

    lines = [
        line({"kind": "session_started", "ts": now, "trace_id": "t0", "posture": "ask"}),
        line({"kind": "proposed", "ts": now, "call_id": "deep-args", "tool": "write_file",
              "arguments": {"path": "deep.txt", "x": "<DEEP>"}, "origin": "agent"}),
        line({"kind": "proposed", "ts": now, "call_id": "deep-tool", "tool": "<DEEP>",
              "arguments": {}}),
        line({"kind": "session_started", "ts": now, "trace_id": "<DEEP>", "posture": "<DEEP>"}),
        line({"kind": "proposed", "ts": now, "call_id": "nested", "tool": "write_file",
              "arguments": {"path": "nested.txt", "x": "<NESTED>"}, "origin": "agent"}),
        line({"kind": "failed", "ts": now, "call_id": "nested", "output": "<NESTED>",
              "error": {"code": "<NESTED>", "message": "<NESTED>"}}),
        line({"kind": "proposed", "ts": now, "call_id": "fine", "tool": "read_file",
              "arguments": {"path": "fine.txt"}, "origin": "agent"}),
    ]  # fmt: skip
    watched = tmp_path / "watched.jsonl"
    watched.write_text("\n".join(lines) + "\n")
    before = watched.read_bytes()
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--watch", str(watched))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        # The fold runs in the background: wait until it reached the last line.
        wait_until(lambda: "fine.txt" in get(base + "calls")[1] or rf.process.poll() is not None,
                   what="the stream folded")  # fmt: skip
        wait_until(lambda: 'data-state="tampered"' in get(base + "calls")[1]
                   or rf.process.poll() is not None, what="the chain checked")  # fmt: skip
        assert rf.process.poll() is None, "".join(rf.stderr)[-3000:]
        for path in ("", "calls", "calls?q=deep", "calls/nested", "calls/fine"):
            status, body = get(base + path)
            assert status == 200, (path, status, body[-2000:])
        status, body = get(base + "calls")
        assert "nested.txt" in body and "fine.txt" in body
        assert "deep.txt" not in body  # a line nested that deep is no record: not drawn
        assert get(base + "calls/deep-args")[0] == 404
        visit(page, base + "calls/nested")  # and in a browser, the page as a person sees it
        assert page.get_attribute("#integrity", "data-state") == "tampered"
        assert "nested.txt" in page.inner_text("#call-prompt")
        assert rf.process.poll() is None, "".join(rf.stderr)[-3000:]
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert "unexpected error" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert watched.read_bytes() == before  # read-only
    assert not any(r["kind"] == "review_action" for r in records(events))
