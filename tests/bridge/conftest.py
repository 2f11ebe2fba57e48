"""Bridge fixtures: every test must leave no script runner behind."""

from __future__ import annotations

import time

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
