"""Fixtures for the review page tests; the helpers live in review_helpers.py (importable by name)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from review_helpers import CHROMIUM, CHROMIUM_ARGS, WATCH_SCRIPT, Watch, need_browser


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh context and page, watched for dialogs, errors and CSP violations."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(WATCH_SCRIPT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.watch = Watch(page)  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws
