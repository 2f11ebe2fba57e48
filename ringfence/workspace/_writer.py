"""Replace a file, never write into it: temp file, fsync, rename, relative to the parent fd.

Writing *into* an existing file follows hard links (the bytes land in every
name of the inode, including one inside ``.git``) and leaves a truncated file
if the process dies half-way. So :func:`replace_file` writes a new file next
to the target, copies the target's owner, mode and extended attributes (ACLs)
onto it, ``fsync``s it, and renames it over the target relative to the parent
directory's descriptor, then ``fsync``s the directory. The old inode (and any
other name it has) is untouched.

Before anything is created the target and its directory are checked; every
case that cannot be done faithfully is ``unwritable`` with the reason, and the
original is byte-for-byte unchanged:

* a read-only file or one whose permission bits deny us writing (checked on the
  bits, so running as root does not turn "read-only" into "writable");
* a directory that does not let us create files;
* an owner, mode or extended attribute that cannot be carried over;
* an immutable or append-only file, a read-only file system (the rename fails).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from dataclasses import dataclass

from ..runtime import InvalidArguments, ToolError, Unwritable
from ._resolver import FollowLeaf, Place, translate_oserror

__all__ = ["MAX_PATH_BYTES", "Expected", "denies_write", "dir_denies_create", "replace_file"]

_TEMP_PREFIX = ".ringfence-"
# The longest path below its root a file tool writes: PATH_MAX (4096, with its NUL) less the
# "./" ripgrep puts before it. read_file and grep_files open a path below the root in one
# call, so a longer one, which a directory-by-directory walk could create, would be a file
# the other tools cannot find again.
MAX_PATH_BYTES = 4096 - 1 - 2


@dataclass(frozen=True)
class Expected:
    """What the target looked like when it was read (edit_file): refuse if it changed."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Expected:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def matches(self, st: os.stat_result) -> bool:
        return self == Expected.of(st)


def _current_umask() -> int:
    """The process umask, read without changing it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def denies_write(st: os.stat_result) -> bool:
    """Do the permission bits deny *us* writing? For root: are there no write bits at all?"""
    euid = os.geteuid()
    mode = st.st_mode
    if euid == 0:
        return not mode & 0o222
    if st.st_uid == euid:
        return not mode & stat.S_IWUSR
    if st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        return not mode & stat.S_IWGRP
    return not mode & stat.S_IWOTH


def dir_denies_create(st: os.stat_result) -> bool:
    """Does this directory's mode deny creating files (write and search bits)?"""
    euid = os.geteuid()
    mode = st.st_mode
    if euid == 0:
        return not mode & 0o222
    if st.st_uid == euid:
        need = stat.S_IWUSR | stat.S_IXUSR
    elif st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        need = stat.S_IWGRP | stat.S_IXGRP
    else:
        need = stat.S_IWOTH | stat.S_IXOTH
    return mode & need != need


def _copy_xattrs(src_path_fd: int, dst_fd: int, display: str) -> None:
    """Carry extended attributes (POSIX ACLs live here) over, or refuse."""
    proc = f"/proc/self/fd/{src_path_fd}"
    try:
        names = os.listxattr(proc)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return
        raise Unwritable(
            f"{display}: its extended attributes could not be read ({exc.strerror}), "
            "so a replacement could not keep them; the file is unchanged",
            field="path",
        ) from None
    for name in names:
        try:
            os.setxattr(dst_fd, name, os.getxattr(proc, name))
        except OSError as exc:
            raise Unwritable(
                f"{display}: its extended attribute {name} (an ACL or label) could not be "
                f"kept ({exc.strerror}); the file is unchanged",
                field="path",
            ) from None


def replace_file(place: Place, data: bytes, *, expected: Expected | None = None) -> bool:
    """Replace ``place.leaf`` in ``place.dir_fd`` with ``data``; True if it was created.

    Raises FollowLeaf if the leaf is a symlink (the walk follows it),
    InvalidArguments if it is a directory or its path below the root is longer
    than :data:`MAX_PATH_BYTES`, Unwritable as described in the
    module docstring, ToolError if ``expected`` no longer matches.
    """
    leaf = place.leaf
    display = place.display()
    if leaf is None:
        raise InvalidArguments(f"{display} is a directory, not a file", field="path")
    length = len(os.fsencode("/".join([*place.names, leaf])))
    if length > MAX_PATH_BYTES:
        raise InvalidArguments(
            f"the path is {length} bytes below its root; file tools write at most "
            f"{MAX_PATH_BYTES} (PATH_MAX), so that read_file and grep_files can reach every "
            "file they write. Nothing was written.",
            field="path",
        )
    dir_fd = place.dir_fd
    try:
        st: os.stat_result | None = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise translate_oserror(exc, display, writing=True) from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise FollowLeaf
        if stat.S_ISDIR(st.st_mode):
            raise InvalidArguments(f"{display} is a directory, not a file", field="path")
        if not stat.S_ISREG(st.st_mode):
            raise Unwritable(f"{display} is not a regular file; it was left alone", field="path")
        if denies_write(st):
            raise Unwritable(
                f"{display} is read-only (mode {stat.S_IMODE(st.st_mode):04o}); it was left "
                "unchanged. Reading it still works.",
                field="path",
            )
        if expected is not None and not expected.matches(st):
            raise ToolError(
                f"{display} changed while it was being edited; read it again", field="path"
            )
    if dir_denies_create(os.fstat(dir_fd)):
        raise Unwritable(
            f"{display}: its directory does not allow creating files, so the file cannot be "
            "replaced safely; nothing was changed",
            field="path",
        )
    src_path_fd = -1
    if st is not None:
        try:
            # The exact inode being replaced, to copy its attributes from.
            src_path_fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise translate_oserror(exc, display, writing=True) from None
    temp = f"{_TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if src_path_fd >= 0:
            os.close(src_path_fd)
        raise translate_oserror(exc, display, writing=True) from None
    renamed = False
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if st is not None:
                _keep_owner_and_mode(fd, st, display)
                _copy_xattrs(src_path_fd, fd, display)
            else:
                os.fchmod(fd, 0o666 & ~_current_umask())
            os.fsync(fd)
        finally:
            os.close(fd)
        if st is not None and expected is not None:
            now = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
            if not expected.matches(now):
                raise ToolError(
                    f"{display} changed while it was being edited; read it again", field="path"
                )
        try:
            os.replace(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            raise translate_oserror(exc, display, writing=True) from None
        renamed = True
        _fsync_dir(dir_fd)
    except OSError as exc:
        raise translate_oserror(exc, display, writing=True) from None
    finally:
        if src_path_fd >= 0:
            os.close(src_path_fd)
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
    return st is None


def _keep_owner_and_mode(fd: int, st: os.stat_result, display: str) -> None:
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
        try:
            # chown first: it clears set-id bits, which fchmod then restores.
            os.fchown(fd, st.st_uid, st.st_gid)
        except OSError as exc:
            raise Unwritable(
                f"{display} belongs to uid {st.st_uid} gid {st.st_gid}; a replacement written "
                f"by this process could not keep that owner ({exc.strerror}); the file is unchanged",
                field="path",
            ) from None
    mode = stat.S_IMODE(st.st_mode)
    os.fchmod(fd, mode)
    got = stat.S_IMODE(os.fstat(fd).st_mode)
    if got != mode:
        raise Unwritable(
            f"{display} has mode {mode:04o}, which a replacement could not keep (it got "
            f"{got:04o}); the file is unchanged",
            field="path",
        )


def _fsync_dir(dir_fd: int) -> None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
