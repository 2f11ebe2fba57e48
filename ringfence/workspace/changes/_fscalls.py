"""The guarded writer's system calls that ``os`` does not offer, and its closer thread.

``renameat2(RENAME_NOREPLACE)`` (a new directory tree merged by one rename
that never replaces anything) and ``syncfs`` (a durable merge waits for one
journal commit, not one fsync per file) are :mod:`ringfence._confine.fscalls`';
where one is missing the writer does without it (no whole-tree moves; an fsync
per file and directory). :class:`Releases` frees a replaced inode off the
merge's path, on a thread the merge starts and joins.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading

from ..._confine.fscalls import can_syncfs, syncfs
from .._writer import fsync_dir

__all__ = ["Releases", "sync_and_close"]


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
    started it. Where no thread can be started, the merge closes them itself;
    so does a merge of fewer than a batch (a command's few files), in
    :meth:`join`: a thread's start and join cost more CPU than its closes.
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
        """Hand what is held to the closer (started now if it is not running yet): fewer
        than a batch, and no closer yet, are kept for :meth:`join` to close here."""
        if self._thread is None and len(self._fds) < _BATCH:
            return
        fds, self._fds = self._fds, []
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
        if self._thread is None:  # a small set: its few closes cost less than a thread
            fds, self._fds = self._fds, []
            _close_now(fds)
            return
        self.flush()
        thread, self._thread = self._thread, None
        if thread is not None:
            self._batches.put(None)
            thread.join()


def _close_now(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def sync_and_close(dirs: dict[tuple[int, int], int]) -> None:
    """Make a durable merge durable, then close ``dirs`` (the directories written into).

    One ``syncfs`` per file system written to (what the per-file and
    per-directory fsyncs achieve together) instead of one fsync per file: a
    1,000-file undo waits for one journal commit, not a thousand. Errors
    are passed over, as the per-directory fsyncs' always were.
    """
    try:
        if can_syncfs():
            for fd in {dev: fd for (dev, _), fd in dirs.items()}.values():
                with contextlib.suppress(OSError):
                    _syncfs_at(fd)
        else:
            for fd in dirs.values():
                with contextlib.suppress(OSError):
                    fsync_dir(fd)
    finally:
        for fd in dirs.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def _syncfs_at(dir_fd: int) -> None:
    """``syncfs`` of the file system holding the directory ``dir_fd``, through a descriptor
    opened for reading: the walk's are ``O_PATH``, which ``syncfs`` refuses (``EBADF``)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        syncfs(fd)
    finally:
        os.close(fd)
