"""Writing through the resolver: write_file and edit_file, and the replace they end in.

:func:`write_text` and :func:`edit_text` walk to the target with the
resolver (creating missing directories only when writing), refuse git
metadata at every step (a ``.git`` name, a git directory on the way, a write
that would assemble one), and end in :func:`replace_file`.

Replace a file, never write into it: temp file, fsync, rename, relative to the parent fd.

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

Over 500 lines on purpose: the replace is written once for the file tools
and for the merge (which may rename an upper directory's file into place
instead of writing one), so every check above holds for both.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..runtime._errors import GitMetadata, InvalidArguments, ToolError, Unwritable
from ._judged import judge_place
from ._names import escape_name
from ._reader import READ_FLAGS, READ_MAX_BYTES, check_regular, read_all
from ._resolver import (
    Access,
    FollowLeaf,
    Place,
    Resolver,
    check_path_string,
    display_path,
    is_link,
    refuse_pseudo,
    translate_oserror,
)
from ._writelock import writing
from .git._rules import is_dotgit, is_git_directory, may_be_common_directory

__all__ = [
    "MAX_PATH_BYTES",
    "Expected",
    "Recorder",
    "check_git_chain",
    "denies_write",
    "dir_denies_create",
    "edit_text",
    "fsync_dir",
    "is_temp_name",
    "make_checked_dir",
    "replace_file",
    "temp_name",
    "write_text",
]

_TEMP_PREFIX = ".ringfence-"
_TEMP_NAME = re.compile(r"\.ringfence-[0-9a-f]{16}\.tmp\Z")  # _TEMP_PREFIX + 16 hex + .tmp


class Recorder(Protocol):
    """The checkpoint recorder a file tool's write tells what it is about to change.

    ``making(place, name, made)`` before each directory the write makes (``made``: those it
    made so far, as (root index, names)), and the call (place, new bytes, ``made``) just
    before the replace: the recorder journals and stores the images before anything of the
    write is on disk, the directories included (a write killed after its first ``mkdir`` is
    rolled back whole at the next start).
    """

    def __call__(self, place: Place, data: bytes, made: list[tuple[int, list[str]]]) -> None: ...

    def making(self, place: Place, name: str, made: list[tuple[int, list[str]]]) -> None: ...


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
    return _bits_deny(st, stat.S_IWUSR)


def dir_denies_create(st: os.stat_result) -> bool:
    """Does this directory's mode deny creating files (write and search bits)?"""
    return _bits_deny(st, stat.S_IWUSR | stat.S_IXUSR)


def _bits_deny(st: os.stat_result, need_as_owner: int) -> bool:
    """Does the class of the mode that applies to us (owner, group, other) lack a needed bit?

    Checked on the bits, so running as root does not turn "read-only" into
    "writable": for root, a mode with no write bit at all denies.
    """
    euid = os.geteuid()
    mode = st.st_mode
    if euid == 0:
        return not mode & 0o222
    if st.st_uid == euid:
        need = need_as_owner
    elif st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        need = need_as_owner >> 3
    else:
        need = need_as_owner >> 6
    return mode & need != need


def _copy_xattrs(src_path_fd: int, dst_fd: int, display: str) -> None:
    """Carry extended attributes (POSIX ACLs live here) over, or refuse."""
    try:
        names = os.listxattr(f"/proc/self/fd/{src_path_fd}")
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
            os.setxattr(dst_fd, name, os.getxattr(f"/proc/self/fd/{src_path_fd}", name))
        except OSError as exc:
            raise Unwritable(
                f"{display}: its extended attribute {name} (an ACL or label) could not be "
                f"kept ({exc.strerror}); the file is unchanged",
                field="path",
            ) from None


