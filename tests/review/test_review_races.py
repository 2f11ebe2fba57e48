"""Races between what a person confirmed on the review page and what runs, in a browser.

* A forced Undo confirmed while another writer holds the workspace's writers' lock: the
  undo's "nothing newer over these files" check ran before it took that lock, so a writer
  that saved its change set and wrote the same file while the undo waited for the lock had
  its write overwritten unseen. Now the check runs under the lock, right before the merge:
  the undo is refused, the newer write stays, no undo set is made.
* A shell command's write committed, while that undo's question waited on the page, after a
  newer set the person had seen: its set's id was made before it waited for the lock, so it
  sorted before the newer set and passed for one seen. Now ids are made under the lock.
* Bounds of what the agent makes the page draw: a store of hundreds of change sets (a page
  of 100 at a time), a call of 200,000 made-up arguments (refused before it is asked
  about), an argument name of 4 million characters (drawn as the prompt draws it).
"""

from __future__ import annotations

import contextvars
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    confirm,
    job_done,
    records,
    ringfence_process,
    steady,
    url_in,
    visit,
    wait_until,
)
from test_review_binding import prepare_forced_undo, undo_sets
from test_review_refusals import write_with_agent
from test_review_shown import _undo_outcome

from ringfence.workspace._workspace import Workspace
from ringfence.workspace._writelock import writing
from ringfence.workspace.changes._store import CheckpointStore
from ringfence.workspace.changes._undo import _Recorder

NEWER = "the agent's newer write, made while the undo waited\n"


class _Writer:
    """Another writer of the workspace (as a second ``ringfence call write_file`` process
    would be): takes the writers' lock, and when told, saves its change set and writes
    ``a.txt`` under it (the file tools' own recorder and writer), then lets go."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.held = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()
        self.saved: str | None = None
        self.error: BaseException | None = None
        # In the test's context: the lock files and the store lie in the home it names.
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self._run,), daemon=True)

    def _run(self) -> None:
        try:
            with Workspace([self.workspace]) as ws, writing(ws._resolver):
                self.held.set()
                self.go.wait(600)
                store = CheckpointStore(ws)
                try:
                    ctx = SimpleNamespace(tool=SimpleNamespace(name="write_file"), call_id="w")
                    rec = _Recorder(store, ctx)  # type: ignore[arg-type]
                    ws.write_text("a.txt", NEWER, record=rec)
                    assert rec.saved is not None
                    store.journal.end(rec.saved.id)
                    self.saved = rec.saved.id
                finally:
                    store.close()
        except BaseException as exc:  # handed to the test
            self.error = exc
        finally:
            self.held.set()
            self.done.set()


def test_a_forced_undo_refuses_a_write_made_while_it_waited_for_the_writers_lock(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    writer = _Writer(workspace)
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        prepare_forced_undo(page, base, set_id)
        writer.thread.start()
        assert writer.held.wait(60) and writer.error is None, writer.error
        try:
            confirm(page)

            def undo_started() -> bool:
                return any(
                    r["kind"] == "proposed" and r.get("tool") == "undo" for r in records(events)
                )

            wait_until(undo_started, timeout=180, what="the page's undo call")
            # The undo call is allowed (allow-reversible) and now waits for the lock; its
            # check of the store, before the fix, ran meanwhile.
            time.sleep(3)
        finally:
            writer.go.set()
            assert writer.done.wait(60)
        assert writer.error is None, writer.error
        ok, text = job_done(page)
        assert not ok, text
        assert "conflict" in text and writer.saved is not None and writer.saved in text, text
    assert (workspace / "a.txt").read_text() == NEWER  # not overwritten unseen
    assert undo_sets(workspace) == []
    recs = records(events)
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["undo"]
    assert not any(r["kind"] == "checkpoint" and r.get("undoes") for r in recs)


def _agent_writes_sets(workspace: Path, events: Path, total: int) -> None:
    """``total`` change sets, each an agent's ``write_file`` through the API."""
    import trio

    from ringfence import create_kernel

    async def writes() -> None:
        kernel = create_kernel(roots=[workspace], posture="allow-all", events_path=events)
        async with kernel:
            for i in range(total):
                outcome = await kernel.invoke(
                    "write_file", {"path": f"f{i % 5}.txt", "content": f"write {i}\n"}
                )
                assert outcome.ok, outcome

    trio.run(writes)


