"""What an Undo or an approval on the review page does is what the page showed (stop 47).

* A forced Undo of a change set whose file a later change set wrote again: the later set
  was made before the set's page was drawn (or before the page reloaded itself on that
  activity), so it was in the page's view and the stop-46 binding let the force through,
  but neither the set's page nor the confirmation named it anywhere: the person confirmed
  "files changed since will be overwritten" without any sign that the agent's newer write
  of that very file was among them. Now both pages name every later set over the set's
  files (with the files they share), and the confirmation says force overwrites them.
* A question about a path of 300 characters with a Cyrillic letter in its middle: the
  approval prompt draws a path whole up to 4,096 characters, so it read as plain ASCII
  there, but its note in code points kept only the first and last 92 characters of each
  argument ("⟨… 37 of 300 chars not shown …⟩"): the one letter that told it apart was
  exactly what the note left out. Now the note covers at least what the prompt shows of
  each argument (and of the tool's name, and the host it runs on).
* A server's tool with 24 made-up text fields, each ``caf\u00e9``, and a ``path``: the note
  took the first 20 arguments beyond ASCII in the call's own order, then "… and more", so
  the path ``conf\u0456g.py`` was never noted. Now it notes them in the prompt's order
  (decisive arguments first) and counts those left out.
* While a forced Undo's own question waited on the page (the default posture asks about
  every undo), the agent wrote the file again: the page had checked the store once, before
  the question, and the approved undo overwrote the newer write. Now the page sends the
  newest set it showed (``since``) and the undo tool refuses, right before it merges, a
  newer set over the same files.
* A dry run staged ``undo {id, force: true}``; the plan's page and the Apply's confirmation
  showed that line alone: neither the set it reverses nor the newer write of the same file
  its force overwrites. Now a staged undo is shown with its set's diff and the later sets
  over its files, on both pages.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
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
    steady,
    url_in,
    visit,
)
from test_review_diff import agent_writes
from test_review_page import _mcp_call_in_thread


def test_a_forced_undo_names_the_later_writes_it_overwrites_before_it_is_confirmed(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    first = agent_writes(workspace, events, "a.txt", "the first write\n")
    later = agent_writes(workspace, events, "a.txt", "the agent's newer write\n")
    agent_writes(workspace, events, "other.txt", "unrelated\n")
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        shown = steady(page, lambda p: p.inner_text("main"), url=base + f"changes/{first}")
        page.check("form:has(#undo-set) input[name=force]")
        choose(page, "#undo-set")
        confirming = page.inner_text("main")
        # Nothing happened before Confirm.
        assert (workspace / "a.txt").read_text() == "the agent's newer write\n"
        assert not any(r["kind"] == "review_action" for r in records(events))
        # The set's page and the confirmation both name the newer write the force overwrites.
        assert later in shown and "Changed again since" in shown, shown
        assert later in page.inner_text("#undo-overwrites"), confirming
        assert "a.txt" in page.inner_text("#undo-overwrites"), confirming
        assert "FORCE overwrites" in confirming, confirming
        confirm(page)  # seen, so it may be done: the person chose it
        ok, text = job_done(page)
        assert ok, text
    assert not (workspace / "a.txt").exists()  # the first write's before-image: no file
    assert (workspace / "other.txt").read_text() == "unrelated\n"


def test_a_lookalike_in_the_middle_of_a_long_path_is_noted_in_code_points(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    path = "src/" + "a" * 140 + "/conf\u0456g/" + "b" * 140 + ".py"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "write_file", {"path": path, "content": "x = 1\n"}
    )
    try:
        base = url_in(errlog)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        prompt = page.inner_text("section.question pre.prompt")
        assert path in prompt, prompt  # drawn whole: it reads as ASCII there
        note = page.inner_text("section.question .code-points")
        assert "conf\\u0456g" in note, note
        choose(page, "section.question button[value=deny]")
        assert "conf\\u0456g" in page.inner_text("main")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        out["answered"].wait(60)
        assert not any(workspace.iterdir())
    finally:
        out["release"].set()
        thread.join(60)


def _undo_outcome(events: Path, timeout: float = 60.0) -> dict[str, Any]:
    """The record of the outcome of the page's ``undo`` call, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = records(events)
        calls = {r.get("call_id") for r in recs if r["kind"] == "proposed" and r["tool"] == "undo"}
        done = [
            r
            for r in recs
            if r["kind"] in ("finished", "failed", "cancelled") and r.get("call_id") in calls
        ]
        if done:
            return done[-1]
        time.sleep(0.2)
    raise AssertionError(f"no outcome of the undo: {records(events)[-5:]}")