def replace_file(
    place: Place,
    data: bytes,
    *,
    expected: Expected | None = None,
    sync_dir: bool | None = True,
    source: tuple[int, str, int] | None = None,
    release: Callable[[int], None] = os.close,
    mode: int | None = None,
    owner: tuple[int, int] | None = None,
) -> bool:
    """Replace ``place.leaf`` in ``place.dir_fd`` with ``data``; True if it was created.

    A replaced file's owner and mode are kept, or with ``mode`` (a merge: the
    change set's) that mode is set instead, before the new file takes its
    place. A created file's mode is the caller's to set; ``owner`` (uid, gid: a root
    ringfence's :func:`workspace_owner`) is given a created file before it is visible.

    ``source`` (a merge from an overlay's upper directory): ``(dir_fd, name,
    fd)`` of a file holding ``data`` that nothing writes any more, renamed
    into place instead of a new file being written (it must have no extended
    attributes; a new file is 0600 until the caller sets its mode); a rename across file
    systems raises the bare ``OSError`` (``EXDEV``) with nothing changed.
    ``release`` gets the replaced inode's last descriptor (the close that
    frees it, which a merge leaves to another thread).

    ``sync_dir=False``: the caller fsyncs the directory (a merge, once per directory);
    ``None``: nothing is fsynced (a shell command's merge, as durable as the command itself).

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
    if source is not None:
        return _replace_from(place, st, source, sync_dir, release, mode)
    if st is not None:
        try:
            # The exact inode being replaced, to copy its attributes from.
            src_path_fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise translate_oserror(exc, display, writing=True) from None
    temp = temp_name()
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
                _keep_owner_and_mode(fd, st, display, mode)
                _copy_xattrs(src_path_fd, fd, display)
            else:
                if owner is not None:
                    os.fchown(fd, *owner)
                os.fchmod(fd, 0o666 & ~_current_umask())
            if sync_dir is not None:
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
        if sync_dir:
            try:
                fsync_dir(dir_fd)
            except OSError as exc:
                # In place already: said as written (the recorder keeps its change set).
                error = translate_oserror(exc, display, writing=True)
                raise error.with_(
                    message=f"{display} was written, but committing its directory to disk "
                    f"failed ({exc.strerror or exc}): the write may not survive a power loss",
                    details={**error.details, "written": True},
                ) from None
    except OSError as exc:
        raise translate_oserror(exc, display, writing=True) from None
    finally:
        if src_path_fd >= 0:
            release(src_path_fd)
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
    return st is None


def _replace_from(
    place: Place,
    st: os.stat_result | None,
    source: tuple[int, str, int],
    sync_dir: bool | None,
    release: Callable[[int], None],
    mode: int | None,
) -> bool:
    """:func:`replace_file` by renaming ``source`` into place (checks done by the caller)."""
    leaf = place.leaf
    assert leaf is not None
    dir_fd, display = place.dir_fd, place.display()
    src_dir, src_name, fd = source
    src_path_fd = -1
    try:
        if os.listxattr(fd):  # the caller drops the upper's own (overlay's, the command's)
            raise InvalidArguments(f"{display}: the file to rename still has extended attributes")
        if st is not None:
            src_path_fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            _keep_owner_and_mode(fd, st, display, mode)
            _copy_xattrs(src_path_fd, fd, display)
        else:
            os.fchmod(fd, 0o600)  # private until the caller (the merge) sets the set's mode
        if sync_dir is not None:
            os.fsync(fd)
        os.replace(src_name, leaf, src_dir_fd=src_dir, dst_dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise
        raise translate_oserror(exc, display, writing=True) from None
    finally:
        if src_path_fd >= 0:
            release(src_path_fd)  # held across the rename: the close frees the old inode
    if sync_dir:
        fsync_dir(dir_fd)
    return st is None


def _keep_owner_and_mode(
    fd: int, st: os.stat_result, display: str, mode: int | None = None
) -> None:
    """Give the new file ``fd`` the replaced file's (``st``) owner, and its mode or ``mode``."""
    mine = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode) if mode is None else mode
    if (mine.st_uid, mine.st_gid) == (st.st_uid, st.st_gid) and stat.S_IMODE(mine.st_mode) == mode:
        return  # as wanted already (an overlay's copy-up keeps both): no journalled chmod
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
    os.fchmod(fd, mode)
    got = stat.S_IMODE(os.fstat(fd).st_mode)
    if got != mode:
        raise Unwritable(
            f"{display} has mode {mode:04o}, which a replacement could not keep (it got "
            f"{got:04o}); the file is unchanged",
            field="path",
        )


def fsync_dir(dir_fd: int) -> None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- write_file and edit_file ---------------------------------------------------------------

_GIT_EXPLANATION = (
    "Git runs programs that its configuration and hooks name, so ringfence never writes git "
    "metadata, in any posture. Reading it still works; change git settings with a git command "
    "you run or approve."
)


