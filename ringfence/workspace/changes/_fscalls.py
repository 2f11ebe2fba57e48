"""System calls the guarded writer needs that ``os`` does not offer, and its closer thread.

``renameat2(RENAME_NOREPLACE)`` (a new directory tree merged by one rename
that never replaces anything), ``syncfs`` (a durable merge waits for one
journal commit, not one fsync per file) and :class:`Releases` (a
replaced inode freed off the merge's path, on a thread the merge starts and
joins). Each system call is looked up in libc once; where one is missing the
writer does without it (no whole-tree moves; an fsync per file and directory).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable

from .._writer import fsync_dir

__all__ = [
    "Releases",
    "can_rename_noreplace",
    "can_syncfs",
    "rename_noreplace",
    "sync_and_close",
]


def _load_renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28+), or None: then no tree moves whole."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()
_RENAME_NOREPLACE = 1


def can_rename_noreplace() -> bool:
    return _renameat2 is not None


def rename_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (OSError ``EEXIST``, nothing changed)."""
    assert _renameat2 is not None
    if _renameat2(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), _RENAME_NOREPLACE) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


_BATCH = 64  # descriptors handed over at once: one wake-up of the closer per batch
_BACKLOG = 4096 // _BATCH  # batches waiting beyond this are closed by their merge


def _close_batches(batches: queue.SimpleQueue[list[int] | None]) -> None:
    """The closer thread: close every batch it is handed until it is handed None."""
    while (fds := batches.get()) is not None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class Releases:
    """A merge's replaced files' last descriptors, closed on a thread of the merge's own.

    That close frees the old inode: on a busy ext4 ~0.3-1 ms of journal work
    per file, which need not hold up the merge (the workspace already shows
    the new file; only the old one's blocks are not yet free). Handed over
    :data:`_BATCH` at a time and by :meth:`flush`: a hand-over per file woke
    the closer each time, and the two threads' turns at the interpreter cost
    more than the closes. A backlog beyond 4,096 descriptors is closed by the
    merge itself, so they never pile up.

    The thread starts with the first batch and ends in :meth:`join` (the
    merge's end, whatever happened): no thread outlives the merge that
    started it. Where no thread can be started, the merge closes them itself.
    """

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._batches: queue.SimpleQueue[list[int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def __call__(self, fd: int) -> None:
        self._fds.append(fd)
        if len(self._fds) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Hand what is held to the closer (started now if it is not running yet)."""
        fds, self._fds = self._fds, []
        if not fds:
            return
        if self._thread is None:
            thread = threading.Thread(
                target=_close_batches, args=(self._batches,), name="ringfence-release"
            )
            try:
                thread.start()
            except RuntimeError:  # no thread to be had: close them here
                _close_now(fds)
                return
            self._thread = thread
        elif self._batches.qsize() > _BACKLOG:
            _close_now(fds)
            return
        self._batches.put(fds)

    def join(self) -> None:
        """Hand over the rest and wait until every descriptor is closed and the thread ended."""
        self.flush()
        thread, self._thread = self._thread, None
        if thread is not None:
            self._batches.put(None)
            thread.join()


def _close_now(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` (Linux), or None: then every file and directory is fsynced."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()


def can_syncfs() -> bool:
    return _syncfs is not None


def sync_and_close(dirs: dict[tuple[int, int], int]) -> None:
    """Make a durable merge durable, then close ``dirs`` (the directories written into).

    One ``syncfs`` per file system written to (what the per-file and
    per-directory fsyncs achieve together) instead of one fsync per file: a
    1,000-file undo waits for one journal commit, not a thousand. Errors
    are passed over, as the per-directory fsyncs' always were.
    """
    try:
        if _syncfs is not None:
            for fd in {dev: fd for (dev, _), fd in dirs.items()}.values():
                _syncfs(fd)
        else:
            for fd in dirs.values():
                with contextlib.suppress(OSError):
                    fsync_dir(fd)
    finally:
        for fd in dirs.values():
            with contextlib.suppress(OSError):
                os.close(fd)
