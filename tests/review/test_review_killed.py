"""The review page's "Undo back to a set" killed midway, performed in a browser.

The page ran one ``undo`` call per change set. ``ringfence review`` SIGKILLed between two
of them (``strace --inject`` at its second or third write of the workspace) left the sets
undone before the kill undone, and the next start of any writer rolled back only the set in
flight: a tree that was neither before nor after the undo. Now the page's undo is one
``undo`` call over all its sets (``id`` a list), one operation in the journal: the next
start rolls every set of it back, and the tree is wholly as it was before the undo.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import URL_LINE, choose, records, visit, wait_until
from tree_helpers import exact_state

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def _write(workspace: Path, events: Path, path: str, content: str) -> str:
    """``ringfence call write_file`` (approved): its change set's id."""
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", "call", "write_file",
         "--args", json.dumps({"path": path, "content": content}),
         "--workspace", str(workspace), "--events", str(events), "--approve", "yes", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return str(json.loads(proc.stdout)["result"]["checkpoint"])


def _listed(workspace: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", "checkpoints", "list", "--workspace", str(workspace),
         "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return list(json.loads(proc.stdout)["result"])


@needs_strace
@pytest.mark.parametrize("when", [2, 3])
def test_an_undo_back_to_a_set_killed_midway_is_rolled_back_whole(
    page: Any, workspace: Path, tmp_path: Path, when: int
) -> None:
    events = tmp_path / "events.jsonl"
    (workspace / "a").write_text("old\n")
    (workspace / "b").write_text("old\n")
    ids = [
        _write(workspace, events, "a", "a1\n"),
        _write(workspace, events, "a", "a2\n"),
        _write(workspace, events, "b", "b1\n"),
    ]
    before = exact_state(workspace)
    errlog = tmp_path / "review.stderr"
    argv = [sys.executable, "-m", "ringfence", "review", "--workspace", str(workspace),
            "--events", str(events), "--posture", "allow-reversible"]  # fmt: skip
    with errlog.open("wb") as err:
        # Killed (every process of it) as it enters its when-th rename in the workspace: the
        # undo of b is written, then (when=3) that of the newer a, and no more.
        process = subprocess.Popen(
            ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat",
             "-e", f"inject=renameat:signal=KILL:when={when}", "-P", str(workspace), *argv],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            base = wait_until(
                lambda: URL_LINE.search(errlog.read_text(errors="replace")),
                timeout=60,
                what="the review URL",
            ).group(1)
            visit(page, base + f"changes/{ids[0]}")
            choose(page, "#undo-back")
            assert all(i in page.inner_text("#undo-targets") for i in ids)
            page.wait_for_selector("#confirm:not([disabled])")
            # The click's answer may never come: the page is killed as it undoes. (Clicked
            # again if the process lives on: a second click of a spent confirmation does nothing.)
            for _ in range(3):
                with contextlib.suppress(Exception):  # playwright's Error: the page went away
                    page.click("#confirm", no_wait_after=True, timeout=10_000)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(60)
                    break
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    assert process.returncode in (-9, 137), (process.returncode, errlog.read_text()[-3000:])
    assert exact_state(workspace) != before  # killed midway: mixed until the next start

    # The next start of any writer (here `checkpoints list`) rolls the whole undo back.
    listed = {s["id"]: s for s in _listed(workspace)}
    assert exact_state(workspace) == before
    assert sorted(listed) == sorted(ids), listed  # no undo set left behind
    assert not any(s["undone_by"] for s in listed.values()), listed
    assert any(r["kind"] == "review_action" and r["action"] == "undo" for r in records(events))