def write_text(
    resolver: Resolver,
    access: Access,
    path: str,
    content: str,
    *,
    record: Recorder | None = None,
    dry: bool = False,
) -> dict[str, Any]:
    """Create or replace a file (see :meth:`Workspace.write_text`); ``dry``: only judge it."""
    data = _encode(content, "content")
    return _write(
        resolver, access, path, lambda place: (data, None), create=True, record=record, dry=dry
    )


def edit_text(
    resolver: Resolver,
    access: Access,
    path: str,
    old: str,
    new: str,
    *,
    record: Recorder | None = None,
    dry: bool = False,
) -> dict[str, Any]:
    """Replace the one occurrence of ``old`` (see :meth:`Workspace.edit_text`); ``dry``: only
    judge it."""
    if not old:
        raise InvalidArguments("old is empty; give the exact text to replace", field="old")
    _encode(old, "old")
    _encode(new, "new")

    def produce(place: Place) -> tuple[bytes, Expected]:
        return _edited(place, old, new)

    result = _write(resolver, access, path, produce, create=False, record=record, dry=dry)
    result.pop("created", None)
    result["replacements"] = 1
    return result


def _write(
    resolver: Resolver,
    access: Access,
    path: str,
    produce: Callable[[Place], tuple[bytes, Expected | None]],
    *,
    create: bool,
    record: Recorder | None = None,
    dry: bool = False,
) -> dict[str, Any]:
    """The walk every write ends in. ``dry`` (a dry run staging the call): every check the
    write would make, nothing written; below a directory it would create, judged down to
    that directory (its apply judges the rest again, as it writes)."""
    check_path_string(path)
    for name in path.split("/"):
        if is_dotgit(name):
            raise GitMetadata(
                f"{path!r} is git metadata (the component {name!r} is how git spells .git). "
                + _GIT_EXPLANATION,
                field="path",
            )
    made: list[tuple[int, str]] = []  # directories this call created: removed if it fails
    owner = None if dry else workspace_owner(resolver)
    made_paths: list[tuple[int, list[str]]] = []  # the same, as (root, names) for record

    def make_dir(place: Place, name: str) -> None:
        # mkdir on cgroup, configfs or tracefs makes a kernel object: refused before it.
        refuse_pseudo(place.dir_fd, place.display(name), close=False)
        if dry:
            make_checked_dir(place, name, made, resolver, create=False)
            raise _Judged(place.display(name))
        if record is not None:
            record.making(place, name, made_paths)  # journaled before the mkdir
        if make_checked_dir(place, name, made, resolver, owner=_owner_at(place, owner)):
            made_paths.append((place.root.index, [*place.names, name]))

    def op(place: Place) -> dict[str, Any]:
        display = place.display()
        if place.leaf is not None and is_dotgit(place.leaf):
            raise GitMetadata(f"{display} is git metadata. " + _GIT_EXPLANATION, field="path")
        check_git_chain(place, display, resolver)
        if place.leaf is None:
            raise InvalidArguments(f"{display} is a directory, not a file", field="path")
        if is_temp_name(place.leaf):
            raise InvalidArguments(
                f"{display}: .ringfence-<16 hex digits>.tmp is the name of ringfence's writers' "
                "temporary files, which a recovery removes unrecorded; choose another name",
                field="path",
            )
        if is_link(place.leaf, place.dir_fd):
            raise FollowLeaf
        judge_place(place)  # the file written, every link followed, meets the rules
        refuse_pseudo(place.dir_fd, display, close=False)
        if resolver is not None and not place.root.is_host:
            # A hooks directory or config git reaches through a link (.git/hooks ->
            # ../githooks) is git metadata under another name.
            from .changes._resulting import check_linked_write

            check_linked_write(
                resolver, place.root.index, "/".join([*place.names, place.leaf]), "this write"
            )
        data, expected = produce(place)
        if is_git_directory(place.dir_fd, {place.leaf: ("file", data)}, beneath=place.beneath):
            raise GitMetadata(
                f"writing {display} would make {display_path(place.root, place.names)} a git "
                "directory (git would read it as a repository and run what its config names). "
                + _GIT_EXPLANATION,
                field="path",
            )
        if dry:
            return {"path": display, "bytes": len(data)}
        if record is not None:
            # The before- and after-images are stored before the write becomes visible.
            record(place, data, made_paths)
        created = replace_file(place, data, expected=expected, owner=_owner_at(place, owner))
        return {"path": display, "bytes": len(data), "created": created}

    # The judgment and the write are one step among writers (a parallel batch's two writes
    # each judged without the other's name: _writelock).
    with resolver, contextlib.nullcontext() if dry else writing(resolver):
        try:
            return resolver.walk(path, op, access=access, make_dir=make_dir if create else None)
        except _Judged as judged:  # a dry run reached a directory the write would create
            return {"path": judged.args[0]}
        except BaseException:
            for dir_fd, name in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=dir_fd)
            raise
        finally:
            for dir_fd, _ in made:
                os.close(dir_fd)


