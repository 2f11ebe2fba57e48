"""The cyclic collector's pause around a change set's capture: counted, and never overruling a
host that switched the collector off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from ringfence.workspace.changes._collector import collector_paused


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_a_pause_switches_the_collector_off_and_back_on() -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the inner end does not switch it on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_ends_the_pause() -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_the_host_switched_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_concurrent_pauses_share_one_and_the_last_out_ends_it() -> None:
    entered, release_first, first_done = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            entered.set()
            release_first.wait(10)
        first_done.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    with collector_paused():
        release_first.set()
        assert first_done.wait(10)
        seen.append(gc.isenabled())  # the first pause ended; this one still holds
    thread.join(10)
    assert seen == [False]
    assert gc.isenabled()
