"""Hostile strings on the review page: an MCP server's and an agent's text renders inert.

A real hostile MCP server (servers/hostile_page.py: markup, script, ``javascript:``
URLs, control and bidi characters) behind ``ringfence serve --review``, called by
the SDK client with hostile arguments of 1 MB. Its questions, results and errors
are shown on the page; no script of theirs may run: the page must show no dialog,
raise no error, report no Content-Security-Policy violation (a blocked inline
script would be one), grow no element of theirs, and show their text as text.
"""

from __future__ import annotations

import json
import re
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
    screenshot,
    steady,
    url_in,
    visit,
    wait_until,
)
from test_review_page import _mcp_call_in_thread, _text

ARGUMENT = (
    "<script>window.__pwned='arg'</script>\u202egnp.exe\u202c javascript:alert(1) \x1b[31m"
    " invisible:\U000e0139\U000e0157\u3164"  # variation selectors, a filler: drawn as nothing
    + "A" * 1_000_000
    + "<img src=x onerror=\"window.__pwned='tail'\">"
)

# Drawn as nothing (default-ignorable): variation selectors, fillers, the grapheme joiner.
INVISIBLE = re.compile("[\u034f\u3164\ufe00-\ufe0f\U000e0000-\U000e0fff]")

# What a page that ran none of it holds: our one script, none of their elements or handlers.
INERT_CHECK = """() => ({
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
  scripts: [...document.scripts].map(s => s.src.split('/').pop()),
  foreign: document.querySelectorAll('img, iframe, svg, object, embed, style, form[action$="pwned"]').length,
  handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
  jsLinks: document.querySelectorAll('a[href^="javascript:" i]').length,
  bodyShown: getComputedStyle(document.body).display !== 'none',
})"""


def _evaluate(page: Any, script: str) -> Any:
    """``page.evaluate``, again when the page reloaded itself meanwhile (a live update)."""
    for _ in range(20):
        try:
            return page.evaluate(script)
        except Exception as exc:  # playwright's Error: the context went with a reload
            if "context was destroyed" not in str(exc):
                raise
            page.wait_for_load_state()
    raise AssertionError("the page kept reloading")


def assert_inert(page: Any) -> None:
    state = _evaluate(page, INERT_CHECK)
    assert state == {
        "pwned": None,
        "scripts": ["review.js"],
        "foreign": 0,
        "handlers": 0,
        "jsLinks": 0,
        "bodyShown": True,
    }, state
    assert page.watch.dialogs == []
    assert page.watch.errors == []
    assert _evaluate(page, "window.__violations") == []


def test_a_hostile_servers_strings_render_inert(
    page: Any, workspace: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "evil"\ntransport = "stdio"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = [{json.dumps(str(HERE / 'servers' / 'hostile_page.py'))}]\n"
    )
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    thread, out = _mcp_call_in_thread(
        workspace, events, errlog, "mcp.evil.shout", {"text": ARGUMENT},
        "--mcp", "--expose", "native,connectors",
    )  # fmt: skip
    try:
        base = url_in(errlog)
        visit(page, base + "approvals")
        page.wait_for_selector("section.question")
        prompt = page.inner_text("section.question pre.prompt")
        assert prompt.startswith("mcp.evil.shout (")
        assert "<script>window.__pwned='arg'</script>" in prompt  # shown as text
        assert "\\u202e" in prompt and "\u202e" not in prompt  # bidi escaped, as at a terminal
        assert "\\x1b" in prompt and "\x1b" not in prompt
        assert "invisible:\\U000e0139\\U000e0157\\u3164" in prompt  # shown, escaped
        assert not INVISIBLE.search(prompt)
        assert "not shown" in prompt  # 1 MB: head…tail with its size and digest
        assert "1,000," in prompt
        assert_inert(page)
        screenshot(page, "hostile-approval")
        choose(page, "section.question button[value=once]")
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        assert out["answered"].wait(60), out
        result = out["result"]
        assert not result.is_error, _text(result)

        # The call, its hostile result, on the timeline and the call's own page.
        visit(page, base + "calls")
        row = page.locator("#calls tbody tr", has_text="mcp.evil.shout")
        seen: list[str] = []

        def finished_row() -> bool:
            seen[:] = [row.nth(i).inner_text() for i in range(row.count())]
            return len(seen) == 1 and "finished" in seen[0]

        # A loaded machine (CI's two workers, a browser each) can take a while to record it.
        try:
            wait_until(finished_row, timeout=90, what="the row")
        except AssertionError:
            raise AssertionError(f"the call's row, finished, not shown: rows {seen}") from None
        assert_inert(page)
        # The call's own page, again when a live reload of the timeline took its place.
        href = row.locator("a").first.get_attribute("href")
        assert href is not None
        output = steady(
            page, lambda p: p.inner_text("#call-output"), "#call-output",
            url=base[: base.index("/", len("http://"))] + href,
        )  # fmt: skip
        # The recorded result (redacted, framed, cut by the kernel) shows their markup as text.
        assert "<script>window.__pwned" in output and "<img src=x onerror=" in output
        assert "javascript:" in output
        assert "\u202e" not in output and "\x1b" not in output
        assert "invisible:\\U000e0139" in output and not INVISIBLE.search(output)
        assert_inert(page)
        screenshot(page, "hostile-call")
    finally:
        out["release"].set()
        thread.join(60)
    assert "error" not in out, out.get("error")
    recs = records(events)
    assert any(r["kind"] == "finished" and r["tool"] == "mcp.evil.shout" for r in recs)
