"""A directory swapped for a symlink to outside while resolving in a loop: never escapes.

A thread atomically exchanges ``ws/a`` (a real directory) with a symlink to the
outside directory (``renameat2(RENAME_EXCHANGE)``), as fast as it can, while
the test resolves, reads, searches and writes through ``a/`` in a loop. Every
success must have opened a file under the root with inside content; every
refusal is fine; the outside tree must be unchanged at the end. Bounded in
time: the loop runs until both outcomes were seen (proof that it raced) or a
deadline passes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from workspace_helpers import SECRET, Tree, fd_target, snapshot, under

from ringfence.runtime import RingfenceError
from ringfence.workspace import Workspace

RENAME_EXCHANGE = 2
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@pytest.fixture
def swapping(tree: Tree):
    real = tree.ws / "a"
    real.mkdir()
    (real / "f").write_text("inside\n")
    (tree.outside / "f").write_bytes(SECRET)
    alt = tree.ws / "a_alt"
    alt.symlink_to(tree.outside)
    try:
        exchange(real, alt)
        exchange(real, alt)
    except OSError as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available: {exc}")
    stop = threading.Event()
    swaps = [0]

    def swapper() -> None:
        while not stop.is_set():
            exchange(real, alt)
            swaps[0] += 1

    before = snapshot(tree.outside)
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join(timeout=5)
    assert snapshot(tree.outside) == before
    assert (tree.outside / "f").read_bytes() == SECRET


def race(attempt: Callable[[], None], seconds: float = 4.0) -> tuple[int, int]:
    """Run ``attempt`` until it both succeeded and was refused, or the deadline passed."""
    ok = refused = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (ok >= 20 and refused >= 20):
        try:
            attempt()
            ok += 1
        except RingfenceError:
            refused += 1
    return ok, refused


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
def test_open_and_read_never_escape(tree: Tree, swapping, use_openat2: bool) -> None:
    with Workspace(tree.roots()) as w:
        w.use_openat2 = use_openat2

        def attempt() -> None:
            fd = w.open_fd("a/f")
            try:
                assert under(fd_target(fd), tree.roots()), fd_target(fd)
                assert os.pread(fd, 100, 0) == b"inside\n"
            finally:
                os.close(fd)
            assert w.read_text("a/./f") == "inside\n"

        ok, refused = race(attempt)
    assert swapping[0] > 0
    assert ok > 0 and refused > 0, (ok, refused)


def test_writes_never_land_outside(tree: Tree, swapping) -> None:
    with Workspace(tree.roots()) as w:
        w.use_openat2 = False
        counter = [0]

        def attempt() -> None:
            counter[0] += 1
            w.write_text(f"a/new{counter[0] % 5}", "written\n")
            w.write_text("a/f", "inside\n")

        ok, refused = race(attempt)
    assert ok > 0 and refused > 0, (ok, refused)
    assert not any(p.name.startswith("new") for p in tree.outside.iterdir())


def test_search_never_returns_outside_content(tree: Tree, swapping) -> None:
    (tree.outside / "f").write_bytes(SECRET)
    seen_inside = [0]
    with Workspace(tree.roots()) as w:

        def attempt() -> None:
            for m in w.grep("inside|SECRET", max_results=50):
                assert "SECRET" not in m["text"], m
                seen_inside[0] += 1
            # Whichever name holds the real directory, the outside one is never entered:
            # it holds "secret", which no listing may show.
            found = set(w.glob("**"))
            assert found <= {"hello.txt", "sub/inner.txt", "a/f", "a_alt/f"}, found
            with contextlib.suppress(RingfenceError):
                assert w.list_dir("a") == [{"name": "f", "type": "file"}]

        race(attempt, seconds=1.0)
    assert seen_inside[0] > 0