class _Judged(Exception):
    """A dry run's walk stops at the first directory the write would create (judged)."""


def temp_name() -> str:
    """A fresh name for a writer's temporary file beside its target."""
    return f"{_TEMP_PREFIX}{secrets.token_hex(8)}.tmp"


def is_temp_name(name: str) -> bool:
    """A temporary file a writer makes beside its target (the merge's links too): what a
    killed write can leave, and recovery removes."""
    return _TEMP_NAME.match(name) is not None


def make_checked_dir(
    place: Place,
    name: str,
    made: list[tuple[int, str]],
    resolver: Resolver | None = None,
    *,
    create: bool = True,
    owner: tuple[int, int] | None = None,
) -> bool:
    """Make directory ``name`` for a write, refusing git metadata; True (and in ``made``) if made.
    ``owner`` (uid, gid) is given the directory made (:func:`workspace_owner`).

    With ``resolver`` (the file tools), the tree the new directory leaves is judged too
    (:func:`.changes._resulting.check_resulting_tree`); a merge judged its whole set before.
    """
    display = place.display(name)
    if is_dotgit(name):
        raise GitMetadata(f"{display} would be a .git directory. " + _GIT_EXPLANATION, field="path")
    check_git_chain(place, display, resolver)
    if is_git_directory(place.dir_fd, {name: ("dir", None)}, beneath=place.beneath):
        raise GitMetadata(
            f"creating {display} would make {place.display() or '.'} a git directory "
            "(it has a HEAD and would then have objects/ and refs/). " + _GIT_EXPLANATION,
            field="path",
        )
    if dir_denies_create(os.fstat(place.dir_fd)):
        raise Unwritable(
            f"{display} cannot be created: its directory does not allow creating entries",
            field="path",
        )
    if resolver is not None and not place.root.is_host:
        # A new directory can complete a git directory through a link elsewhere
        # (``objects -> ../o``): judged on the resulting tree, as a merge is.
        from .changes._model import Change, Image
        from .changes._resulting import check_resulting_tree

        path = "/".join([*place.names, name])
        new_dir = [Change(place.root.index, path, None, Image("dir", 0o755))]
        check_resulting_tree(resolver, new_dir, what="this write")
    if not create:
        return False
    try:
        os.mkdir(name, 0o777, dir_fd=place.dir_fd)
    except FileExistsError:
        return False
    except OSError as exc:
        raise translate_oserror(exc, display, writing=True) from None
    made.append((os.dup(place.dir_fd), name))
    if owner is not None:  # the entry itself, never a link put in its place meanwhile
        try:
            os.chown(name, *owner, dir_fd=place.dir_fd, follow_symlinks=False)
        except OSError as exc:
            raise translate_oserror(exc, display, writing=True) from None
    try:
        _drop_inherited_set_gid(place.dir_fd, name)
    except OSError as exc:
        raise translate_oserror(exc, display, writing=True) from None
    return True


def _drop_inherited_set_gid(dir_fd: int, name: str) -> None:
    """Clear the set-gid bit a new directory inherits from a set-gid parent.

    Its change set records the mode asked for (``0777 & ~umask``); with the bit it held
    another, so ``undo`` called it changed since and refused, and no writer sets the bit
    back (a merge refuses set-id bits).
    """
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if mode & stat.S_ISGID:
            os.fchmod(fd, stat.S_IMODE(mode) & ~stat.S_ISGID)
    finally:
        os.close(fd)


def workspace_owner(resolver: Resolver) -> tuple[int, int] | None:
    """Whom a ringfence running as root gives the files and directories it creates: the
    first root's owner, as the sandbox's commands run as that user and a merge's entries
    are theirs (a root-owned file in their workspace would refuse their next command).
    None when ringfence is not root (what it creates is its own)."""
    if os.geteuid() != 0 or not resolver.roots:
        return None
    st = os.fstat(resolver.roots[0].fd)
    return st.st_uid, st.st_gid


