"""Every code block of the README, the docs site and the files it publishes runs here, or says why not.

The runner and the markers a page may use are described in :mod:`docs_blocks`. One test per page:
its blocks run in order, in one workspace, sharing one Python namespace, so a later block may
use what an earlier one made, as a reader following the page would.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from docs_blocks import REPO, PageRun, missing_need, pages, read_blocks, unclassified

PAGES = pages()


def _param(page: Path) -> object:
    """The page, marked with what its blocks need (``needs=``): the suite's tiers follow."""
    needs = {b.options.get("needs") for b in read_blocks(page)} - {None}
    marks = []
    if "bwrap" in needs:  # conftest.py marks it `sandbox`
        marks.append(pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap"))
    if "docker" in needs:
        marks.append(pytest.mark.docker)
    return pytest.param(page, marks=marks, id=str(page.relative_to(REPO)))


def test_every_block_runs_or_says_why_not() -> None:
    problems = [
        f"{block.where}: {why}"
        for page in PAGES
        for block in read_blocks(page)
        if (why := unclassified(block))
    ]
    assert problems == []


def test_the_pages_have_blocks_to_run() -> None:
    runnable = [b for p in PAGES for b in read_blocks(p) if b.not_run_reason is None]
    assert len(runnable) >= 50, len(
        runnable
    )  # the collector finds them (a regex gone wrong finds none)


@pytest.mark.parametrize("page", [_param(p) for p in PAGES])
def test_the_page_s_blocks_run(page: Path, tmp_path: Path) -> None:
    blocks = [b for b in read_blocks(page) if b.not_run_reason is None]
    if not blocks:
        pytest.skip("no block to run on this page")
    for block in blocks:
        if why := missing_need(block):
            if block.options.get("needs") == "docker" and os.environ.get(
                "RINGFENCE_REQUIRE_DOCKER"
            ):
                pytest.fail(f"{block.where}: {why} (RINGFENCE_REQUIRE_DOCKER=1)")
            pytest.skip(f"{block.where}: {why}")
    run = PageRun(tmp_path)
    for block in blocks:
        run.run(block)
