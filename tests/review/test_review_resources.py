"""What an agent, or a local process without the token, can make the review page spend.

* A plan file the page shows (``--plan``, a dry run's plan in the workspace) replaced by
  a sparse file of a gigabyte, or by a link to a device or to ``/proc``: the page read it
  whole (twice: the bytes, then ``Plan.load``), a 6 GiB one took 15 GB of memory. Now the
  page reads a plan at most :data:`MAX_PLAN_BYTES`, once, from a regular file it checked
  before opening it: refused with a 409 naming the limit, the memory not spent, the page up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import choose, confirm, job_done, records, ringfence_process, visit
from test_review_attacks import get, stage
from test_review_bounds import peak_rss_bytes

from ringfence.review._site import MAX_PLAN_BYTES


def test_a_plan_file_too_large_or_not_a_file_is_refused_without_reading_it(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    stage(workspace, plan, "staged.txt", "staged\n")
    good = plan.read_bytes()
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--plan", str(plan))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + "plans/0")
        assert "staged.txt" in page.inner_text("main")
        choose(page, "#apply-plan")  # confirmed for the plan as shown

        # The agent makes the plan a sparse file of 1 GiB (no disk, all of it zeros).
        before = peak_rss_bytes(rf.process.pid)
        with plan.open("r+b") as f:
            f.truncate(1 << 30)
        status, _, body = get(base + "plans/0")
        assert status == 409, (status, body[-1500:])
        assert f"{MAX_PLAN_BYTES >> 20} MiB" in body, body[-1500:]
        grown = peak_rss_bytes(rf.process.pid) - before
        assert grown < 64 << 20, f"the page's peak memory grew by {grown >> 20} MiB"
        # Confirming the apply prepared before reads no more of it, and nothing runs.
        confirm(page)
        ok, text = job_done(page)
        assert not ok and f"{MAX_PLAN_BYTES >> 20} MiB" in text, text
        assert peak_rss_bytes(rf.process.pid) - before < 64 << 20

        # A link to a device, to /proc: not a regular file, or not one that says its size.
        for target, said in (("/dev/zero", "device"), ("/proc/self/environ", "not a JSON plan")):
            plan.unlink()
            plan.symlink_to(target)
            status, _, body = get(base + "plans/0")
            assert status == 409 and said in body, (target, status, body[-1500:])
        assert rf.process.poll() is None
        assert peak_rss_bytes(rf.process.pid) - before < 64 << 20

        # The plan put back: shown again (nothing above was remembered as the plan).
        plan.unlink()
        plan.write_bytes(good)
        status, _, body = get(base + "plans/0")
        assert status == 200 and "staged.txt" in body
    assert list(workspace.iterdir()) == []
    assert "Traceback" not in "".join(rf.stderr), "".join(rf.stderr)[-3000:]
    recs = records(events)
    assert not any(r["kind"] == "proposed" for r in recs)
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["apply"]