def test_a_forced_undo_asked_about_refuses_a_write_made_while_the_question_waited(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    first = agent_writes(workspace, events, "a.txt", "the first write\n")
    # The default posture (ask): the page's own undo call is asked about, on the page.
    argv = ("review", "--workspace", str(workspace), "--events", str(events))
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        steady(page, lambda p: p.inner_text("main"), url=base + f"changes/{first}")
        page.check("form:has(#undo-set) input[name=force]")
        choose(page, "#undo-set")
        assert "undo-overwrites" not in page.content()  # nothing later: nothing named
        confirm(page)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        assert "undo" in page.inner_text("section.question pre.prompt")
        # While the undo's question waits, the agent writes the same file again.
        agent_writes(workspace, tmp_path / "agent.jsonl", "a.txt", "the agent's newer write\n")
        choose(page, "section.question button[value=once]")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text  # the answer was delivered
        outcome = _undo_outcome(events)
    assert (workspace / "a.txt").read_text() == "the agent's newer write\n", outcome
    assert outcome["kind"] == "failed", outcome


def test_undo_back_to_a_set_undoes_later_sets_over_the_same_file(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    first = agent_writes(workspace, events, "a.txt", "one\n")
    agent_writes(workspace, events, "a.txt", "two\n")
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        steady(page, lambda p: p.inner_text("main"), url=base + f"changes/{first}")
        choose(page, "#undo-back")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text  # this job's own undo of the later set is no write made since
    assert not (workspace / "a.txt").exists()


def test_a_lookalike_path_is_noted_however_many_other_fields_are_beyond_ascii(
    page: Any, workspace: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "pub"\ntransport = "stdio"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = [{json.dumps(str(HERE / 'servers' / 'many_fields.py'))}]\n"
    )
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    arguments = {f"note_{i:02d}": "caf\u00e9" for i in range(24)}
    arguments["path"] = "conf\u0456g.py"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "mcp.pub.publish", arguments,
        "--mcp", "--expose", "native,connectors",
    )  # fmt: skip
    try:
        base = url_in(errlog)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        assert "conf\u0456g.py" in page.inner_text("section.question pre.prompt")
        note = page.inner_text("section.question .code-points")
        assert "path = conf\\u0456g.py" in note, note
        choose(page, "section.question button[value=deny]")
        assert "path = conf\\u0456g.py" in page.inner_text("main")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        assert out["answered"].wait(60), out
        assert out["result"].is_error
    finally:
        out["release"].set()
        thread.join(60)
    recs = records(events)
    assert not any(r["kind"] == "finished" and r["tool"] == "mcp.pub.publish" for r in recs)


def test_a_staged_forced_undo_shows_its_set_and_the_later_writes_before_it_is_applied(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    first = agent_writes(workspace, events, "a.txt", "the first write\n")
    later = agent_writes(workspace, events, "a.txt", "the agent's newer write\n")
    plan = tmp_path / "plan.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "ringfence", "call", "undo",
            "--args", json.dumps({"id": first, "force": True}),
            "--workspace", str(workspace), "--posture", "allow-all", "--dry-run", str(plan),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = ("review", "--workspace", str(workspace), "--events", str(tmp_path / "r.jsonl"),
            "--posture", "allow-all", "--plan", str(plan))  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        shown = steady(page, lambda p: p.inner_text("main"), "section.staged", url=base + "plans/0")
        # The set the undo reverses, and the newer write its force overwrites.
        assert "the first write" in shown and f"change set {first}" in shown, shown
        assert later in page.inner_text("#later-1"), shown
        choose(page, "#apply-plan")
        confirming = page.inner_text("main")
        assert later in page.inner_text("#apply-later-0"), confirming
    assert (workspace / "a.txt").read_text() == "the agent's newer write\n"
