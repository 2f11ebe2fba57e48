"""A path that looks like another is told apart on the review page before it is changed.

An agent writes ``\\u0430pp.py`` (a Cyrillic ``\\u0430``) next to ``app.py``, and asks to
write ``conf\\u0456g.py`` (a Cyrillic ``\\u0456``): the page drew both as ``app.py``
(the change sets, the diff, the Undo it confirms) and the question as ``config.py``, so
a person approving or undoing one could not tell which file it was. Now every path the
page names as changed, and every argument of a question, that holds a character beyond
ASCII is also shown in code points (``\\u0430pp.py``); an ASCII one is shown as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import choose, confirm, job_done, ringfence_process, steady, url_in, visit
from test_review_diff import agent_writes
from test_review_page import _mcp_call_in_thread

LOOKALIKE = "\u0430pp.py"  # Cyrillic a


def test_a_lookalike_path_is_shown_in_code_points_where_it_is_changed(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    latin = agent_writes(workspace, events, "app.py", "print('app')\n")
    cyrillic = agent_writes(workspace, events, LOOKALIKE, "print('other')\n")
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        rows = steady(
            page,
            lambda p: {s: p.inner_text(f"tr[data-set='{s}']") for s in (latin, cyrillic)},
            "#sets",
            url=base + "changes",
        )
        assert "\\u0430pp.py" in rows[cyrillic], rows
        assert "code points" not in rows[latin], rows
        diff = steady(page, lambda p: p.inner_text("#diff"), url=base + f"changes/{cyrillic}")
        assert "b/\\u0430pp.py" in diff, diff
        choose(page, "#undo-set")
        targets = page.inner_text("#undo-targets")
        assert "\\u0430pp.py" in targets, targets
    assert (workspace / LOOKALIKE).exists() and (workspace / "app.py").exists()


def test_a_question_about_a_lookalike_path_shows_its_code_points(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "write_file", {"path": "conf\u0456g.py", "content": "x = 1\n"}
    )
    try:
        base = url_in(errlog)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        note = page.inner_text("section.question .code-points")
        assert "path = conf\\u0456g.py" in note, note
        choose(page, "section.question button[value=deny]")
        assert "conf\\u0456g.py" in page.inner_text("main")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        out["answered"].wait(60)
        assert not any(workspace.iterdir())
    finally:
        out["release"].set()
        thread.join(60)
