"""Bench row (informational): the timeline's first screen for a session of 10,000 calls.

A real stream of 10,000 calls (a kernel, one trivial tool, every call through the
Gate, 40,000+ records) is watched by ``ringfence review --watch``; the browser
loads the timeline, and the time from navigation to its first screen of rows is
measured, cold (the page folds the whole stream on that request) and warm, next
to ``ringfence events show FILE`` on the same file. The goal is ≤ 1 s; the test
fails only when the first screen takes longer than ``events show`` printing the whole
stream (a regression, whatever the machine's load: at load 15 cold took 5.4 s, ``events
show`` 25 s). The numbers go to
bench.json beside the screenshots (docs/review/ with `make docs-screenshots`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import SHOTS, ringfence_process, screenshot, visit, wait_until

from ringfence import create_kernel
from ringfence.runtime import Consequence, ToolSpec

CALLS = 10_000
GOAL_SECONDS = 1.0


async def make_stream(path: Path, workspace: Path) -> None:
    kernel = create_kernel(roots=[workspace], posture="allow-all", events_path=path)

    async def echo(args: dict[str, Any], ctx: Any) -> str:
        return args["text"]

    kernel.register(
        ToolSpec(
            "echo",
            "echo a text",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            echo,
            consequence=Consequence.READ,
        )
    )
    async with kernel:
        for i in range(CALLS):
            await kernel.invoke("echo", {"text": f"call {i}"}, origin="bench")


def first_screen(page: Any, url: str) -> float:
    started = time.perf_counter()
    visit(page, url)
    page.wait_for_selector("#calls tbody tr")
    return time.perf_counter() - started


async def test_the_timeline_of_10000_calls_shows_its_first_screen_quickly(
    workspace: Path, tmp_path: Path
) -> None:
    stream = tmp_path / "events.jsonl"
    await make_stream(stream, workspace)
    lines = stream.read_text().count("\n")
    assert lines > 4 * CALLS  # proposed, decided, started, finished each (and checkpoints)

    started = time.perf_counter()
    shown = subprocess.run(
        [sys.executable, "-m", "ringfence", "events", "show", str(stream)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    events_show = time.perf_counter() - started
    assert shown.stdout.count("echo") == CALLS

    # The browser part is synchronous (Playwright's sync API): run it in a thread.
    import trio

    result = await trio.to_thread.run_sync(_measure, stream, workspace, tmp_path, lines)
    result.update(
        calls=CALLS, records=lines, events_show_seconds=round(events_show, 3), goal=GOAL_SECONDS
    )
    result["ratio_cold_to_events_show"] = round(result["cold_seconds"] / events_show, 3)
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    # A regression, not a loaded machine (5.4 s cold at load 15 where 0.9 s is quiet): the
    # page's first screen against `events show` of the same file, timed in the same run.
    # Quiet, cold is 0.6-0.95x of it and moves with the chain check sharing the page's
    # interpreter; CI measured 1.43x once. A fold gone quadratic takes many times longer.
    assert result["warm_seconds"] <= 3 * events_show, result
    assert result["cold_seconds"] <= 3 * events_show, result


def _measure(stream: Path, workspace: Path, tmp_path: Path, lines: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright
    from review_helpers import CHROMIUM, CHROMIUM_ARGS, need_browser

    need_browser()
    argv = ("review", "--workspace", str(workspace), "--watch", str(stream),
            "--events", str(tmp_path / "page.jsonl"))  # fmt: skip
    with ringfence_process(*argv) as rf, sync_playwright() as playwright:
        base = rf.wait_for_url()
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            # The watched file is read in the background: wait until all of it is in.
            wait_until(
                lambda: page.request.get(base + "version").json()["lines"] >= lines,
                timeout=120,
                what="the whole stream",
            )
            cold = first_screen(page, base + "calls")  # this request folds the whole stream
            assert _calls_shown(page, base) == CALLS
            warm = min(first_screen(page, base + "calls") for _ in range(3))
            filtered = first_screen(page, base + "calls?q=call+9999")
            assert page.locator("#calls tbody tr").count() == 1
            visit(page, base + "calls")
            screenshot(page, "timeline-10000")
        finally:
            browser.close()
    return {
        "cold_seconds": round(cold, 3),
        "warm_seconds": round(warm, 3),
        "filtered_seconds": round(filtered, 3),
    }


def _calls_shown(page: Any, base: str) -> int:
    text = page.request.get(base + "calls").text()
    marker = " of "
    at = text.find(marker, text.find('id="count"'))
    if at < 0:
        return 0
    digits = text[at + len(marker) :].split(" ", 1)[0].replace(",", "")
    return int(digits) if digits.isdigit() else 0
