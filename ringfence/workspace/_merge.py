"""The guarded writer: how a change set reaches the real workspace.

:func:`merge_changes` is the one way a change set reaches the real workspace
(undo today; the overlay's upper directory and ``plan apply`` later). It
walks every path through the resolver and refuses, naming each entry:

* git metadata in any spelling, a write below a git directory or one that
  would make a directory a git directory (``git_metadata``);
* device nodes, FIFOs, sockets, set-uid/set-gid/sticky bits, links whose
  target leaves the roots, absolute or ``..`` paths (``invalid_arguments``);
* a conflict: a touched path whose current state is not the before-image
  (``tool_error``, ``details["conflicts"]``), unless ``force``.

``atomic=True`` (the default) refuses the whole set when any entry is
refused; ``atomic=False`` merges the rest and reports the refused ones.
Merged entries belong to the root's owner when ringfence runs as root.

Not promised: atomicity against a crash half-way (a failure while writing
rolls back what was applied, best effort), or against another process
writing the same paths during the merge (each entry is checked just before
it is written, not locked).
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..runtime import GitMetadata, InvalidArguments, RingfenceError, ToolError
from ._changes import Blobs, Change, Image, image_at, same_state
from ._gitguard import is_dotgit, is_git_directory
from ._names import escape_name
from ._resolver import CONFINED, Place, Resolver, translate_oserror
from ._workspace import Workspace
from ._writer import check_git_chain, fsync_dir, make_checked_dir, replace_file

__all__ = ["MergeReport", "merge_changes"]

_MERGEABLE = frozenset({"file", "symlink", "dir"})
_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


@dataclass(frozen=True)
class MergeReport:
    """What a merge did: the changes applied (with the before-images found) and those refused."""

    applied: tuple[Change, ...]
    refused: tuple[dict[str, Any], ...] = field(default=())


# -- refusals ----------------------------------------------------------------------------


def _refusal(change: Change, roots: Sequence[str], blobs: Blobs) -> RingfenceError | None:
    """Why ``change`` may not be merged, judged on the change alone (None: it may)."""
    shown = escape_name(change.path)
    if not 0 <= change.root < len(roots):
        return InvalidArguments(f"{shown}: no workspace root number {change.root}", field="path")
    parts = change.path.split("/")
    if change.path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return InvalidArguments(f"{shown}: not a plain relative path", field="path")
    for name in parts:
        if is_dotgit(name):
            return GitMetadata(f"{shown} is git metadata ({name!r} is how git spells .git)")
    after = change.after
    if after is None:
        return None
    if after.kind not in _MERGEABLE:
        what = {"fifo": "a FIFO", "device": "a device node", "socket": "a socket"}
        return InvalidArguments(
            f"{shown} is {what.get(after.kind, after.kind)}; only files, links and "
            "directories are merged",
            field="path",
        )
    if after.mode & _SPECIAL_BITS:
        return InvalidArguments(
            f"{shown} has mode {after.mode:04o}: set-uid, set-gid and sticky bits are not merged",
            field="path",
        )
    if after.kind == "symlink":
        if after.digest is None:
            return InvalidArguments(f"{shown}: a link without a target", field="path")
        target = os.fsdecode(blobs.get(after.digest))
        if not _link_stays_inside(change.root, change.path, target, roots):
            return InvalidArguments(
                f"{shown} is a link to {escape_name(target)}, outside the workspace roots",
                field="path",
            )
    elif after.kind == "file" and after.digest is None:
        return InvalidArguments(f"{shown}: a file without content", field="path")
    return None


def _link_stays_inside(root: int, path: str, target: str, roots: Sequence[str]) -> bool:
    """Does a link at ``path`` with ``target`` point inside a root (judged lexically)?

    Lexical judgement is enough because every later access through the link
    resolves through the resolver again; this keeps links that lead out from
    being planted for other programs.
    """
    if not target:
        return False
    if target.startswith("/"):
        norm = posixpath.normpath(target)
        return any(norm == r or norm.startswith(r.rstrip("/") + "/") for r in roots)
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return joined != ".." and not joined.startswith("../") and not joined.startswith("/")


# -- the merge ---------------------------------------------------------------------------


def _walk_to(resolver: Resolver, change: Change, op: Callable[[Place], Any], create: bool) -> Any:
    """Run ``op`` at the change's place: its parent directory and leaf name.

    The leaf itself is never followed (a link is the entry, not its target).
    With ``create``, missing parents are made with the writer's git checks.
    """
    root = resolver.roots[change.root]
    where = change.path if change.root == 0 else posixpath.join(str(root.path), change.path)
    made: list[tuple[int, str]] = []

    def make_dir(place: Place, name: str) -> None:
        make_checked_dir(place, name, made)

    try:
        return resolver.walk(where, op, access=CONFINED, make_dir=make_dir if create else None)
    finally:
        for fd, _ in made:
            os.close(fd)


def _current(resolver: Resolver, change: Change) -> Image | None:
    def op(place: Place) -> Image | None:
        assert place.leaf is not None
        return image_at(place.dir_fd, place.leaf, None)

    try:
        return _walk_to(resolver, change, op, create=False)
    except RingfenceError as exc:
        if exc.code == "not_found":
            return None
        raise


def _apply_one(
    resolver: Resolver,
    change: Change,
    blobs: Blobs,
    owner: tuple[int, int],
    to_sync: dict[tuple[int, int], int] | None,
    keep_full_dirs: bool = False,
) -> Image | None:
    """Make the path's state ``change.after``; return the image it had (stored in ``blobs``)."""
    after = change.after

    def op(place: Place) -> Image | None:
        leaf = place.leaf
        assert leaf is not None
        display = place.display()
        check_git_chain(place, display)
        dir_fd = place.dir_fd
        found = image_at(dir_fd, leaf, blobs)
        try:
            if after is None:
                if found is not None and found.kind == "dir":
                    try:
                        os.rmdir(leaf, dir_fd=dir_fd)
                    except OSError as exc:
                        if exc.errno != errno.ENOTEMPTY or not keep_full_dirs:
                            raise
                        # forced: entries the set did not make are never deleted with it
                elif found is not None:
                    os.unlink(leaf, dir_fd=dir_fd)
                return found
            if after.kind == "dir":
                if found is not None and found.kind != "dir":
                    os.unlink(leaf, dir_fd=dir_fd)
                if found is None or found.kind != "dir":
                    if is_git_directory(dir_fd, {leaf: ("dir", None)}):
                        raise GitMetadata(f"creating {display} would make a git directory")
                    os.mkdir(leaf, 0o700, dir_fd=dir_fd)
                    _own(leaf, dir_fd, owner)
                os.chmod(leaf, after.mode, dir_fd=dir_fd)
                return found
            assert after.digest is not None
            data = blobs.get(after.digest)
            if found is not None and found.kind == "dir":
                os.rmdir(leaf, dir_fd=dir_fd)  # a directory replaced by a file: empty by now
                found_dir = found
            else:
                found_dir = None
            if after.kind == "symlink":
                temp = f".ringfence-{os.urandom(8).hex()}.tmp"
                os.symlink(os.fsdecode(data), temp, dir_fd=dir_fd)
                try:
                    os.replace(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(temp, dir_fd=dir_fd)
                    raise
                _own(leaf, dir_fd, owner)
                return found_dir or found
            if found is not None and found.kind == "symlink":
                os.unlink(leaf, dir_fd=dir_fd)  # replace the link itself, never its target
            if is_git_directory(dir_fd, {leaf: ("file", data)}):
                raise GitMetadata(f"writing {display} would make its directory a git directory")
            created = replace_file(place, data, sync_dir=False if to_sync is not None else None)
            if to_sync is not None:
                key = os.fstat(dir_fd)
                if (key.st_dev, key.st_ino) not in to_sync:
                    to_sync[(key.st_dev, key.st_ino)] = os.dup(dir_fd)
            if created:
                _own(leaf, dir_fd, owner)
            os.chmod(leaf, after.mode, dir_fd=dir_fd)
            return found_dir or found
        except OSError as exc:
            raise translate_oserror(exc, display, writing=True) from None

    return _walk_to(resolver, change, op, create=after is not None)


def _own(leaf: str, dir_fd: int, owner: tuple[int, int]) -> None:
    """Merged entries belong to the workspace owner (only root can give them away)."""
    if os.geteuid() == 0:
        os.chown(leaf, *owner, dir_fd=dir_fd, follow_symlinks=False)


def merge_changes(
    workspace: Workspace,
    changes: Sequence[Change],
    blobs: Blobs,
    *,
    atomic: bool = True,
    force: bool = False,
    durable: bool = True,
) -> MergeReport:
    """Apply ``changes`` to the workspace through the guarded writer (see the module docstring).

    Raises the first refusal's error (with ``details["refused"]`` listing every
    refused entry) when ``atomic`` and any entry is refused, a ToolError with
    ``details["conflicts"]`` when a path no longer has its before-image (and
    not ``force``); in both cases nothing was changed. Returns what was
    applied, each change's ``before`` being the image the path really had (so
    the report is itself an undoable change set), and the refused entries.

    ``durable`` (default): every file and directory written is fsynced;
    ``False`` leaves that to the kernel's writeback (a shell command's merge:
    as durable as the command writing the workspace itself, and a 10,000-file
    set does not wait for 10,000 journal commits).
    """
    resolver = workspace._resolver
    with resolver:
        roots = [str(r.path) for r in resolver.roots]
        refused: list[dict[str, Any]] = []
        errors: list[RingfenceError] = []
        accepted: list[Change] = []
        for change in changes:
            error = _refusal(change, roots, blobs)
            if error is not None:
                errors.append(error)
                refused.append(
                    {"path": escape_name(change.path), "code": error.code, "message": error.message}
                )
            else:
                accepted.append(change)
        if errors and atomic:
            first = errors[0]
            raise first.with_(
                message=f"{first.message}; the change set was refused as a whole "
                f"({len(errors)} refused entries), nothing was changed",
                details={**first.details, "refused": refused},
            )
        if not force:
            conflicts = _conflicts(resolver, accepted)
            if conflicts:
                raise ToolError(
                    "conflict: these files changed since the change set was made: "
                    + ", ".join(conflicts)
                    + "; nothing was changed (--force overwrites them)",
                    conflicts=conflicts,
                )
        st = os.fstat(resolver.roots[0].fd)
        owner = (st.st_uid, st.st_gid)
        applied: list[Change] = []
        # Directories written into: fsynced once, at the end (None: not durable).
        to_sync: dict[tuple[int, int], int] | None = {} if durable else None
        try:
            for change in accepted:
                found = _apply_one(resolver, change, blobs, owner, to_sync, keep_full_dirs=force)
                applied.append(Change(change.root, change.path, found, change.after))
        except BaseException:
            for done in reversed(applied):  # best effort: put back what this merge changed
                with contextlib.suppress(Exception):
                    _apply_one(resolver, done.inverse(), blobs, owner, to_sync)
            raise
        finally:
            for fd in (to_sync or {}).values():
                with contextlib.suppress(OSError):
                    fsync_dir(fd)
                os.close(fd)
        return MergeReport(tuple(applied), tuple(refused))


def _conflicts(resolver: Resolver, changes: Sequence[Change]) -> list[str]:
    """The paths whose current state is not the before-image, in order (each once).

    A directory to delete conflicts too when it holds an entry the set does
    not delete before it (someone else's file would go with it).
    """
    seen: dict[tuple[int, str], Image | None] = {}
    absent: set[tuple[int, str]] = set()  # paths that do not exist now, nor below them
    out: list[str] = []
    for change in changes:
        key = (change.root, change.path)
        parent = (change.root, posixpath.dirname(change.path))
        # A path touched twice: its second before-image is the first's after-image. Below a
        # path found absent nothing exists either (a new tree costs no walk per entry).
        if key in seen:
            current = seen[key]
        elif parent in absent:
            current = None
        else:
            current = _current(resolver, change)
        if current is None and key not in seen:
            absent.add(key)
        stale = not same_state(current, change.before)
        if not stale and change.after is None and current is not None and current.kind == "dir":
            gone = {k for k, v in seen.items() if v is None}  # deleted earlier in this set
            left = [
                n
                for n in _entries(resolver, change)
                if (change.root, f"{change.path}/{n}") not in gone
            ]
            stale = bool(left)
        if stale and escape_name(change.path) not in out:
            out.append(escape_name(change.path))
        seen[key] = change.after
    return out


def _entries(resolver: Resolver, change: Change) -> list[str]:
    def op(place: Place) -> list[str]:
        assert place.leaf is not None
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(place.leaf, flags, dir_fd=place.dir_fd)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    return _walk_to(resolver, change, op, create=False)
