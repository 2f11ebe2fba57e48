"""What a person confirms on the review page is what the page they acted from showed.

* A forced Undo (the box "also restore files changed since" ticked on a change set's
  page, which then holds still: a ticked box is never cleared by a reload) clicked after
  the agent wrote the same file again: the page the person read never showed that newer
  write, yet the undo was prepared from the store as it stood at the click, so the
  confirmation listed only the set and the newer write was overwritten, unseen. Now the
  Undo form names the view it was drawn from (the sets the page showed, kept by the page,
  never sent by the browser), and a set made since over the targets' paths refuses it.
* Two paths that differ only in a run of spaces (``a  b.txt``, ``a b.txt``) were drawn
  alike in the change sets, the Undo's targets and its result: HTML collapses a run of
  spaces outside ``<pre>``. Now no text of the page collapses (``white-space: pre-wrap``).
* A plan staged by a dry run to write ``conf\\u0456g.py`` (a Cyrillic ``\\u0456``): its
  page and the confirmation of its apply drew the call as writing ``config.py``, though
  a question about the same call shows its code points. Now a staged call's tool and
  arguments beyond ASCII are shown in code points where the plan is shown and confirmed.
* A server's tool asked about with a list of paths (``{"paths": ["conf\\u0456g.py"]}``):
  only an argument that was itself a text was noted in code points, so a lookalike
  nested in a list or an object was drawn as ``config.py``. Now every argument is noted
  as the prompt draws it (its JSON).
* A watched stream rewritten whole under a new key (here: another run's stream, whose key
  the page never knew) was shown "intact" and nothing more, as if the page vouched for
  it. Now the page names the sessions signed by a key that is not its own session's and
  says how to pin them; a stream of the page's own session alone says nothing of it.
* A change set of 150 text files of 930 KB each (a command the agent ran): its page read
  and diffed all of them (50 s, 640 MB more of the page's memory, again at every reload),
  to show its first 4,000 lines. Now a set's text is read up to 4 MiB in all; the files
  after are named with their size and hash.
* A file of 100,000 short lines of 105 values (400 KB) rewritten by the agent: difflib's
  line matching is quadratic on such lines, and the set's page (and ``checkpoints show``)
  did not come back in 5 minutes, a thread of the page busy all along. Now a change of
  more than 20,000 lines (its common head and tail set aside) is shown as one block, every
  old line deleted and every new one added: a true diff, in linear time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    HERE,
    call_run_shell,
    choose,
    confirm,
    job_done,
    records,
    ringfence_process,
    steady,
    url_in,
    visit,
)
from test_review_attacks import stage
from test_review_binding import ringfence, undo_sets
from test_review_bounds import peak_rss_bytes
from test_review_diff import agent_writes
from test_review_page import _mcp_call_in_thread
from test_review_refusals import write_with_agent


def test_a_forced_undo_of_a_page_read_before_the_file_changed_again_is_refused(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    target = workspace / "a.txt"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + f"changes/{set_id}")
        page.wait_for_selector("#diff")
        page.wait_for_timeout(500)  # a reload the page was about to do, done
        page.check("form:has(#undo-set) input[name=force]")  # the page holds still now
        shown = page.inner_text("main")
        # While the person reads, the agent writes the same file again.
        ringfence("call", "write_file", "--args",
                  json.dumps({"path": "a.txt", "content": "the agent's newer write\n"}),
                  "--workspace", str(workspace), "--events", str(tmp_path / "agent.jsonl"),
                  "--approve", "yes")  # fmt: skip
        page.wait_for_timeout(1500)  # the page saw the activity and offered it, not reloaded
        assert page.inner_text("main") == shown
        assert page.is_checked("form:has(#undo-set) input[name=force]")
        page.click("#undo-set")
        page.wait_for_load_state()
        text = page.inner_text("main")
        if page.query_selector("#confirm") is not None:  # the old page: it was confirmable
            page.wait_for_selector("#confirm:not([disabled])")
            page.click("#confirm")
            page.wait_for_selector('#job-state[data-done="1"]', timeout=60_000)
            text = page.inner_text("main")
        assert "since the page showed" in text and "a.txt" in text, text
    assert target.read_text() == "the agent's newer write\n"  # not overwritten unseen
    recs = records(events)
    assert not any(r["kind"] == "review_action" for r in recs), recs
    assert not any(r["kind"] == "proposed" and r["tool"] == "undo" for r in recs)
    assert undo_sets(workspace) == []


def test_paths_that_differ_in_a_run_of_spaces_are_not_drawn_alike(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    one = agent_writes(workspace, events, "a b.txt", "one\n")
    two = agent_writes(workspace, events, "a  b.txt", "two\n")
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        rows = steady(
            page,
            lambda p: {s: p.inner_text(f"tr[data-set='{s}'] td.args") for s in (one, two)},
            "#sets",
            url=base + "changes",
        )
        assert rows[one] != rows[two], rows
        assert "a  b.txt" in rows[two], rows
        steady(page, lambda p: True, "#diff", url=base + f"changes/{two}")  # a reload may race
        choose(page, "#undo-set")
        targets = page.inner_text("#undo-targets")
        assert "a  b.txt" in targets, targets
    assert (workspace / "a b.txt").read_text() == "one\n"
    assert (workspace / "a  b.txt").read_text() == "two\n"


def test_a_staged_call_to_a_lookalike_path_shows_its_code_points_before_it_is_applied(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    stage(workspace, plan, "conf\u0456g.py", "x = 1\n")
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--plan", str(plan))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        shown = steady(
            page, lambda p: p.inner_text("section.staged"), "section.staged", url=base + "plans/0"
        )
        assert "conf\\u0456g.py" in shown, shown
        choose(page, "#apply-plan")
        confirming = page.inner_text("main")
        assert "conf\\u0456g.py" in confirming, confirming
    assert list(workspace.iterdir()) == []
    assert not any(r["kind"] == "review_action" for r in records(events))


def test_a_lookalike_path_nested_in_a_list_argument_shows_its_code_points(
    page: Any, workspace: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "files"\ntransport = "stdio"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = [{json.dumps(str(HERE / 'servers' / 'lookalike_files.py'))}]\n"
    )
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "mcp.files.remove", {"paths": ["conf\u0456g.py"]},
        "--mcp", "--expose", "native,connectors",
    )  # fmt: skip
    try:
        base = url_in(errlog)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        assert "conf\u0456g.py" in page.inner_text("section.question pre.prompt")
        note = page.inner_text("section.question")
        assert "conf\\u0456g.py" in note, note
        choose(page, "section.question button[value=deny]")
        assert "conf\\u0456g.py" in page.inner_text("main")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        assert out["answered"].wait(60), out
        assert out["result"].is_error
    finally:
        out["release"].set()
        thread.join(60)
    recs = records(events)
    assert not any(r["kind"] == "finished" and r["tool"] == "mcp.files.remove" for r in recs)


def test_a_stream_signed_by_keys_the_page_does_not_know_is_not_shown_as_vouched_for(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    forged = tmp_path / "forged.jsonl"
    write_with_agent(workspace, forged)  # a whole stream under a key the page never held
    argv = ("review", "--workspace", str(workspace), "--watch", str(forged))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + "calls")
        page.wait_for_selector('#integrity[data-state="intact"]')
        badge = page.inner_text("#integrity")
        assert "1 of 1 session(s) signed by a key this page cannot vouch for" in badge, badge
        assert "--public-key" in badge, badge
    own = tmp_path / "own.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(own))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + "calls")
        page.wait_for_selector('#integrity[data-state="open"]')
        assert page.query_selector("#unpinned") is None, page.inner_text("#integrity")


def test_a_change_set_of_many_large_files_is_drawn_in_bounded_time_and_memory(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    made = call_run_shell(
        workspace, events,
        "for i in $(seq 150); do head -c 700000 /dev/urandom | base64 > f$i.txt; done",
    )  # fmt: skip
    set_id = made["changes"]["id"]
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + "calls")
        before = peak_rss_bytes(rf.process.pid)
        started = time.monotonic()
        page.goto(base + f"changes/{set_id}", timeout=180_000)
        diff = steady(page, lambda p: p.inner_text("#diff"))  # a live reload may intervene
        took = time.monotonic() - started
        grew = peak_rss_bytes(rf.process.pid) - before
        assert grew < 200 << 20, grew  # 640 MB before
        assert took < 40, took  # 45-50 s before, unloaded; 2 s now
        assert "not shown here" in diff, diff[-2000:]
        for i in (1, 77, 150):  # every file still named
            assert f"f{i}.txt" in diff, i
    assert len(list(workspace.iterdir())) == 150


AWK = "awk 'BEGIN{srand(%d); for(i=0;i<100000;i++) printf \"%%03d\\n\", int(rand()*105)}' > big.txt"


def test_a_file_rewritten_with_many_repeating_lines_is_diffed_in_bounded_time(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    call_run_shell(workspace, events, AWK % 1)
    set_id = call_run_shell(workspace, events, AWK % 2)["changes"]["id"]
    written = (workspace / "big.txt").read_bytes()
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        started = time.monotonic()
        page.goto(base + f"changes/{set_id}", timeout=90_000)
        diff = steady(page, lambda p: p.inner_text("#diff"))  # a live reload may intervene
        took = time.monotonic() - started
        assert took < 20, took  # more than 5 minutes before
        assert "one changed block" in diff, diff[:2000]
        assert "b/big.txt" in diff and "more lines of this file not shown" in diff
    assert (workspace / "big.txt").read_bytes() == written
