"""Reading through the resolver: open a descriptor, a shell's directory, text, a listing.

Every function takes the :class:`~._resolver.Resolver` and the
:class:`~._resolver.Access` of the call, marks the operation in flight
(``with resolver:``) and does its I/O on the descriptor the resolver handed
back, never on a path string. :class:`~ringfence.workspace.Workspace` and its
host-root view are thin fronts over these functions.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from ..runtime._errors import InvalidArguments
from ..runtime._files import read_all
from ._deadline import current_deadline
from ._judged import judge_fd
from ._resolver import Access, Resolver, fd_path, translate_oserror

__all__ = [
    "BINARY_SNIFF_BYTES",
    "READ_FLAGS",
    "READ_MAX_BYTES",
    "check_regular",
    "list_dir",
    "open_fd",
    "read_all",
    "read_text",
    "resolve_dir",
]

# read_file returns at most this much text per call; larger reads need offset/limit.
READ_MAX_BYTES = 16 * 1024 * 1024
# A file whose first bytes (this many) hold a NUL is binary (git's heuristic size).
BINARY_SNIFF_BYTES = 8000

# How much a ranged read reads between two looks at the call's deadline.
_CHECK_EVERY_BYTES = 1 << 20

READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # NONBLOCK: a FIFO never hangs a read


def open_fd(resolver: Resolver, access: Access, path: str, flags: int) -> int:
    """Open ``path``; the caller owns (and closes) the descriptor."""
    with resolver:
        return resolver.open(path, flags, access=access)


def resolve_dir(resolver: Resolver, access: Access, path: str) -> Path:
    """The host path of a directory (see :meth:`Workspace.resolve_dir`)."""
    with resolver:
        fd = resolver.open(path, os.O_PATH, access=access)
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise InvalidArguments(f"{path!r} is not a directory", field="path")
            return fd_path(fd)
        finally:
            os.close(fd)


def read_text(
    resolver: Resolver, access: Access, path: str, *, offset: int, limit: int | None
) -> str:
    """Lines ``offset``.. of a text file (see :meth:`Workspace.read_text`)."""
    if offset < 1:
        raise InvalidArguments("offset is a 1-based line number", field="offset")
    if limit is not None and limit < 1:
        raise InvalidArguments("limit must be at least 1 line", field="limit")
    with resolver:
        fd = resolver.open(path, READ_FLAGS, access=access)
        try:
            judge_fd(resolver, fd)  # the file opened, not the spelling, meets the rules
            return _read_lines(fd, path, offset, limit)
        finally:
            os.close(fd)


def list_dir(resolver: Resolver, access: Access, path: str) -> list[dict[str, str]]:
    """A directory's entries, sorted by name (see :meth:`Workspace.list_dir`)."""
    with resolver:
        fd = resolver.open(path, os.O_RDONLY | os.O_DIRECTORY, access=access)
        try:
            judge_fd(resolver, fd)
            with os.scandir(fd) as it:
                entries = [{"name": e.name, "type": _entry_type(e)} for e in it]
        except OSError as exc:
            raise translate_oserror(exc, path) from None
        finally:
            os.close(fd)
    return sorted(entries, key=lambda e: e["name"])


# -- helpers ------------------------------------------------------------------------------


def _entry_type(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def check_regular(fd: int, display: str) -> os.stat_result:
    """The descriptor's stat, or InvalidArguments for a directory or a special file."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise InvalidArguments(f"{display} is a directory; use list_directory", field="path")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArguments(f"{display} is not a regular file", field="path")
    return st


def _binary_error(display: str) -> InvalidArguments:
    return InvalidArguments(
        f"{display} is a binary file (it contains NUL bytes); read_file returns text only",
        field="path",
    )


def _read_lines(fd: int, display: str, offset: int, limit: int | None) -> str:
    st = check_regular(fd, display)
    if b"\x00" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
        raise _binary_error(display)
    if offset == 1 and limit is None:
        if st.st_size > READ_MAX_BYTES:
            raise InvalidArguments(
                f"{display} is {st.st_size} bytes; read it in parts with offset and limit "
                f"(at most {READ_MAX_BYTES} bytes per call)",
                field="path",
            )
        data = read_all(fd, READ_MAX_BYTES + 1)
        if len(data) > READ_MAX_BYTES:  # it grew while being read
            raise InvalidArguments(
                f"{display} is over {READ_MAX_BYTES} bytes; read it in parts with offset and limit",
                field="path",
            )
    else:
        data = _read_range(fd, display, offset, limit)
    if b"\x00" in data:
        raise _binary_error(display)
    return data.decode("utf-8", "replace")


def _read_range(fd: int, display: str, offset: int, limit: int | None) -> bytes:
    chunks: list[bytes] = []
    size = 0
    line_no = 0
    too_much = InvalidArguments(
        f"lines {offset}.. of {display} are more than {READ_MAX_BYTES} bytes; ask for fewer lines",
        field="limit",
    )
    # Lines before ``offset`` are read and dropped, unbounded: a sparse file of terabytes with
    # a newline every few MiB (or one that grows) kept the worker reading long after the
    # call's deadline. The deadline is checked every 1 MiB read.
    deadline = current_deadline()
    unchecked = 0
    with io.open(fd, "rb", closefd=False) as f:  # noqa: UP020 - io.open takes a descriptor
        while limit is None or len(chunks) < limit:
            line = f.readline(READ_MAX_BYTES + 1)  # bounded: one huge line cannot exhaust memory
            if not line:
                break
            unchecked += len(line)
            if unchecked >= _CHECK_EVERY_BYTES and deadline is not None:
                unchecked = 0
                deadline.check()
            if len(line) > READ_MAX_BYTES:
                raise too_much
            line_no += 1
            if line_no < offset:
                continue
            chunks.append(line)
            size += len(line)
            if size > READ_MAX_BYTES:
                raise too_much
    if offset > 1 and not chunks:
        raise InvalidArguments(
            f"offset {offset} is past the end of {display} ({line_no} lines)", field="offset"
        )
    return b"".join(chunks)
