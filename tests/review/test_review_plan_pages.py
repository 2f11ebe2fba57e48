"""A plan of many staged calls on the review page, performed in a browser.

The plan's page drew every staged call (its prompt, its arguments whole, the ledger mark)
at each view and at each live reload: a dry run of 20,000 small calls took 25 s a view and
a 4 MB page, 100 calls of 1 MB took 630 MB of the page's memory. Now it draws
:data:`PLAN_ROWS` calls a page (``?page=N``, links to the calls before and after), and the
plan's bytes, when unchanged, are not parsed and checked again from one view to the next;
Apply still applies every call of the plan, as its bytes were confirmed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import choose, confirm, job_done, ringfence_process, steady, visit
from test_review_attacks import stage

from ringfence.review._site import PLAN_ROWS
from ringfence.runtime._plan import Plan


def _many(workspace: Path, plan_path: Path, n: int) -> None:
    """A dry run's plan of ``n`` staged ``write_file`` calls: one staged by a real dry run,
    the others the same call over another file (each its own call id), signed as a dry run
    signs them (the same key, this test's home)."""
    stage(workspace, plan_path, "f0.txt", "staged 0\n")
    plan = Plan.load(plan_path, create_key=False)
    first = plan.calls[0]
    plan.calls = [
        dataclasses.replace(
            first,
            call_id=f"{i:016x}",
            arguments={"path": f"f{i}.txt", "content": f"staged {i}\n"},
        )
        for i in range(n)
    ]
    plan.save(plan_path)


def test_a_plan_of_many_calls_is_drawn_a_page_at_a_time_and_applied_whole(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    n = 3 * PLAN_ROWS + 7
    plan_path = tmp_path / "plan.json"
    _many(workspace, plan_path, n)
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible", "--plan", str(plan_path))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        drawn = steady(
            page, lambda p: p.locator("section.staged").count(), "section.staged", base + "plans/0"
        )
        assert drawn == PLAN_ROWS, drawn  # it drew all n
        assert page.inner_text("#plan-count") == f"calls 1-{PLAN_ROWS} of {n:,} later calls →"
        assert "f0.txt" in page.inner_text("main")
        assert f"f{PLAN_ROWS}.txt" not in page.inner_text("main")

        # The later calls, a page at a time, to the last.
        # Each page is read once it is the one the link leads to: the old page also has a
        # #plan-count, so a read right after the click could count it again (a CI flake:
        # 257 calls seen of 157).
        seen, pages = PLAN_ROWS, 1
        while page.locator("#plan-next").count():
            later = urljoin(page.url, page.get_attribute("#plan-next", "href") or "")
            page.click("#plan-next")
            sections = steady(
                page, lambda p: p.locator("section.staged").count(), "#plan-count", later
            )
            assert sections <= PLAN_ROWS
            seen, pages = seen + sections, pages + 1
            assert pages <= 4, "the later links never end"
        assert seen == n
        assert f"f{n - 1}.txt" in page.inner_text("main")
        assert page.inner_text("#plan-count").startswith(f"calls {3 * PLAN_ROWS + 1}-{n} of")

        # Apply, from any page: every call of the plan runs, not only the page's.
        choose(page, "#apply-plan")
        confirm(page)
        ok, text = job_done(page, timeout=300)
        assert ok, text
    assert sorted(p.name for p in workspace.iterdir()) == sorted(f"f{i}.txt" for i in range(n))
    assert (workspace / f"f{n - 1}.txt").read_text() == f"staged {n - 1}\n"


def test_a_plan_page_past_the_end_names_the_plan_and_offers_the_way_back(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    plan_path = tmp_path / "plan.json"
    _many(workspace, plan_path, 3)
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible", "--plan", str(plan_path))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        for query in ("?page=99999999999999", "?page=x", "?page=-3"):
            visit(page, base + "plans/0" + query)
            text = page.inner_text("#plan-count")
            if query == "?page=99999999999999":
                assert text.startswith("no calls here (the plan stages 3)"), text
                page.click("#plan-prev")
                page.wait_for_selector("section.staged")
            assert page.locator("section.staged").count() in (0, 3)
        assert page.watch.errors == [] and page.watch.dialogs == []
