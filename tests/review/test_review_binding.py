"""A confirmation on the review page is bound to what the page showed, performed in a browser.

* An Undo (forced: "also restore files changed since") confirmed after the agent
  changed the same file again (a change set made between the page's listing and the
  click): before, the agent's newer write was overwritten, unseen; now the undo is
  refused, saying which set changed what, and nothing is undone.
* An Undo confirmed after the same set was undone elsewhere (the terminal's
  ``ringfence undo``): before, it was undone a second time; now it is refused.
* A person about to approve the first of two waiting questions, when the first
  times out and a third arrives: before, the page reloaded itself and the second
  question moved up under the pointer, so the click (and a hurried Confirm)
  approved a call the person never read; now a page with questions waiting never
  reloads itself (it offers to), the click answers the question read, which is no
  longer waiting (409), and nothing is approved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    HERE,
    choose,
    confirm,
    job_done,
    records,
    ringfence_process,
    url_in,
    visit,
    wait_until,
)
from test_review_refusals import write_with_agent


def ringfence(*argv: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def undo_sets(workspace: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", "checkpoints", "list", "--workspace", str(workspace),
         "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    listed = json.loads(proc.stdout)["result"]
    return [s for s in listed if s.get("undoes")]


def prepare_forced_undo(page: Any, base: str, set_id: str) -> None:
    visit(page, base + f"changes/{set_id}")
    page.check("form:has(#undo-set) input[name=force]")
    choose(page, "#undo-set")
    assert "FORCE" in page.inner_text("main")


def test_a_forced_undo_confirmed_after_the_file_changed_again_is_refused(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    target = workspace / "a.txt"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        prepare_forced_undo(page, base, set_id)
        # Between the listing and the click, the agent writes the same file again.
        ringfence("call", "write_file", "--args",
                  json.dumps({"path": "a.txt", "content": "the agent's newer write\n"}),
                  "--workspace", str(workspace), "--events", str(tmp_path / "agent.jsonl"),
                  "--approve", "yes")  # fmt: skip
        confirm(page)
        ok, text = job_done(page)
        assert not ok, text
        assert "since the page showed" in text and "a.txt" in text, text
    assert target.read_text() == "the agent's newer write\n"  # not overwritten unseen
    recs = records(events)
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["undo"]
    assert not any(r["kind"] == "proposed" and r["tool"] == "undo" for r in recs)
    assert undo_sets(workspace) == []


def test_an_undo_confirmed_after_the_set_was_undone_elsewhere_is_refused(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        prepare_forced_undo(page, base, set_id)
        ringfence("undo", set_id, "--workspace", str(workspace),
                  "--events", str(tmp_path / "terminal.jsonl"), "--approve", "yes")  # fmt: skip
        confirm(page)
        ok, text = job_done(page)
        assert not ok, text
        assert "undone or removed since the page showed it" in text, text
    assert len(undo_sets(workspace)) == 1  # the terminal's, and no second undo
    assert not any(r["kind"] == "proposed" and r["tool"] == "undo" for r in records(events))


def test_a_question_never_moves_under_the_pointer_of_a_person_about_to_answer(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "asker.stderr"
    with errlog.open("w") as log:
        asker = subprocess.Popen(
            [sys.executable, str(HERE / "servers" / "asker.py"), str(workspace), "8"],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    try:
        base = url_in(errlog)
        wait_until(
            lambda: page.request.get(base + "approvals").text().count('class="question"') == 2,
            what="two questions",
        )
        visit(page, base + "approvals")
        first = page.locator("section.question").first
        assert "first.txt" in first.inner_text()
        box = first.locator("button[value=once]").bounding_box()
        assert box is not None
        # The first question times out and a third arrives while the person reads the first.
        wait_until(
            lambda: "third.txt" in page.request.get(base + "approvals").text(),
            what="the third question",
        )
        page.wait_for_timeout(1000)  # the page would have reloaded itself 300 ms after that
        # The person clicks where "Approve once…" of the question read is, and confirms.
        with page.expect_navigation():
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        if page.locator("#confirm").count():  # a confirmation: of a question never read
            page.wait_for_selector("#confirm:not([disabled])")
            with page.expect_navigation():
                page.click("#confirm")
            page.wait_for_selector("#job-state")
        out, _ = asker.communicate(timeout=60)
    finally:
        if asker.poll() is None:
            asker.kill()
            asker.wait(10)
    assert json.loads(out.strip().splitlines()[-1]) == {
        "first.txt": False, "second.txt": False, "third.txt": False
    }  # fmt: skip
    assert list(workspace.iterdir()) == []  # nothing approved, nothing written
    assert "no longer waiting" in page.inner_text("main")  # the question read: gone
