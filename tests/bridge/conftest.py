"""Bridge fixtures: every test must leave no script runner behind."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_helpers import Ledger, runner_processes


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture(autouse=True)
def no_leftover_runners():
    yield
    # run_script reaps its child before it returns, so nothing should be left; a
    # process that is only being torn down by the kernel gets a moment.
    deadline = time.monotonic() + 1.0
    while runner_processes() and time.monotonic() < deadline:
        time.sleep(0.02)
    leftovers = runner_processes()
    for proc in leftovers:
        proc.kill()
    assert not leftovers, f"script runners left behind: {[p.pid for p in leftovers]}"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory under /tmp for a host's TMPDIR, removed after the test.

    A run's bridge socket lives in ``$TMPDIR/ringfence-bridge-*/``; under pytest's own
    ``tmp_path`` (``/tmp/pytest-of-root/pytest-0/popen-gw0/test_…0/``) its address passes the
    107 bytes a Unix socket address holds. A killed host cannot remove its bridge
    directory: this fixture does.
    """
    path = Path(tempfile.mkdtemp(prefix="rf-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
