"""One writer at a time per workspace: the judgment and the write it allowed are one step.

Every writer judges the tree it would leave (git's discovery, each link's
resolution) and then writes. Two writers judged apart and written together
leave a tree neither judged: ``write_file d/HEAD`` and ``write_file
d/commondir`` in one ``parallel(...)`` batch each saw the other's name missing,
and ``d`` became a repository whose configuration the agent had written (55 of
60 such pairs). So the file tools' writes, every merge (a shell command's
change set, ``apply_changes``, ``undo``, ``plan apply``, a writable MCP
server's calls) and a recovery's rollback hold :func:`writing` from their first
check to their last write:

* in this process, one lock (re-entrant, so a writer calling another, such as
  an undo's merge, does not wait for itself);
* always before the store's journal turn (``writer.lock``, :mod:`.changes._journal`):
  an operation that takes that turn first (a shell command's merge, an undo, a
  recovery) takes this lock before it, so two writers never wait for each other
  in a cycle;
* across processes (two ``ringfence call`` processes on the same roots), an
  exclusive ``flock`` on a lock file per root (``$RINGFENCE_HOME/locks/<device>-<inode>``,
  where no sandbox sees it: a lock on the root directory itself could be held
  by a long-lived confined MCP server, which sees that inode), and a shared one
  on each of the roots' ancestors' lock files, so that a session whose root
  lies inside another session's root waits for it too (one holds the other's
  root exclusively, the other that root as an ancestor, shared), while
  sessions on sibling roots share their common ancestors and do not wait. All
  are taken in device and inode order, so no two sessions wait for each other
  in a cycle.

The wait looks at the file tool call's deadline (:mod:`._deadline`), so a
writer held up by another ends with ``timeout`` instead of hanging. Not
promised: sessions with different ``RINGFENCE_HOME`` lock different files;
they are not ordered against each other.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from ..runtime._errors import ToolTimeout
from ._deadline import current_deadline

if TYPE_CHECKING:
    from ._resolver import Resolver

__all__ = ["writers_turn", "writing"]

_MUTEX = threading.RLock()
_HELD = threading.local()
# How often a writer waiting for another process's lock looks again (and at its deadline).
_POLL_SECONDS = 0.01


@contextlib.contextmanager
def writing(resolver: Resolver) -> Iterator[None]:
    """Hold the workspace's writer lock (see the module docstring) for the block."""
    deadline = current_deadline()
    while not _MUTEX.acquire(timeout=_POLL_SECONDS * 5):
        if deadline is not None:
            deadline.check()  # another thread's long merge: this call's deadline still holds
    try:
        depth = getattr(_HELD, "depth", 0)
        if depth:
            _HELD.depth = depth + 1
            try:
                yield
            finally:
                _HELD.depth = depth
            return
        with resolver:  # its root descriptors open while they are read
            held = _lock_roots(resolver)
        _HELD.depth = 1
        try:
            # What a dead process left in flight is rolled back before this writer judges
            # anything (a recovery killed midway while this one waited: it wrote over a
            # half-rolled-back tree, and its set's before-images were a killed merge's).
            for hook in list(resolver.on_turn):
                hook()
            yield
        finally:
            _HELD.depth = 0
            for fd in held:
                os.close(fd)  # closing the last descriptor releases its flock
    finally:
        _MUTEX.release()


def _lock_roots(resolver: Resolver) -> list[int]:
    """An exclusive ``flock`` on each (non-host) root's lock file and a shared one on each of
    their ancestors', all in device and inode order (the module docstring)."""
    roots = [os.fstat(r.fd) for r in resolver.roots if not r.is_host]
    exclusive = {(st.st_dev, st.st_ino) for st in roots}
    keys: dict[tuple[int, int], bool] = {}
    for r in resolver.roots:
        if not r.is_host:
            for key in _ancestors(r.fd):
                keys[key] = key in exclusive
    keys.update(dict.fromkeys(exclusive, True))
    held: list[int] = []
    try:
        where = _lock_directory() if keys else None
        if where is None:
            return held  # no place for lock files: the mutex alone
        try:
            for (dev, ino), alone in sorted(keys.items()):
                fd = os.open(
                    f"{dev:x}-{ino:x}",
                    os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=where,
                )
                held.append(fd)
                _flock(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            os.close(where)
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    return held


def _ancestors(root_fd: int) -> list[tuple[int, int]]:
    """The device and inode of each directory above the root (``..`` as the kernel resolves
    it, across mounts; opened as paths, so a directory its user may only search counts too),
    up to ``/``; fewer when one cannot be reached (no search permission)."""
    out: list[tuple[int, int]] = []
    fd = root_fd
    here = os.fstat(fd)
    try:
        for _ in range(4096):  # PATH_MAX / 2: deeper is no real tree
            try:
                up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                break
            if fd != root_fd:
                os.close(fd)
            fd = up
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino):
                break  # "/" is its own parent
            out.append((st.st_dev, st.st_ino))
            here = st
    finally:
        if fd != root_fd:
            os.close(fd)
    return out


def _lock_directory() -> int | None:
    """``$RINGFENCE_HOME/locks``, made private if missing and opened without following a link;
    None when it cannot be (the home unwritable). Not the root directories themselves: a
    long-lived confined MCP server sees a read-only root's inode and could hold its lock."""
    from ..runtime._files import open_home_directory

    try:
        return open_home_directory("locks")
    except OSError:
        return None


def _flock(fd: int, mode: int) -> None:
    deadline = current_deadline()
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError:
            return  # a file system without flock: the mutex alone
        if deadline is not None:
            deadline.check()
        time.sleep(_POLL_SECONDS)


@contextlib.asynccontextmanager
async def writers_turn(resolver: Resolver, wait_seconds: float) -> AsyncIterator[None]:
    """:func:`writing` held across awaits: a shell command that writes the roots itself
    (``--no-change-sets``) is a writer for as long as it runs, from the scan before it to the
    check after it. Another writer judged the tree and then wrote; with the command's writes
    between (``objects/`` and ``refs/`` made after ``write_file d/HEAD`` judged ``d``, its
    scan done before the rename), the tree neither judged was a repository.

    The lock belongs to a thread, so one worker thread takes it and holds it until the block
    ends. Cancelled while waiting, the thread still takes it when it can and lets go at once.
    Another writer holding it past ``wait_seconds`` ends the wait with ``timeout``: the block
    never ran.
    """
    import trio  # only the async holder needs it

    taken = threading.Event()
    release = threading.Event()
    failed: list[BaseException] = []

    def hold() -> None:
        try:
            with writing(resolver):
                taken.set()
                release.wait()
        except BaseException as exc:  # the lock's own failures, handed to the caller
            failed.append(exc)
            taken.set()

    # In this task's context: the lock files lie in the home it names (use_places).
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=context.run, args=(hold,), name="ringfence-writers-turn", daemon=True
    )
    thread.start()
    try:
        with trio.move_on_after(wait_seconds):
            await trio.to_thread.run_sync(taken.wait, abandon_on_cancel=True)
        if not taken.is_set():
            raise ToolTimeout(
                f"another writer held the workspace for {wait_seconds:g}s (a file tool's write, "
                "a merge or another process's command); nothing was run",
                field="timeout_seconds",
            )
        if failed:
            raise failed[0]
        yield
    finally:
        release.set()
        if taken.is_set():  # held: let go before the next writer's turn is awaited
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(thread.join)
