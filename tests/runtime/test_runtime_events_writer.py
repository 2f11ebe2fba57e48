"""The fast event writer keeps the log's guarantees: a call's records are written at its
end (or each at once with sync), a crash mid-call leaves an open session, and records
encoded by orjson verify like the canonical form they replace."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ringfence.runtime import CallContext, Consequence, FileSink, Kernel, ToolSpec, verify_file
from ringfence.runtime._canonical import canonical_json
from ringfence.runtime._events import encode_record


def kinds_in(path: Path) -> list[str]:
    return [json.loads(line)["kind"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("sync", [False, True])
async def test_a_calls_records_are_written_at_its_end_or_each_with_sync(
    tmp_path: Path, sync: bool
) -> None:
    path = tmp_path / "events.jsonl"
    seen: list[list[str]] = []

    async def look(args: dict[str, Any], ctx: CallContext) -> float:
        seen.append(kinds_in(path))
        return 1e-05  # a float orjson writes otherwise than json

    async with Kernel(events_sink=FileSink(path, sync=sync)) as kernel:
        kernel.register(ToolSpec("look", "l", {"type": "object"}, look, Consequence.READ))
        assert (await kernel.invoke("look", {})).ok
        after = kinds_in(path)
    during = seen[0]
    if sync:
        assert during[-3:] == ["proposed", "decided", "started"]
    else:
        assert during == ["session_started"]  # the call's records wait for its outcome
    assert after[-4:] == ["proposed", "decided", "started", "finished"]
    assert verify_file(path).ok


def test_a_crash_mid_call_loses_only_that_calls_records_and_reads_as_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    script = textwrap.dedent(
        f"""
        import os, trio
        from ringfence.runtime import Consequence, FileSink, Kernel, ToolSpec
        async def crash(args, ctx):
            os._exit(3)
        async def ok(args, ctx):
            return "ok"
        async def main():
            kernel = Kernel(posture="allow-all", events_sink=FileSink({str(path)!r}))
            kernel.register(ToolSpec("ok", "o", {{"type": "object"}}, ok, Consequence.READ))
            kernel.register(ToolSpec("crash", "c", {{"type": "object"}}, crash, Consequence.READ))
            await kernel.invoke("ok", {{}})
            await kernel.invoke("crash", {{}})
        trio.run(main)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert kinds_in(path) == ["session_started", "proposed", "decided", "started", "finished"]
    assert verify_file(path, allow_open=True).ok
    report = verify_file(path)
    assert not report.ok and any("not sealed" in p for p in report.problems)


async def test_the_orjson_form_verifies_and_exact_bytes_still_count(tmp_path: Path) -> None:
    record = {"kind": "x", "v": 1e-05, "s": "é\n"}
    assert encode_record(record) != canonical_json(record)  # 0.00001 vs 1e-05
    path = tmp_path / "e.jsonl"
    async with Kernel(events_sink=FileSink(path)) as kernel:
        kernel.events.emit("note", kernel.session_id, v=1e-05)
    assert b"0.00001" in path.read_bytes() and verify_file(path).ok
    # The same line re-spaced is still refused (exact bytes).
    lines = path.read_bytes().splitlines()
    n = next(i for i, line in enumerate(lines) if b'"note"' in line)
    lines[n] = lines[n].replace(b'"kind":"note"', b'"kind": "note"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert not verify_file(path).ok