def _set_rows(page: Any) -> dict[str, Any]:
    """The change-sets page as shown: its rows' ids, its count, its "older" link's tail."""
    return page.evaluate(
        """() => ({
          ids: [...document.querySelectorAll('#sets tbody tr')].map(r => r.dataset.set),
          count: document.querySelector('#count').textContent,
          older: (document.querySelector('#older')?.getAttribute('href') || '')
                   .replace(/^.*(?=\\/changes)/, '') || null,
        })"""
    )


def test_the_change_sets_page_shows_a_page_of_sets_at_a_time(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    """Thousands of change sets (the agent's writes; retention is the operator's) were all
    drawn on one page at each reload. Now :data:`PAGE_ROWS` to a page, every set reachable."""
    from ringfence.review._site import PAGE_ROWS

    total = 2 * PAGE_ROWS + 30
    _agent_writes_sets(workspace, tmp_path / "agent.jsonl", total)
    events = tmp_path / "events.jsonl"
    argv = ("review", "--workspace", str(workspace), "--events", str(events))
    seen: list[str] = []
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        for n in range(3):
            shown = steady(
                page, _set_rows, "#sets", url=base + (f"changes?page={n}" if n else "changes")
            )
            expect = PAGE_ROWS if n < 2 else total - 2 * PAGE_ROWS
            assert len(shown["ids"]) == expect, shown["count"]
            assert f"of {total:,}" in shown["count"]
            seen += shown["ids"]
            # the link a person clicks for the next page, and none after the last
            assert shown["older"] == (f"/changes?page={n + 1}" if n < 2 else None), shown
        visit(page, base + "changes?page=999999")  # past the last: the last page
        assert len(steady(page, _set_rows, "#sets")["ids"]) == total - 2 * PAGE_ROWS
    assert len(seen) == total and len(set(seen)) == total
    assert seen == sorted(seen, reverse=True)  # newest first, none skipped nor repeated


def test_a_call_of_a_million_made_up_arguments_is_refused_before_it_is_asked_about(
    page: Any, workspace: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    """An MCP server's tool whose schema allows any property, called by the agent with
    200,000 made-up arguments (a 3.6 MB message): the Gate drew every one into the question
    (seconds of the session's loop per 100,000; 34 s for a million), and the page showed a
    question of 200,000 lines. Now refused before anything walks them, named, recorded, and
    nothing is asked."""
    import json
    import sys

    from review_helpers import HERE
    from test_review_page import _mcp_call_in_thread, _text

    from ringfence.runtime._kernel import MAX_ARGUMENTS

    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "evil"\ntransport = "stdio"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = [{json.dumps(str(HERE / 'servers' / 'hostile_page.py'))}]\n"
    )
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    arguments: dict[str, Any] = {f"made_up_{i:06d}": "" for i in range(200_000)}
    arguments["text"] = "hello"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "mcp.evil.shout", arguments,
        "--mcp", "--expose", "native,connectors",
    )  # fmt: skip
    try:
        base = url_in(errlog)
        assert out["answered"].wait(120), "the call was not answered: it waits for a person"
        result = out["result"]
        assert result.is_error
        assert f"at most {MAX_ARGUMENTS:,}" in _text(result), _text(result)
        visit(page, base + "approvals")
        page.wait_for_selector("#no-questions")
    finally:
        out["release"].set()
        thread.join(60)
    assert "error" not in out, out.get("error")
    recs = [r for r in records(events) if r.get("tool") == "mcp.evil.shout"]
    proposed = next(r for r in recs if r["kind"] == "proposed")
    assert isinstance(proposed["arguments"], str) and "200,001 arguments" in proposed["arguments"]
    assert not any(r["kind"] in ("approval_asked", "finished") for r in recs), recs
    assert any(r["kind"] == "failed" and "invalid_arguments" in json.dumps(r) for r in recs), recs


def test_an_argument_name_of_megabytes_is_drawn_as_the_prompt_draws_it(
    page: Any, workspace: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    """The agent names an argument with 4 million characters (a permissive MCP tool takes
    any name): the inbox's hint listed every argument name whole, so each view of the
    approvals page was 4 MB more. Now each name as the prompt draws it (80 characters);
    the question is still answered from the page (denied: nothing runs)."""
    import json
    import sys

    from review_helpers import HERE, choose
    from test_review_page import _mcp_call_in_thread

    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "evil"\ntransport = "stdio"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = [{json.dumps(str(HERE / 'servers' / 'hostile_page.py'))}]\n"
    )
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    long_name = "n" * 4_000_000
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "mcp.evil.shout", {"text": "hello", long_name: "x"},
        "--mcp", "--expose", "native,connectors",
    )  # fmt: skip
    try:
        base = url_in(errlog)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        size = page.evaluate("document.documentElement.outerHTML.length")
        assert size < 200_000, f"the approvals page is {size:,} characters"
        assert "chars not shown" in page.inner_text("section.question .hint")
        choose(page, "section.question button[value=deny]")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        assert out["answered"].wait(120), out
        assert out["result"].is_error
    finally:
        out["release"].set()
        thread.join(60)
    assert "error" not in out, out.get("error")
    recs = [r for r in records(events) if r.get("tool") == "mcp.evil.shout"]
    assert not any(r["kind"] == "finished" for r in recs), recs
    assert any(r["kind"] == "approval_answered" for r in recs), recs


