"""What a change set's capture and merge may do to the process around them.

The cyclic collector's pause: counted, never overruling a host that switched the
collector off, and taken only when the caller that owns the process asked for it
(``create_kernel(pause_collector=True)``). The merge's closer thread: started and
joined by the merge, so none outlives it. Through ``create_kernel`` and a real
``run_shell`` on the confined backend (bubblewrap, overlays) where it matters.
"""

from __future__ import annotations

import gc
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence import create_kernel
from ringfence.workspace.changes._collector import collector_paused

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


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


# -- through a kernel: a shell command's change set, captured and merged --------------------

WRITE = (
    "import os, sys\n"
    "os.makedirs('lib', exist_ok=True)\n"
    "for i in range(int(sys.argv[1])):\n"
    "    open(f'lib/m{i}.js', 'w').write(sys.argv[2] * 8)\n"
)


def _switches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every switch of the process's collector from here on, recorded (and still made)."""
    seen: list[str] = []
    for name in ("disable", "enable", "freeze", "unfreeze"):
        real = getattr(gc, name)

        def spy(real=real, name=name) -> None:  # type: ignore[no-untyped-def]
            seen.append(name)
            real()

        monkeypatch.setattr(gc, name, spy)
    return seen


async def _write_files(root: Path, count: int, text: str, **options: object) -> None:
    async with create_kernel(roots=[root], posture="unrestricted", **options) as kernel:
        assert kernel.registry.get("run_shell") is not None
        out = await kernel.invoke(
            "run_shell", {"command": ["python3", "-c", WRITE, str(count), text]}
        )
        assert out.error is None and out.value["exit_code"] == 0, out
        assert out.value["changes"]["files"] >= count, out.value  # captured and merged


@needs_bwrap
async def test_a_library_callers_merge_leaves_the_process_collector_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switches = _switches(monkeypatch)
    await _write_files(tmp_path, 300, "a")
    assert switches == []  # not asked: the collector is the process owner's
    assert gc.isenabled()


@needs_bwrap
async def test_a_process_owner_may_lend_the_collector_to_the_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switches = _switches(monkeypatch)
    await _write_files(tmp_path, 300, "a", pause_collector=True)
    assert switches == ["disable", "enable"]  # held off for the capture, then back on
    assert gc.isenabled()


def _release_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ringfence-release")]


@needs_bwrap
async def test_no_thread_outlives_the_merge_that_replaced_files(tmp_path: Path) -> None:
    """Replaced files' old descriptors are closed off the merge's path, on a thread the merge
    joins: afterwards no such thread runs and no descriptor is left open."""
    await _write_files(tmp_path, 300, "a")
    before = set(os.listdir("/proc/self/fd"))
    await _write_files(tmp_path, 300, "b")  # every file replaced: 300 old inodes released
    assert (tmp_path / "lib" / "m299.js").read_text() == "b" * 8
    assert _release_threads() == []
    assert set(os.listdir("/proc/self/fd")) <= before
