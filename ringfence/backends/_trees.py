"""Emptying a directory a command wrote: any depth, any modes, never following a link.

A command decides what its upper directory holds: a tree 100,000 levels deep,
directories it made unreadable (mode 000), links anywhere. A recursive walk
(``shutil.rmtree``, or a function calling itself per level) fails past
Python's recursion limit (~1,000 levels) or runs out of descriptors, and
then the directory is not emptied: what the last command wrote would join
the next command's change set. :func:`empty_directory` never goes deeper
than one level: each subdirectory's entries are renamed up into the top
directory (under fresh names) before it is removed, so two descriptors do
the whole job whatever the depth.

Precondition: nothing else writes the tree meanwhile (the backends empty an
upper directory only after every process of the command is dead). A mount
point inside the tree is never entered: :class:`OSError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import secrets
import stat
import time
from pathlib import Path

__all__ = ["claim", "empty_directory", "release", "remove_tree", "sweep_unclaimed"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PREFIX = ".rf-rm-"


def _free_name(fd: int, counter: itertools.count[int]) -> str:
    """A name not taken in the directory ``fd`` (a rename must never replace an entry)."""
    while True:
        name = f"{_PREFIX}{next(counter)}"
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return name


def empty_directory(fd: int) -> None:
    """Remove everything inside the directory open at ``fd`` (blocking). Links are removed,
    never followed; directories a command locked are opened (their owner, or root, may)."""
    dev = os.fstat(fd).st_dev
    counter = itertools.count()
    while True:
        names = os.listdir(fd)
        if not names:
            return
        for name in names:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=fd)
                continue
            if st.st_dev != dev:
                raise OSError(f"{name} is a mount point; not emptied")
            if st.st_mode & 0o700 != 0o700:
                # lstat said directory and nothing else runs: chmod cannot be redirected.
                os.chmod(name, 0o700, dir_fd=fd)
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                # Its entries move up here (one level, whatever the depth below), then it goes.
                for child in os.listdir(sub):
                    os.rename(child, _free_name(fd, counter), src_dir_fd=sub, dst_dir_fd=fd)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)


def remove_tree(path: Path) -> None:
    """``rm -rf path`` for a tree a command wrote (blocking): :func:`empty_directory`, then the
    directory itself. A path that is gone already is not an error."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    if st.st_mode & 0o700 != 0o700:
        os.chmod(path, 0o700)
    fd = os.open(path, _DIR)
    try:
        empty_directory(fd)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)


# -- a session's directories, and the ones killed sessions left ------------------------------

ALIVE = ".alive"  # held with flock by the session that owns the directory


def claim(directory: Path) -> int:
    """Mark ``directory`` (made if missing) as in use while the returned descriptor is open.

    The mark is a file held with an exclusive ``flock``: the lock dies with
    its process however it ends, so a mark nobody holds was left by a killed
    session. It is locked before it takes its name, so no sweeper ever sees
    it unheld while its owner lives.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = directory / f"{ALIVE}-{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(temp, directory / ALIVE)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return fd


def release(directory: Path, fd: int) -> None:
    """The session ended cleanly: its mark goes (what it leaves is kept), then the lock; a
    directory (and its parent) left empty goes too, so a session that wrote nothing
    leaves nothing."""
    with contextlib.suppress(OSError):
        os.unlink(directory / ALIVE)
    os.close(fd)
    for empty in (directory, directory.parent):
        try:
            os.rmdir(empty)
        except OSError:
            break  # not empty (or gone): what is in it is kept


def sweep_unclaimed(base: Path, *, prefix: str = "", seconds: float = 1.0) -> int:
    """Remove the directories ``base/<prefix>*`` a killed session left; how many.

    A directory is removed only when it holds a mark (:func:`claim`) that
    nobody holds: one without a mark ended cleanly or is not a session's, and
    stays; nor is one of another user (``base`` may be a shared temporary
    directory: there, another user could rename their own directory and put a
    link in its place while it is removed, and ``remove_tree``'s chmod by path
    follows links; only its owner or root can rename an entry of this user in a
    sticky directory). Bounded: at most ``seconds`` (the rest waits for the next
    start).
    """
    deadline = time.monotonic() + seconds
    removed = 0
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        return 0
    for entry in entries:
        if time.monotonic() > deadline:
            break
        if not entry.name.startswith(prefix):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue  # another user's
            fd = os.open(Path(entry.path) / ALIVE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            continue  # its session lives
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):
            remove_tree(Path(entry.path))
            removed += 1
    return removed
