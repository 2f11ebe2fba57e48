"""The review page's memory is bounded by its own limits, not by the stream it is shown.

A watched stream (``--watch``) of three times :data:`MAX_HELD_BYTES`, plus one
line longer than :data:`MAX_LINE_BYTES` and no newline in sight for a while, is
read by a real ``ringfence review`` process: its peak resident memory stays
under a bound that the whole stream would break (it held every line, read the
file whole at once, and folded every call), the page says which lines it does
not hold, still shows the newest calls, and the process never fails.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import records, ringfence_process, wait_until
from test_review_attacks import get

from ringfence import create_kernel
from ringfence.review._feed import MAX_HELD_BYTES, MAX_LINE_BYTES

PADDING = "p" * 900


def write_stream(path: Path, size: int) -> int:
    """Calls of ~1 KiB (``proposed`` records) until ``size`` bytes; how many lines."""
    lines = 0
    with open(path, "w") as f:
        written = 0
        while written < size:
            line = json.dumps(
                {
                    "kind": "proposed",
                    "call_id": f"c{lines}",
                    "tool": "echo",
                    "ts": time.time(),
                    "arguments": {"text": f"call-{lines}-{PADDING}"},
                    "origin": "agent",
                }
            )
            f.write(line + "\n")
            written += len(line) + 1
            lines += 1
        # one line longer than the page ever holds
        f.write(json.dumps({"kind": "notice", "text": "x" * (MAX_LINE_BYTES + 10)}) + "\n")
        lines += 1
        f.write(json.dumps({"kind": "proposed", "call_id": "last", "tool": "echo",
                            "ts": time.time(), "arguments": {"text": "the-newest-call"},
                            "origin": "agent"}) + "\n")  # fmt: skip
        lines += 1
    return lines


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_stream_three_times_the_limit_is_held_to_the_limit(
    workspace: Path, tmp_path: Path
) -> None:
    watched = tmp_path / "watched.jsonl"
    total = write_stream(watched, 3 * MAX_HELD_BYTES)
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--watch", str(watched))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()

        def read_all() -> bool:
            status, _, body = get(base + "version")
            return status == 200 and json.loads(body)["lines"] >= total

        wait_until(read_all, timeout=240, what="the whole stream read")
        status, _, body = get(base + "calls")
        assert status == 200, body[-2000:]
        assert "the-newest-call" in body  # the newest calls are shown
        assert 'id="dropped"' in body and "are not shown" in body, body[:4000]
        assert 'id="clipped"' in body
        # Over the size the page verifies: it says so, and how to verify it whole.
        assert 'data-state="partial"' in body and "events verify" in body, body[:4000]
        status, _, body = get(base + "calls/c0")
        assert status == 404  # the oldest call is not held (and the page says so above)
        # Measured: 326 MiB peak with the bound; 709 MiB before (every line held, all folded).
        peak = peak_rss_bytes(rf.process.pid)
        assert peak < 5 * MAX_HELD_BYTES + (120 << 20), f"peak RSS {peak >> 20} MiB"
        assert rf.process.poll() is None
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    assert not any(r["kind"] == "review_action" for r in records(events))


async def test_a_record_over_the_line_limit_is_not_held_and_the_chain_is_verified_from_the_file(
    workspace: Path, tmp_path: Path
) -> None:
    stream = tmp_path / "events.jsonl"
    kernel = create_kernel(roots=[workspace], posture="allow-all", events_path=stream)
    async with kernel:
        await kernel.invoke(
            "write_file", {"path": "big.txt", "content": "b" * (MAX_LINE_BYTES + 1)}
        )
        await kernel.invoke("write_file", {"path": "small.txt", "content": "the-small-one\n"})
    assert max(len(line) for line in stream.read_bytes().split(b"\n")) > MAX_LINE_BYTES

    import trio

    def look() -> str:
        argv = ("review", "--workspace", str(workspace), "--watch", str(stream),
                "--events", str(tmp_path / "page.jsonl"))  # fmt: skip
        with ringfence_process(*argv) as rf:
            base = rf.wait_for_url()

            def verified() -> str | None:
                _, _, body = get(base + "calls")
                return body if 'data-state="intact"' in body else None

            return wait_until(verified, timeout=60, what="the chain verified from the file")

    body = await trio.to_thread.run_sync(look)
    assert 'id="clipped"' in body and "small.txt" in body
