"""The review page in a real browser: see what a confined command did, undo it, answer the Gate.

Every test runs real parts: ``ringfence call run_shell`` in the local sandbox
(bubblewrap, change sets), ``ringfence review`` and ``ringfence serve --review``
as processes, the official MCP SDK client, Debian's chromium (see
review_helpers). The screenshots in docs/review/ are the ones these tests take (`make docs-screenshots`).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    call_run_shell,
    choose,
    confirm,
    job_done,
    records,
    ringfence_process,
    screenshot,
    steady,
    url_in,
    visit,
    wait_until,
)

BEFORE = {
    "app.py": b"def main():\n    print('hello')\n",
    "README.md": b"# demo\n\nold text\n",
}


def digest_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_confined_shell_command_shows_its_diff_and_undo_restores_the_bytes(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    for name, data in BEFORE.items():
        (workspace / name).write_bytes(data)
    before = digest_tree(workspace)
    events = tmp_path / "events.jsonl"
    result = call_run_shell(
        workspace,
        events,
        "sed -i 's/hello/hello, review/' app.py && printf '# demo\\n\\nnew text\\n' > README.md"
        " && printf 'added\\n' > NEW.txt",
    )
    set_id = result["changes"]["id"]
    assert result["changes"]["files"] == 3
    assert digest_tree(workspace) != before

    # The page's own session (posture ask): its Undo is a Gate call the page is asked about.
    with ringfence_process("review", "--workspace", str(workspace), "--events", str(events)) as rf:
        base = rf.wait_for_url()
        # The rows of one document, read at once (a live reload may come between two reads).
        rows = steady(
            page,
            lambda p: p.eval_on_selector_all(
                "#calls tbody tr",
                "rs => rs.map(r => r.innerText).filter(t => t.includes('run_shell'))",
            ),
            "#calls tbody tr:has-text('run_shell')",
            url=base,
        )
        assert len(rows) == 1 and "finished" in rows[0], rows
        screenshot(page, "timeline")

        choose(page, "#calls tbody tr:has-text('run_shell') a >> nth=0", "#call-prompt")
        assert "WILL RUN" not in page.inner_text("#call-prompt")  # short: shown whole
        assert "sed -i" in page.inner_text("#call-prompt")
        screenshot(page, "call")

        choose(page, f"a[href$='/changes/{set_id}']", "#diff")
        diff = page.inner_text("#diff")
        for name in ("app.py", "README.md", "NEW.txt"):
            assert f"b/{name}" in diff
        assert "-    print('hello')" in diff and "+    print('hello, review')" in diff
        assert "-old text" in diff and "+new text" in diff and "+added" in diff
        screenshot(page, "change-set")

        choose(page, "#undo-set")
        assert set_id in page.inner_text("#undo-targets")
        screenshot(page, "confirm-undo")
        confirm(page)

        # The Gate asks about the undo (posture ask): answer it on the page.
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        assert "undo" in page.inner_text("section.question pre.prompt")
        screenshot(page, "approvals")
        choose(page, "section.question button[value=once]")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text

        # The job's page reloads itself: a reload landing after this visit began took its
        # place (the undo's row waited for on the job's page, 30 s).
        steady(page, lambda p: True, "#calls tbody tr >> text=undo", url=base + "calls")
        ok = wait_until(lambda: digest_tree(workspace) == before, what="the undo")
        assert ok
    assert {p.name for p in workspace.iterdir()} == set(BEFORE)  # NEW.txt gone
    for name, data in BEFORE.items():
        assert (workspace / name).read_bytes() == data

    # Everything the page did is in the stream: the action, the answer, the undo call.
    recs = records(events)
    actions = [r for r in recs if r["kind"] == "review_action"]
    assert [a["action"] for a in actions] == ["undo", "answer"]
    assert actions[0]["ids"] == [set_id]
    undo = [r for r in recs if r["kind"] == "proposed" and r["tool"] == "undo"]
    assert len(undo) == 1 and undo[0]["origin"] == "review"
    answered = [r for r in recs if r["kind"] == "approval_answered" and r["tool"] == "undo"]
    assert answered[0]["choice"] == "once" and "review page" in answered[0]["reason"]
    assert not any(
        "token" in json.dumps(r) and rf.url and rf.url.split("/")[3] in json.dumps(r) for r in recs
    )


# -- serve: a client that cannot be asked --------------------------------------------------


def _mcp_call_in_thread(
    workspace: Path,
    events: Path,
    errlog: Path,
    tool: str,
    arguments: dict[str, Any],
    *extra: str,
) -> tuple[threading.Thread, dict[str, Any]]:
    """``ringfence serve --review`` over stdio from the SDK client (no elicitation), in a thread."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    out: dict[str, Any] = {"release": threading.Event(), "answered": threading.Event()}

    async def flow() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "ringfence",
                "serve",
                "--review",
                "--workspace",
                str(workspace),
                "--events",
                str(events),
                *extra,
            ],
            env={k: v for k, v in __import__("os").environ.items()},
        )
        with errlog.open("w") as log:
            async with Client(
                stdio_client(params, errlog=log),
                mode="legacy",
                cache=None,
                read_timeout_seconds=120.0,
            ) as client:
                result = await client.call_tool(tool, arguments)
                out["result"] = result
                out["answered"].set()
                # Stay connected (serve, and its page, live as long as the client) until told.
                await trio.to_thread.run_sync(out["release"].wait, abandon_on_cancel=True)

    def run() -> None:
        try:
            trio.run(flow)
        except BaseException as exc:  # reported to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("choice", ["once", "deny"])
def test_serve_asks_the_page_when_the_client_cannot_be_asked(
    page: Any, workspace: Path, tmp_path: Path, choice: str
) -> None:
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    target = workspace / "note.txt"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "write_file", {"path": "note.txt", "content": "from the agent\n"}
    )
    base = url_in(errlog)
    visit(page, base + "approvals")
    page.wait_for_selector("section.question")
    prompt = page.inner_text("section.question pre.prompt")
    assert prompt.startswith("write_file (") and "path: note.txt" in prompt
    assert "via mcp" in prompt
    if choice == "once":
        screenshot(page, "serve-approval")
    assert not target.exists()  # waiting: nothing written yet
    choose(page, f"section.question button[value={choice}]")
    confirm(page)
    ok, text = job_done(page)
    assert ok, text
    out["answered"].wait(60)
    out["release"].set()
    thread.join(60)
    assert "error" not in out, out.get("error")
    result = out["result"]
    recs = wait_until(
        lambda: [r for r in records(events) if r["kind"] == "session_sealed"] and records(events),
        what="the sealed stream",
    )
    call = next(r for r in recs if r["kind"] == "proposed" and r["tool"] == "write_file")
    kinds = [r["kind"] for r in recs if r.get("call_id") == call["call_id"]]
    answered = next(
        r for r in recs if r["kind"] == "approval_answered" and r["call_id"] == call["call_id"]
    )
    assert "review page" in answered["reason"]
    if choice == "once":
        assert not result.is_error, _text(result)
        assert target.read_text() == "from the agent\n"
        assert "started" in kinds and "finished" in kinds
    else:
        assert result.is_error and "denied" in _text(result)
        assert not target.exists()  # a deny leaves no effect
        assert "started" not in kinds and answered["choice"] == "deny"
        assert list(workspace.iterdir()) == []