class _HeldLock:
    """The workspace's writers' lock held by another writer (as a long merge holds it),
    which writes ``b.txt`` under it when told, then lets go when told."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.held = threading.Event()
        self.write = threading.Event()
        self.written = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self._run,), daemon=True)

    def _run(self) -> None:
        try:
            with Workspace([self.workspace]) as ws, writing(ws._resolver):
                self.held.set()
                self.write.wait(600)
                store = CheckpointStore(ws)
                try:
                    ctx = SimpleNamespace(tool=SimpleNamespace(name="write_file"), call_id="w")
                    rec = _Recorder(store, ctx)  # type: ignore[arg-type]
                    ws.write_text("b.txt", "another file\n", record=rec)
                    assert rec.saved is not None
                    store.journal.end(rec.saved.id)
                finally:
                    store.close()
                self.written.set()
                self.release.wait(600)
        except BaseException as exc:  # handed to the test
            self.error = exc
        finally:
            self.held.set()
            self.written.set()


def test_a_forced_undo_refuses_a_shell_write_committed_after_a_newer_set_was_shown(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    """The agent's shell command writes ``a.txt`` while another writer holds the workspace:
    its change set's id was made before it waited for the lock, so once it was committed,
    after a newer set (``b.txt``) the person had been shown, it sorted before that set and
    passed for one the person had seen. The person's forced Undo of ``a.txt``'s first set,
    asked about on the page while the command's write was committed, then overwrote it.
    Now a set's id is made under the lock: the undo is refused, the shell's write stays."""
    import hashlib
    import json
    import subprocess
    import sys

    from review_helpers import choose

    events = tmp_path / "events.jsonl"
    first = write_with_agent(workspace, events)
    holder = _HeldLock(workspace)
    holder.thread.start()
    assert holder.held.wait(60) and holder.error is None, holder.error
    shell: subprocess.Popen[str] | None = None
    try:
        shell = subprocess.Popen(
            [sys.executable, "-m", "ringfence", "call", "run_shell",
             "--args", json.dumps({"command": "echo shell > a.txt", "timeout_seconds": 900}),
             "--workspace", str(workspace), "--events", str(tmp_path / "shell.jsonl"),
             "--approve", "yes", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        digest = hashlib.sha256(b"shell\n").hexdigest()

        def collected() -> bool:  # its after-image stored: it now waits for the lock
            assert shell is not None and shell.poll() is None, shell and shell.communicate()
            with Workspace([workspace]) as ws:
                store = CheckpointStore(ws)
                try:
                    return store.has(digest)
                finally:
                    store.close()

        wait_until(collected, timeout=300, what="the command's write collected")
        time.sleep(1)
        holder.write.set()  # a newer set, over another file, committed first
        assert holder.written.wait(60) and holder.error is None, holder.error
        argv = ("review", "--workspace", str(workspace), "--events", str(events))
        with ringfence_process(*argv) as rf:
            base = rf.wait_for_url()
            prepare_forced_undo(page, base, first)
            confirm(page)
            visit(page, base + "approvals")
            page.wait_for_selector("section.question")
            # While the undo's question waits, the command's write is committed.
            holder.release.set()
            out, err = shell.communicate(timeout=300)
            assert shell.returncode == 0, out + err
            assert (workspace / "a.txt").read_text() == "shell\n"
            choose(page, "section.question button[value=once]")
            confirm(page)
            ok, text = job_done(page)
            assert ok, text  # the answer was delivered
            outcome = _undo_outcome(events)
    finally:
        holder.write.set()
        holder.release.set()
        holder.thread.join(60)
        if shell is not None and shell.poll() is None:
            shell.kill()
            shell.wait(30)
    assert holder.error is None, holder.error
    assert (workspace / "a.txt").read_text() == "shell\n", outcome  # not overwritten unseen
    assert outcome["kind"] == "failed", outcome
    assert undo_sets(workspace) == []