def _owner_at(place: Place, owner: tuple[int, int] | None) -> tuple[int, int] | None:
    """``owner`` for a place in a workspace root; None on the host (``with_host_root``)."""
    return None if place.root.is_host else owner


def check_git_chain(place: Place, display: str, resolver: Resolver | None = None) -> None:
    """Refuse a write below git metadata: a root inside it, a .git name, a git directory,
    or a git directory's common directory (one that ``commondir`` names: git reads that
    repository's config and hooks there, ``HEAD`` or not) when a git directory in the roots
    of ``resolver`` (without one: the place's own root) names it."""
    if place.root.git_reason is not None:
        raise GitMetadata(f"{display}: {place.root.git_reason}. " + _GIT_EXPLANATION, field="path")
    names = place.names
    for i, name in enumerate(names):
        if is_dotgit(name):
            raise GitMetadata(
                f"{display} is inside {display_path(place.root, names[: i + 1])}, a .git "
                "directory. " + _GIT_EXPLANATION,
                field="path",
            )
    fds = [place.root.fd, *(fd for _, fd in place.dirs)]
    for depth, fd in enumerate(fds):
        # Checked on the descriptor each time: a number closed by ".." can be reused.
        beneath = (place.root.fd, "/".join(names[:depth]))
        if is_git_directory(fd, beneath=beneath):
            where = display_path(place.root, names[:depth])
            raise GitMetadata(
                f"{display} is inside {where}, which is a git directory (it has HEAD, "
                "objects/ and refs/). " + _GIT_EXPLANATION,
                field="path",
            )
        if may_be_common_directory(fd, beneath=beneath):
            sharer = _sharing(place, fd, resolver)
            if sharer is not None:
                where = display_path(place.root, names[:depth])
                raise GitMetadata(
                    f"{display} is inside {where}, the common directory of the git directory "
                    f"{escape_name(sharer)} (its commondir names it: git reads that repository's "
                    "config and hooks there). " + _GIT_EXPLANATION,
                    field="path",
                )


def _sharing(place: Place, fd: int, resolver: Resolver | None) -> str | None:
    """The git directory whose ``commondir`` names the directory ``fd``, if any: a scan of
    the roots, incremental from the resolver's last one (see :mod:`.changes._resulting`)."""
    from .git._scan import sharing_git_directory  # a scan: only for such a directory

    if resolver is None or place.root.is_host:
        roots = [] if place.root.is_host else [(place.root.path, place.root.fd)]
        return sharing_git_directory(roots, fd)[0]
    with resolver.scan_lock:
        roots = [(r.path, r.fd) for r in resolver.roots]
        found, resolver.scan_base = sharing_git_directory(roots, fd, resolver.scan_base)
    return found


def _encode(text: str, name: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArguments(
            f"{name} contains text that cannot be encoded as UTF-8", field=name
        ) from None


def _edited(place: Place, old: str, new: str) -> tuple[bytes, Expected]:
    display = place.display()
    assert place.leaf is not None
    try:
        fd = os.open(place.leaf, READ_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=place.dir_fd)
    except OSError as exc:
        raise translate_oserror(exc, display) from None
    refuse_pseudo(fd, display)  # kernel state: no "old was not found" oracle on it either
    try:
        st = check_regular(fd, display)
        if st.st_size > READ_MAX_BYTES:
            raise InvalidArguments(
                f"{display} is too large to edit ({st.st_size} bytes)", field="path"
            )
        data = read_all(fd, READ_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if b"\x00" in data:
        raise InvalidArguments(f"{display} is a binary file; edit_file edits text", field="path")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArguments(
            f"{display} is not valid UTF-8, so it cannot be edited as text without changing "
            "other bytes; rewrite it with write_file if that is intended",
            field="path",
        ) from None
    count = text.count(old)
    if count == 0:
        raise InvalidArguments(f"old was not found in {display}; nothing was changed", field="old")
    if count > 1:
        raise InvalidArguments(
            f"old occurs {count} times in {display}; include more surrounding text so it "
            "matches exactly once",
            field="old",
        )
    return text.replace(old, new, 1).encode("utf-8"), Expected.of(st)
