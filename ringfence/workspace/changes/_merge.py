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

Speed (a shell command's merge can be 10,000 files): siblings share one walk
(:class:`_Dirs`), a new file is renamed from the overlay's upper directory when
it can be (``sources``), a durable merge ends in one ``syncfs``, and a replaced
inode is freed on another thread. These are the one guarded writer's own steps,
kept beside the checks they must not skip.

A merge is not atomic by itself: a failure while writing rolls back what was
applied (best effort), and a killed process leaves the set half-applied until
the next start rolls it back from the store's journal (:mod:`._journal`,
:func:`roll_back`). Not promised: atomicity against another process writing
the same paths during the merge (each entry is checked again just before it is
written, a conflict unless forced, not locked: a write within that moment is
overwritten, and kept as the set's before-image).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import eq, itemgetter
from typing import Any

from ..._confine.fscalls import can_rename_noreplace, can_syncfs, rename_noreplace
from ...runtime._errors import (
    GitMetadata,
    InvalidArguments,
    OutsideWorkspace,
    RingfenceError,
    ToolError,
    Unwritable,
)
from .._names import escape_name
from .._resolver import CONFINED, FollowLeaf, Place, Resolver, Root, translate_oserror
from .._workspace import Workspace
from .._writelock import writing
from .._writer import (
    MAX_PATH_BYTES,
    check_git_chain,
    dir_denies_create,
    is_temp_name,
    make_checked_dir,
    replace_file,
    temp_name,
)
from ..git._rules import MAY_START_DOTGIT, is_dotgit, is_git_directory
from ._fscalls import Releases, sync_and_close
from ._model import Blobs, Change, Image, file_identity, image_and_identity, image_at, same_state
from ._upper import UpperFiles

__all__ = ["MergeReport", "merge_changes", "roll_back"]

# Change's fields, for passes in C.
_ROOT_OF, _PATH_OF, _BEFORE_OF, _AFTER_OF = (itemgetter(i) for i in range(4))

_MERGEABLE = frozenset({"file", "symlink", "dir"})
_NOT_NAMES = frozenset({"", ".", ".."})  # path components that name no entry of their own
_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


@dataclass(frozen=True)
class MergeReport:
    """What a merge did: the changes applied (with the before-images found) and those refused."""

    applied: tuple[Change, ...]
    refused: tuple[dict[str, Any], ...] = field(default=())


# -- refusals ----------------------------------------------------------------------------


def _refusal(
    change: Change, roots: Sequence[str], blobs: Blobs, plain: set[tuple[int, str]]
) -> RingfenceError | None:
    """Why ``change`` may not be merged, judged on the change alone (None: it may).

    ``plain`` holds the directories whose every name was found plain and
    not git's: a sibling then needs only its own name checked.
    """
    root, path, before, after = change
    parent, _, leaf = path.rpartition("/")
    key = (root, parent)
    if path == "." and before is not None and after is not None and after.kind == "dir":
        return InvalidArguments(
            f"the workspace root's own mode ({before.mode:04o} to {after.mode:04o}): a "
            "command does not change a root's mode (the host's), so it is not merged",
            field="path",
        )
    # A top-level name's parent "" is no directory: "/x" must be split and refused. A name
    # beside one found plain (its root checked) is judged alone, the common case inline:
    # a 10,000-file set asks this 10,000 times.
    if not (
        parent
        and key in plain
        and leaf not in _NOT_NAMES
        and leaf[:1] not in MAY_START_DOTGIT
        and "\\" not in leaf
    ):
        if not 0 <= root < len(roots):
            shown = escape_name(path)
            return InvalidArguments(f"{shown}: no workspace root number {root}", field="path")
        parts = [leaf] if parent and key in plain else path.split("/")
        if any(p in _NOT_NAMES for p in parts):
            shown = escape_name(path)
            return InvalidArguments(f"{shown}: not a plain relative path", field="path")
        for name in parts:
            if is_dotgit(name):
                shown = escape_name(path)
                return GitMetadata(f"{shown} is git metadata ({name!r} is how git spells .git)")
        plain.add(key)
        if after is not None and is_temp_name(leaf):
            return InvalidArguments(
                f"{escape_name(path)}: .ringfence-<16 hex digits>.tmp is the name of ringfence's "
                "writers' temporary files, which a recovery removes unrecorded; not merged",
                field="path",
            )
    if before is not None and before.mode & _SPECIAL_BITS:
        # What the path holds now is the host's: its set-id or sticky bit could not be put
        # back by an undo (a writer never sets one), so the set would not be undoable.
        return InvalidArguments(
            f"{escape_name(path)} has mode {before.mode:04o}: a set-uid, set-gid or sticky "
            "path is not changed or deleted by a change set (an undo could not put those "
            "bits back); it was left as it is",
            field="path",
        )
    if after is None or (
        after.kind == "file" and after.digest is not None and not after.mode & _SPECIAL_BITS
    ):
        return None  # the common case, judged without building a message
    shown = escape_name(change.path)
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


class _Remembered:
    """The merge's :class:`~._model.Blobs`: each content stored once and each small
    after-image read (and its digest checked) once per merge, not once per file.

    A set's files often share content (empty files, the same generated line): a
    second ``put`` of it cost a ``stat`` in the store, a second ``get`` an open,
    a read and a hash. What is kept is bounded (:data:`_KEPT_BYTES` per blob,
    :data:`_KEPT_BLOBS` blobs).
    """

    def __init__(self, blobs: Blobs) -> None:
        self._blobs = blobs
        self._stored: set[str] = set()
        self._read: dict[str, bytes] = {}

    def get(self, digest: str) -> bytes:
        data = self._read.get(digest)
        if data is None:
            data = self._blobs.get(digest)
            if len(data) <= _KEPT_BYTES and len(self._read) < _KEPT_BLOBS:
                self._read[digest] = data
        return data

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self._stored:
            digest = self._blobs.put(data)
            self._stored.add(digest)
        return digest

    def put_fd(self, fd: int) -> tuple[str, int]:
        return self._blobs.put_fd(fd)

    def has(self, digest: str) -> bool:
        """Is it stored (False when the blobs cannot say: the caller reads the file)?"""
        if digest in self._stored:
            return True
        has = getattr(self._blobs, "has", None)
        return has is not None and has(digest)


_KEPT_BYTES = 1 << 16
_KEPT_BLOBS = 256


class _Dirs:
    """The directories one merge writes into, each walked once (siblings share the walk).

    After a change's walk succeeds, its directory is kept (one descriptor,
    at most :data:`_KEPT_DIRS` of them, oldest dropped); a sibling then runs
    at that directory directly. For the merge's writes the kept chain's git
    check is done (``chain_checked``); the conflict check uses its own. Kept
    directories are dropped when a change could alter a chain: a directory
    or link deleted or replaced, a link made (a merge's own writes cannot
    make a kept directory a git directory: each write that would complete
    one is refused where it happens).
    """

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self._kept: dict[tuple[int, str], tuple[Root, list[str], int]] = {}
        # Kept directories a durable merge has noted for its sync: a sibling need not look.
        self.to_sync: set[tuple[int, str]] = set()
        # The change being written and the image its path had: set once its checks passed,
        # cleared when it is applied. A failure in between (a chmod after the mkdir or the
        # rename) may have written part of it: the merge puts that back too.
        self.begun: Change | None = None
        # Directories this writer made or gave a mode that denies its owner creating entries
        # (``0500``): written at their mode ``| 0o700`` and given theirs by :meth:`finish`,
        # after every entry below them (see :func:`_writable_first`). Kept across ``close``.
        self.deferred: dict[tuple[int, str], int] = {}
        # The directories the set being written names (made, removed or given a mode): the
        # only ones opened for writing when their mode denies it (see :func:`_open_parent`).
        self.in_set: set[tuple[int, str]] = set()

    def finish(self) -> None:
        """Give every deferred directory its mode, deepest first (a parent's mode never
        stops the walk to its child)."""
        while self.deferred:
            deepest = max(self.deferred, key=lambda k: (k[1].count("/"), k))
            mode = self.deferred[deepest]

            def op(place: Place, mode: int = mode) -> None:
                assert place.leaf is not None
                try:
                    os.chmod(place.leaf, mode, dir_fd=place.dir_fd, follow_symlinks=False)
                except OSError as exc:
                    raise translate_oserror(exc, place.display(), writing=True) from None

            try:
                self.walk(Change(deepest[0], deepest[1], None, Image("dir", mode)), op, False)
            except RingfenceError as exc:
                if exc.code != "not_found":  # removed since (a put-back): nothing to give
                    raise
            del self.deferred[deepest]

    def walk(self, change: Change, op: Callable[[Place], Any], create: bool) -> Any:
        key = (change.root, posixpath.dirname(change.path))
        kept = self._kept.get(key)
        if kept is not None:
            root, names, fd = kept
            # Only the last descriptor is real: the chain's git check is done (see walk_from).
            place = Place(root, [(n, -1) for n in names[:-1]] + [(names[-1], fd)] if names else [])
            place.leaf = posixpath.basename(change.path)
            try:
                return op(place)
            except FollowLeaf:
                pass  # not expected of a merge's ops; the full walk handles it

        calls = 0

        def keep(place: Place) -> Any:
            nonlocal calls
            calls += 1  # a second call is at a link's target: not the change's directory
            result = op(place)
            if calls == 1 and key not in self._kept:
                if len(self._kept) >= _KEPT_DIRS:
                    os.close(self._kept.pop(next(iter(self._kept)))[2])
                self._kept[key] = (place.root, place.names, os.dup(place.dir_fd))
            return result

        return _walk_to(self.resolver, change, keep, create)

    def chain_checked(self, change: Change) -> bool:
        return (change.root, posixpath.dirname(change.path)) in self._kept

    def applied(self, found: Image | None, after: Image | None) -> None:
        """Forget every kept directory when this change could alter a chain."""
        kinds = (found.kind if found else None, after.kind if after else None)
        if "symlink" in kinds or (kinds[0] == "dir" and kinds[1] != "dir"):
            self.close()

    def close(self) -> None:
        for _, _, fd in self._kept.values():
            os.close(fd)
        self._kept.clear()
        self.to_sync.clear()


_KEPT_DIRS = 16


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


# The files whose images are known, by path: the identity they had when they were hashed
# (:func:`~._model.file_identity`) and the image. Seeded with the before-images a shell
# command's capture hashed (``UpperFiles.known``), heard from the conflict check: while a
# file's identity is unchanged its image is reused, so it is hashed at most once per merge.
_Known = dict[tuple[int, str], tuple[tuple[int, ...], Image]]


def _current(dirs: _Dirs, change: Change, known: _Known | None = None) -> Image | None:
    def op(place: Place) -> Image | None:
        assert place.leaf is not None
        if known is None:
            return image_at(place.dir_fd, place.leaf, None)
        key = (change.root, change.path)
        hit = known.pop(key, None)
        if hit is not None:
            try:
                st = os.stat(place.leaf, dir_fd=place.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if file_identity(st) == hit[0]:
                known[key] = hit
                return hit[1]
        image, identity = image_and_identity(place.dir_fd, place.leaf, None)
        if identity is not None:
            known[key] = (identity, image)
        return image

    try:
        return dirs.walk(change, op, create=False)
    except RingfenceError as exc:
        if exc.code == "not_found":
            return None
        raise


def _apply_one(
    dirs: _Dirs,
    change: Change,
    blobs: Blobs,
    owner: tuple[int, int],
    to_sync: dict[tuple[int, int], int] | None,
    keep_full_dirs: bool = False,
    sources: UpperFiles | None = None,
    known: _Known | None = None,
    release: Callable[[int], None] = os.close,
    physical: bool = False,
    expect: bool = False,
) -> Image | None:
    """Make the path's state ``change.after``; return the image it had (stored in ``blobs``).

    ``release`` closes a replaced file's last descriptor (the merge's :class:`Releases`).
    ``physical`` (a rollback, which no resulting-tree check judged): refused unless the
    directory reached is the one the change names, no link followed on the way.
    ``expect`` (a merge not forced): the path must still hold ``change.before`` exactly as
    it is written (the conflict check ran before the first write: another writer since,
    the person's editor, is a conflict here too, not overwritten).
    """
    after = change.after

    def op(place: Place) -> Image | None:
        leaf = place.leaf
        assert leaf is not None
        if physical:
            _check_physical(place, change)
        if not chain_checked:
            check_git_chain(place, place.display(), dirs.resolver)
        dir_fd = place.dir_fd
        found = _found(dir_fd, leaf, blobs, (known or {}).pop((change.root, change.path), None))
        opened = dirs.deferred.get((change.root, change.path))
        if opened is not None and found is not None and found.kind == "dir":
            found = found._replace(mode=opened)  # opened by this writer: its mode is this one
        if expect and not _exactly(found, change.before):
            shown = escape_name(change.path)
            raise ToolError(
                f"conflict: {shown} changed while the change set was being applied (after "
                "its conflict check); what was applied is put back, nothing was changed "
                "(--force overwrites it)",
                conflicts=[shown],
            )
        if after is None and found is not None:
            _undoable_deletion(dirs, change, dir_fd)  # before anything of it is written
        dirs.begun = Change(change.root, change.path, found, after)
        try:
            _open_parent(dirs, change, dir_fd)
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
                    if is_git_directory(dir_fd, {leaf: ("dir", None)}, beneath=place.beneath):
                        raise GitMetadata(f"creating {place.display()} would make a git directory")
                    os.mkdir(leaf, 0o700, dir_fd=dir_fd)
                    _own(leaf, dir_fd, owner)
                os.chmod(leaf, _writable_first(dirs, change), dir_fd=dir_fd)
                return found
            assert after.digest is not None
            source = sources.take(change, after) if sources is not None else None
            # Renamed from the upper: the bytes are only needed to judge a HEAD (the git check).
            data = blobs.get(after.digest) if source is None or leaf == "HEAD" else b""
            if found is not None and found.kind == "dir":
                os.rmdir(leaf, dir_fd=dir_fd)  # a directory replaced by a file: empty by now
                found_dir = found
            else:
                found_dir = None
            if after.kind == "symlink":
                # Checked on disk too (another writer meanwhile), as git follows links.
                if is_git_directory(dir_fd, {leaf: ("symlink", data)}, beneath=place.beneath):
                    raise GitMetadata(
                        f"linking {place.display()} would make its directory a git directory"
                    )
                temp = temp_name()
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
            if is_git_directory(dir_fd, {leaf: ("file", data)}, beneath=place.beneath):
                raise GitMetadata(
                    f"writing {place.display()} would make its directory a git directory"
                )
            # Durable merges sync once per file system at the end (syncfs), not per file.
            per_file = to_sync is not None and not can_syncfs()
            sync = False if per_file else None
            try:
                created = replace_file(
                    place, data, sync_dir=sync, source=source, release=release, mode=after.mode
                )
            except OSError as exc:  # EXDEV: the upper is on another mount; copy from now on
                assert sources is not None and exc.errno == errno.EXDEV
                sources.disabled = True
                data = blobs.get(after.digest)
                created = replace_file(place, data, sync_dir=sync, release=release, mode=after.mode)
            finally:
                if source is not None:
                    os.close(source[2])
            if to_sync is not None and not (chain_checked and where in dirs.to_sync):
                key = os.fstat(dir_fd)
                if (key.st_dev, key.st_ino) not in to_sync:
                    to_sync[(key.st_dev, key.st_ino)] = os.dup(dir_fd)
                dirs.to_sync.add(where)  # kept after this walk: its siblings run at this fd
            if created:  # a replaced file has the set's mode already
                _own(leaf, dir_fd, owner)
                os.chmod(leaf, after.mode, dir_fd=dir_fd)
            return found_dir or found
        except OSError as exc:
            raise translate_oserror(exc, place.display(), writing=True) from None

    where = (change.root, posixpath.dirname(change.path))
    chain_checked = dirs.chain_checked(change)
    found = dirs.walk(change, op, create=after is not None)
    dirs.begun = None
    dirs.applied(found, after)
    return found


def _open_parent(dirs: _Dirs, change: Change, dir_fd: int) -> None:
    """Give the owner write and search on the change's directory while the set is written,
    when its mode denies them and the set names that directory (it removes it, makes it or
    gives it a mode); :meth:`_Dirs.finish` gives it back its mode.

    A rollback of a killed ``rm -rf`` of a read-only tree (``d/e`` ``0555``, ``d/e/g``
    deleted, ``d/e`` not yet) had to put ``d/e/g`` back into ``d/e`` as it was, which the
    writer refuses: every later start failed ("nothing else runs in this workspace") with the
    tree half-deleted. A directory the set does not name keeps its mode and refuses."""
    parent = (change.root, posixpath.dirname(change.path))
    if parent not in dirs.in_set:
        return
    st = os.fstat(dir_fd)
    if not dir_denies_create(st):
        return
    dirs.deferred.setdefault(parent, stat.S_IMODE(st.st_mode))
    os.chmod(f"/proc/self/fd/{dir_fd}", stat.S_IMODE(st.st_mode) | 0o700)


def _undoable_deletion(dirs: _Dirs, change: Change, dir_fd: int) -> None:
    """Refuse deleting an entry of a directory that denies its owner creating entries and
    that the set does not name (so :func:`_open_parent` did not open it): the writer could
    never put it back there, so neither an undo nor a rollback could.

    ``chmod u+w ro; rm ro/f; chmod u-w ro`` merged as the deletion of ``ro/f`` alone (``ro``'s
    mode unchanged), and its ``undo`` was refused for good ("its directory does not allow
    creating files"); a merge of it killed before its end stopped every later start."""
    if (change.root, posixpath.dirname(change.path)) in dirs.in_set:
        return
    if dir_denies_create(os.fstat(dir_fd)):
        parent = escape_name(posixpath.dirname(change.path)) or "."
        raise Unwritable(
            f"{escape_name(change.path)} cannot be deleted: its directory {parent} does not "
            "allow creating entries (mode "
            f"{stat.S_IMODE(os.fstat(dir_fd).st_mode):04o}), so the deletion could not be "
            "undone; it was left as it is",
            field="path",
        )


def _parent_denies(dirs: _Dirs, change: Change) -> bool:
    """Does the change's directory deny its owner creating entries, and does the set not name
    it (so no writer of it may write there)?"""
    if (change.root, posixpath.dirname(change.path)) in dirs.in_set:
        return False

    def op(place: Place) -> bool:
        return dir_denies_create(os.fstat(place.dir_fd))

    try:
        return bool(dirs.walk(change, op, create=False))
    except RingfenceError:
        return False


def _dirs_named(changes: Sequence[Change]) -> set[tuple[int, str]]:
    """The directories ``changes`` name: made, removed or given a mode."""
    return {
        (c.root, c.path)
        for c in changes
        if (c.before is not None and c.before.kind == "dir")
        or (c.after is not None and c.after.kind == "dir")
    }


def _writable_first(dirs: _Dirs, change: Change) -> int:
    """The mode to give the directory ``change`` makes now: its own, or, when that mode
    denies its owner creating entries (``0500``, ``0444``), its own ``| 0o700`` until
    :meth:`_Dirs.finish` gives it its own after the entries below it are written.

    Given at once, the entries the set holds below it could not be written: the undo of
    ``chmod -R u+w d; rm -rf d`` (``d`` was ``0500``) made ``d`` ``0500`` and then refused
    ``d/f`` ("its directory does not allow creating files"), so the deletion merged and could
    never be undone; a killed merge of it, rolled back at the next start, stopped every start
    the same way. A kill between the two is the after-image with another mode, which a
    rollback takes back as the after-image (see :func:`roll_back`)."""
    after = change.after
    assert after is not None
    key = (change.root, change.path)
    if not dir_denies_create(_mode_only(after.mode)):
        dirs.deferred.pop(key, None)
        return after.mode
    dirs.deferred[key] = after.mode
    return after.mode | 0o700


def _mode_only(mode: int) -> os.stat_result:
    """A directory's stat with these permission bits and this process as its owner (what
    :func:`dir_denies_create` judges)."""
    return os.stat_result((stat.S_IFDIR | mode, 0, 0, 0, os.geteuid(), os.getegid(), 0, 0, 0, 0))


def _check_physical(place: Place, change: Change) -> None:
    """Refuse ``place`` unless it is the change's own directory, reached without a link.

    A change set names physical paths; a link planted on one after the set was made
    (``sub -> .git/hooks``) must not carry a rollback's write somewhere the set never wrote.
    """
    parent = change.path.rpartition("/")[0]
    if place.root.index == change.root and place.names == (parent.split("/") if parent else []):
        return
    raise InvalidArguments(
        f"{escape_name(change.path)}: a directory on its path is now a link (it leads to "
        f"{escape_name(place.display()) or '.'}); only the path the change set names is written",
        field="path",
    )


def _move_tree(
    dirs: _Dirs,
    changes: Sequence[Change],
    i: int,
    sources: UpperFiles,
    owner: tuple[int, int],
) -> int:
    """Rename the new directory ``changes[i]`` from its upper directory whole; how many
    changes that applied (it and every change below it), or 0: merge them one by one.

    Only a directory the read found fit to move (:class:`~._model.UpperTree`:
    new, every entry a plain file with one name, a link or a directory,
    without extended attributes, owned by whom the merged entries must
    belong to, no git directory in it) and only when every change below it
    was accepted (none refused): the tree then holds exactly what the Gate
    let through. The checks of its place are the ones a ``mkdir`` there
    passes (the git chain, not completing a git directory, a directory
    that allows creating entries), and the rename never replaces anything
    (``RENAME_NOREPLACE``): a name taken meanwhile falls back to the
    one-by-one merge, as a rename across file systems does.
    """
    change = changes[i]
    after = change.after
    if (
        change.before is not None
        or after is None
        or after.kind != "dir"
        or not can_rename_noreplace()
    ):
        return 0
    tree = sources.tree(change)
    if tree is None:
        return 0
    # Exactly the tree's changes follow it (a refused one below it: merged one by one).
    prefix, end = change.path + "/", i + 1 + tree.changes
    inside = changes[i + 1 : end]
    if (
        len(inside) != tree.changes
        or not _all_below(inside, change.root, prefix)
        or (end < len(changes) and changes[end].root == change.root
            and changes[end].path.startswith(prefix))
    ):  # fmt: skip
        return 0
    source = sources.take_tree(change, tree, owner, MAX_PATH_BYTES)
    if source is None:
        return 0
    src_dir, name, fd = source

    def op(place: Place) -> bool:
        leaf = place.leaf
        assert leaf is not None
        display = place.display()
        if not chain_checked:
            check_git_chain(place, display, dirs.resolver)
        if is_git_directory(place.dir_fd, {leaf: ("dir", None)}, beneath=place.beneath):
            raise GitMetadata(f"creating {display} would make a git directory")
        if dir_denies_create(os.fstat(place.dir_fd)):
            raise Unwritable(f"{display} cannot be created: its directory does not allow it")
        try:
            os.chmod(fd, after.mode)
            rename_noreplace(src_dir, name, place.dir_fd, leaf)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                sources.disabled = True
                return False
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                return False  # made meanwhile: merged entry by entry, with their checks
            raise translate_oserror(exc, display, writing=True) from None
        return True

    chain_checked = dirs.chain_checked(change)
    try:
        moved = dirs.walk(change, op, create=True)
    finally:
        os.close(fd)
    return end - i if moved else 0


def _check_chains(resolver: Resolver, changes: Sequence[Change]) -> None:
    """Refuse the set before anything is applied when it writes below git metadata (a root
    inside it, a ``.git``, a git directory, a common directory): :func:`check_git_chain`,
    which each write repeats as it happens, made here first, so that a dry run stages only
    what applying would do and a refusal leaves nothing to roll back. Each directory the set
    writes in once, at its deepest part that exists now and that the set keeps (what it makes
    or replaces there, a link made a directory included, is judged on the resulting tree)."""
    done: set[tuple[int, str]] = set()
    # Paths whose entry the set removes, replaces or makes: never walked through as they are.
    cut = {
        (c.root, c.path)
        for c in changes
        if c.before is None or c.after is None or c.before.kind != "dir" or c.after.kind != "dir"
    }
    first: dict[tuple[int, str], str] = {}  # each directory: the first path written in it
    for change in changes:
        first.setdefault((change.root, posixpath.dirname(change.path)), change.path)
    for (root, parent), shown in first.items():
        parts = parent.split("/") if parent else []
        for depth in range(1, len(parts) + 1):
            if (root, "/".join(parts[:depth])) in cut:
                parent = "/".join(parts[: depth - 1])
                break
        while (root, parent) not in done:
            done.add((root, parent))
            base = str(resolver.roots[root].path)
            where = (parent or ".") if root == 0 else posixpath.join(base, parent)

            def op(place: Place, shown: str = shown) -> None:
                check_git_chain(place, escape_name(shown), resolver)

            try:
                resolver.walk(f"{where}/.", op, access=CONFINED)
                break
            except RingfenceError as exc:
                if exc.code != "not_found" or not parent:
                    raise
                parent = posixpath.dirname(parent)  # made by the set: its parent decides


def _all_below(changes: Sequence[Change], root: int, prefix: str) -> bool:
    """Every change is in ``root`` below ``prefix`` (``dir/``): in C, a tree can hold 10,000."""
    return all(map(eq, map(_ROOT_OF, changes), repeat(root))) and all(
        map(str.startswith, map(_PATH_OF, changes), repeat(prefix))
    )


def _found(
    dir_fd: int, leaf: str, blobs: Blobs, known: tuple[tuple[int, ...], Image] | None
) -> Image | None:
    """The leaf's image, stored in ``blobs``: the conflict check's when the file is still
    the one it hashed and the store has its bytes (it is the set's before-image), else read."""
    if known is not None:
        has = getattr(blobs, "has", None)
        with contextlib.suppress(OSError):
            st = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
            image = known[1]
            if file_identity(st) == known[0] and has is not None and has(image.digest):
                return image
    return image_at(dir_fd, leaf, blobs)


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
    sources: UpperFiles | None = None,
    judge_only: bool = False,
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

    ``sources`` (a shell command's merge): the overlay upper directory files
    that hold after-images; such a file is renamed into the workspace
    instead of a copy being written, when it is still the inode that was
    read, has one name and an owner the result may have (the store keeps its
    own copy of the bytes, so no stored image shares an inode with the
    workspace). Every check and refusal is the same either way. Closed
    when the merge ends.

    ``judge_only`` (a dry run staging the set): every refusal and check is made
    as for a merge (the conflict check too, unless ``force``), nothing is
    applied; the report's ``applied`` is what would be.
    """
    resolver = workspace._resolver
    blobs = _Remembered(blobs)
    # Judged and applied as one step among writers; a dry run's judgment writes nothing and
    # is made again when its set is applied, so it does not wait for another writer's turn.
    turn = contextlib.nullcontext() if judge_only else writing(resolver)
    with resolver, turn:
        accepted, refused = _judged(resolver, changes, blobs, atomic)
        accepted = _attributes_judged(resolver, accepted, refused, atomic)
        known: _Known = dict(sources.known) if sources is not None else {}
        if not force:
            looked = _Dirs(resolver)
            try:
                conflicts = _conflicts(looked, accepted, known, sources)
            finally:
                looked.close()
            if conflicts:
                raise ToolError(
                    "conflict: these files changed since the change set was made: "
                    + ", ".join(conflicts)
                    + "; nothing was changed (--force overwrites them)",
                    conflicts=conflicts,
                )
        # The guarantee: the tree the set leaves, judged as git and the kernel will read it.
        from ._resulting import check_resulting_tree  # loaded by the first merge

        judged = check_resulting_tree(resolver, accepted, blobs)
        _check_chains(resolver, accepted)
        if judge_only:
            return MergeReport(tuple(accepted), tuple(refused))
        st = os.fstat(resolver.roots[0].fd)
        owner = (st.st_uid, st.st_gid)
        applied: list[Change] = []
        dirs = _Dirs(resolver)
        dirs.in_set = _dirs_named(accepted)
        # Directories written into: fsynced once, at the end (None: not durable).
        to_sync: dict[tuple[int, int], int] | None = {} if durable else None
        releases = Releases()
        trees: list[Change] = []  # the new directories renamed whole
        try:
            i = 0
            while i < len(accepted):
                change = accepted[i]
                moved = _move_tree(dirs, accepted, i, sources, owner) if sources else 0
                if moved:  # a new directory renamed whole: its entries are applied with it
                    trees.append(change)
                    applied += accepted[i : i + moved]
                    i += moved
                    continue
                found = _apply_one(
                    dirs,
                    change,
                    blobs,
                    owner,
                    to_sync,
                    keep_full_dirs=force,
                    expect=not force,
                    sources=sources,
                    known=known,
                    release=releases,
                )
                applied.append(Change(change.root, change.path, found, change.after))
                i += 1
            dirs.finish()  # the directories that deny writing get their modes last
        except BaseException as exc:
            # The change that failed midway (its mkdir or rename done, its chmod not): first.
            begun, dirs.begun = dirs.begun, None
            dirs.close()
            # The replaced files' descriptors closed first: out of descriptors (EMFILE), the
            # put-back failed too with up to 4,096 of them still held, half-written.
            releases.join()
            unput: list[str] = []
            for done in [*([begun] if begun else []), *reversed(applied)]:
                # best effort: put back what this merge changed
                try:
                    _apply_one(dirs, done.inverse(), blobs, owner, to_sync)
                except Exception:  # (a full file system, another writer): named below
                    unput.append(escape_name(done.path))
            try:
                dirs.finish()
            except Exception:
                unput += [escape_name(p) for _, p in dirs.deferred]
            if unput and isinstance(exc, RingfenceError):
                # Half-written: said so, and marked for the journal, which then keeps the set
                # open (no E line) so the next start rolls it back (see Journal.writing).
                raise exc.with_(
                    message=f"{exc.message}; putting back what this merge had already "
                    f"written failed too ({', '.join(unput[:10])}"
                    f"{', …' if len(unput) > 10 else ''}): the workspace is half-written "
                    "until the next start of ringfence (or `ringfence recover`) rolls it "
                    "back, which needs that error gone (free space there first)",
                    details={**exc.details, "half_written": unput},
                ) from exc.__cause__
            raise
        finally:
            dirs.close()
            releases.flush()  # the closes go on meanwhile; joined last
            try:
                sync_and_close(to_sync or {})
                if sources is not None:
                    sources.close()
            finally:
                releases.join()
        if trees and sources is not None:
            # The directories inside them are as the read listed them: the next scan need not
            # list them again (see note_moved).
            from ._resulting import note_moved

            note_moved(resolver, judged, sources.scans_below(trees))
        return MergeReport(tuple(applied), tuple(refused))


def roll_back(
    workspace: Workspace, changes: Sequence[Change], blobs: Blobs
) -> tuple[int, list[str], list[dict[str, Any]]]:
    """Put back what an interrupted merge of ``changes`` applied:
    ``(changes undone, paths left, entries refused)``.

    Newest first, a path holding a change's after-image (whatever its mode), or its
    before-image's content with another mode (a rollback killed between a ``mkdir`` and
    its ``chmod``, run again), gets its before-image back (through the merge's own writer; a directory is removed only when
    empty, so nothing the set did not make goes with it); a path holding the
    before-image is passed over; a path in neither state (changed since by
    someone else) is left as it is and named. The writers' temporary files
    (``.ringfence-*.tmp``) are removed first from every directory the set
    touched. Durable (one ``syncfs``): a recovery must not be lost to the
    next crash.

    A rollback is a writer like any merge, and its manifest is data read back
    from the store: each change it would make is judged by the merge's own
    rules first (:func:`_refusal`: no git metadata, no path that is not plain,
    no device, FIFO or socket, no set-id bit, no link leaving the roots), and
    the writer's checks on disk refuse the rest as for a merge. A refused one is
    left as it is, named in ``left`` and listed with its reason: a manifest
    that would have recovery plant a hook or a link out never writes it, and
    one the merge's rules refuse never stops every later start.
    """
    resolver = workspace._resolver
    undone, left = 0, []
    refused: list[dict[str, Any]] = []
    roots = [str(r.path) for r in resolver.roots]
    plain: set[tuple[int, str]] = set()

    def refuse(change: Change, error: RingfenceError) -> None:
        shown = escape_name(change.path)
        left.append(shown)
        refused.append({"path": shown, "code": error.code, "message": error.message})

    judged: list[Change] = []
    for change in reversed(changes):
        if not 0 <= change.root < len(resolver.roots):
            continue
        try:
            error = _refusal(change.inverse(), roots, blobs, plain)
        except RingfenceError as exc:  # a link's target the store cannot give
            error = exc
        if error is not None:
            refuse(change, error)
        else:
            judged.append(change)
    with resolver, writing(resolver):
        st = os.fstat(resolver.roots[0].fd)
        owner = (st.st_uid, st.st_gid)
        dirs = _Dirs(resolver)
        dirs.in_set = _dirs_named(judged)
        to_sync: dict[tuple[int, int], int] = {}
        try:
            # Temporary files first: one left in a directory the set made keeps it from going.
            for root, parent in dict.fromkeys((c.root, c.path.rpartition("/")[0]) for c in judged):
                _remove_temps(resolver, root, parent, is_temp_name)
            todo: list[Change] = []
            for change in judged:
                current = _current(dirs, change)
                if _exactly(current, change.before):
                    continue
                # The after-image's content with another mode is the merge caught between
                # its own steps (a directory made 0700, then given its mode): put back too;
                # the before-image's content with another mode is a rollback caught there
                # (killed, and run again): given its mode.
                if not (same_state(current, change.after) or same_state(current, change.before)):
                    left.append(escape_name(change.path))
                    continue
                todo.append(change)
            dirs.close()
            # The tree the rollback leaves is judged as a merge's is (git's discovery, every
            # link's resolution): a rollback that only made a directory completed a repository
            # through a link elsewhere. Refused whole, each change is judged on its own, on the
            # tree as it is when it comes, and only a refused one is left.
            from ._resulting import check_resulting_tree  # loaded by the first merge

            inverse = [c.inverse() for c in todo]
            try:
                check_resulting_tree(resolver, inverse, blobs, what="this rollback")
                one_by_one = False
            except (GitMetadata, InvalidArguments, OutsideWorkspace):
                one_by_one = True
            for change in todo:
                try:
                    if one_by_one:
                        check_resulting_tree(
                            resolver, [change.inverse()], blobs, what="this rollback"
                        )
                    _apply_one(
                        dirs,
                        change.inverse(),
                        blobs,
                        owner,
                        to_sync,
                        keep_full_dirs=True,
                        physical=True,
                    )
                except (GitMetadata, InvalidArguments, OutsideWorkspace, Unwritable) as exc:
                    # Unwritable, when its directory denies writing (one the set does not
                    # name): left and named, never stopping every later start; any other
                    # (a full file system) stops this start, tried again at the next.
                    if isinstance(exc, Unwritable) and not _parent_denies(dirs, change):
                        raise
                    dirs.close()  # what it walked may be what was refused
                    refuse(change, exc)
                    continue
                if same_state(_current(dirs, change), change.before):
                    undone += 1
                else:  # a directory that holds what the set did not make stays
                    left.append(escape_name(change.path))
            dirs.finish()  # the directories that deny writing get their modes last
        finally:
            dirs.close()
            sync_and_close(to_sync)
    return undone, left, refused


def _exactly(current: Image | None, wanted: Image | None) -> bool:
    """:func:`same_state`, and the same permission bits (a link's are not its own)."""
    if not same_state(current, wanted):
        return False
    return current is None or current.kind == "symlink" or current.mode == wanted.mode  # type: ignore[union-attr]


def _remove_temps(
    resolver: Resolver, root: int, parent: str, is_temp: Callable[[str], bool]
) -> None:
    where = parent if root == 0 else posixpath.join(str(resolver.roots[root].path), parent)

    def op(place: Place) -> None:
        if place.root.index != root or place.names != parent.split("/")[:-1]:
            return  # reached through a link: not the directory the set touched
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(place.leaf or ".", flags, dir_fd=place.dir_fd)
        try:
            for name in os.listdir(fd):
                if is_temp(name):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)

    with contextlib.suppress(RingfenceError, OSError):
        resolver.walk(where or ".", op, access=CONFINED)


def _judged(
    resolver: Resolver, changes: Sequence[Change], blobs: Blobs, atomic: bool
) -> tuple[list[Change], list[dict[str, Any]]]:
    """(the changes accepted, the entries refused) by the entry-by-entry rules; with
    ``atomic``, any refused entry raises its error for the whole set."""
    roots = [str(r.path) for r in resolver.roots]
    refused: list[dict[str, Any]] = []
    errors: list[RingfenceError] = []
    accepted: list[Change] = []
    plain: set[tuple[int, str]] = set()
    unmade: set[tuple[int, str]] = set()  # directories refused where the set would make them
    for change in changes:
        # _refusal's common case inline (a 10,000-file set): a plain file, or a deletion,
        # beside a name found plain.
        root, path, before, after = change
        parent, _, leaf = path.rpartition("/")
        if (
            parent
            and (before is None or not before.mode & _SPECIAL_BITS)
            and (root, parent) in plain
            and leaf not in _NOT_NAMES
            and leaf[:1] not in MAY_START_DOTGIT
            and "\\" not in leaf
            and (
                after is None
                or (after.kind == "file" and after.digest is not None
                    and not after.mode & _SPECIAL_BITS)
            )
        ):  # fmt: skip
            accepted.append(change)
            continue
        error = _refusal(change, roots, blobs, plain)
        if error is not None:
            errors.append(error)
            refused.append(
                {"path": escape_name(change.path), "code": error.code, "message": error.message}
            )
            before = change.before
            if (
                after is not None
                and after.kind == "dir"
                and (before is None or before.kind != "dir")
            ):
                unmade.add((root, path))
        else:
            accepted.append(change)
    if unmade:
        accepted = _below_unmade(accepted, unmade, errors, refused)
    if errors and atomic:
        raise _refused_whole(errors, refused, len(errors))
    return accepted, refused


# Extended attributes an undo could not put back: every one but the labels a security module
# gives each new file by its own policy (an SELinux context), which go and come with the file.
_CAPABILITY = "security.capability"
# Shown on every file of a file system, whatever its ACL (NFSv4): not a mark of this file.
_ON_EVERY_FILE = frozenset({"system.nfs4_acl"})


def _lost_attributes(names: list[str], change: Change) -> list[str]:
    """The attributes of ``change``'s path (``names``) that the change would lose for good."""
    if _CAPABILITY in names:
        return [_CAPABILITY]  # a program's file capabilities: any change, like a set-id bit
    before, after = change.before, change.after
    if before is not None and after is not None and after.kind == before.kind:
        return []  # replaced in place: the writer carries the replaced inode's attributes over
    return [n for n in names if not n.startswith("security.") and n not in _ON_EVERY_FILE]


def _attributes_judged(
    resolver: Resolver, changes: list[Change], refused: list[dict[str, Any]], atomic: bool
) -> list[Change]:
    """``changes`` less those that would drop a path's extended attributes (a POSIX ACL, a
    ``user.*`` attribute, a program's file capabilities), which an image does not hold: a
    deletion of such a file merged, and its undo gave the bytes back without them. Refused
    ones are added to ``refused``; with ``atomic`` the first raises for the whole set."""
    if not any(c.before is not None for c in changes):
        return changes
    dirs = _Dirs(resolver)
    accepted: list[Change] = []
    errors: list[RingfenceError] = []

    def names_at(place: Place) -> list[str]:
        assert place.leaf is not None
        try:
            return os.listxattr(f"/proc/self/fd/{place.dir_fd}/{place.leaf}", follow_symlinks=False)
        except OSError:
            return []  # absent (a conflict, judged next) or a file system without them

    try:
        for change in changes:
            lost: list[str] = []
            if change.before is not None:
                try:
                    lost = _lost_attributes(dirs.walk(change, names_at, create=False), change)
                except (RingfenceError, OSError):
                    lost = []  # not reachable as named: the conflict check says so
            if not lost:
                accepted.append(change)
                continue
            shown = escape_name(change.path)
            error = InvalidArguments(
                f"{shown} has extended attributes ({', '.join(sorted(lost)[:5])}) that a "
                "change set does not record, so an undo could not put them back; it was "
                "left as it is",
                field="path",
            )
            errors.append(error)
            refused.append({"path": shown, "code": error.code, "message": error.message})
    finally:
        dirs.close()
    if errors and atomic:
        raise _refused_whole(errors, refused, len(refused))
    return accepted


def _below_unmade(
    accepted: list[Change],
    unmade: set[tuple[int, str]],
    errors: list[RingfenceError],
    refused: list[dict[str, Any]],
) -> list[Change]:
    """``accepted`` less every change below a directory the set makes that was refused.

    Merged, such a change needed its directory, which the writer's walk then made on its
    own: in the workspace, in no change set, so ``undo`` left it there (``mkdir -m 1777 t;
    echo > t/f``: ``t`` refused for its sticky bit, made anyway for ``t/f``).
    """
    kept: list[Change] = []
    for change in accepted:
        root, path = change.root, change.path
        parent = path.rpartition("/")[0]
        while parent and (root, parent) not in unmade:
            parent = parent.rpartition("/")[0]
        if not parent:
            kept.append(change)
            continue
        unmade.add((root, path))  # a directory below one refused is not made either
        shown = escape_name(path)
        error = InvalidArguments(
            f"{shown} is below {escape_name(parent)}, a directory this change set makes that "
            "was refused; it was not merged either",
            field="path",
        )
        errors.append(error)
        refused.append({"path": shown, "code": error.code, "message": error.message})
    return kept


def _conflicts(
    dirs: _Dirs,
    changes: Sequence[Change],
    known: _Known | None = None,
    sources: UpperFiles | None = None,
) -> list[str]:
    """The paths whose current state is not the before-image (kind, content and permission
    bits), in order (each once).

    A directory to delete conflicts too when it holds an entry the set does
    not delete before it (someone else's file would go with it). ``known``
    hears the files it hashed (see :data:`_Known`); ``sources`` names the new
    trees of an upper directory (see :func:`_new_tree`).
    """
    seen: dict[tuple[int, str], Image | None] = {}
    absent: set[tuple[int, str]] = set()  # paths that do not exist now, nor below them
    out: list[str] = []
    i = 0
    while i < len(changes):
        change = changes[i]
        i += 1
        root, path, before, after = change
        key = (root, path)
        parent = (root, path.rpartition("/")[0])
        # A path touched twice: its second before-image is the first's after-image. Below a
        # path found absent nothing exists either (a new tree costs no walk per entry).
        if before is None and parent in absent and key not in seen:
            absent.add(key)  # created below a new directory: nothing to judge (the common case)
            seen[key] = after
            continue
        if key in seen:
            current = seen[key]
        elif parent in absent:
            current = None
        else:
            current = _current(dirs, change, known)
        if current is None and key not in seen:
            absent.add(key)
            if sources is not None and before is None:
                i += _new_tree(changes, i, change, sources, seen, absent)
        # Modes too: a chmod someone made after the set is theirs, not the set's to undo.
        stale = not _exactly(current, change.before)
        if not stale and change.after is None and current is not None and current.kind == "dir":
            gone = {k for k, v in seen.items() if v is None}  # deleted earlier in this set
            left = [
                n for n in _entries(dirs, change) if (change.root, f"{change.path}/{n}") not in gone
            ]
            stale = bool(left)
        if stale and escape_name(change.path) not in out:
            out.append(escape_name(change.path))
        seen[key] = change.after
    return out


def _new_tree(
    changes: Sequence[Change],
    i: int,
    change: Change,
    sources: UpperFiles,
    seen: dict[tuple[int, str], Image | None],
    absent: set[tuple[int, str]],
) -> int:
    """How many of the changes from ``i`` on _conflicts may pass over: the entries of the new
    upper tree ``change`` (just found absent), when they follow it, each made where nothing
    is (no before-image, nothing of them seen before). Below an absent path nothing exists,
    so none conflicts: each is noted absent and seen, as the loop would, in C."""
    tree = sources.tree(change)
    if tree is None or not tree.changes:
        return 0
    block = changes[i : i + tree.changes]
    if (
        len(block) != tree.changes
        or any(map(_BEFORE_OF, block))
        or not _all_below(block, change.root, change.path + "/")
    ):
        return 0
    keys = list(zip(repeat(change.root), map(_PATH_OF, block)))
    if not seen.keys().isdisjoint(keys):
        return 0
    absent.update(keys)
    seen.update(zip(keys, map(_AFTER_OF, block), strict=True))
    return len(block)


def _entries(dirs: _Dirs, change: Change) -> list[str]:
    def op(place: Place) -> list[str]:
        assert place.leaf is not None
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(place.leaf, flags, dir_fd=place.dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            return []  # a directory the set itself made: nothing of anyone else's below it
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    return dirs.walk(change, op, create=False)


def _refused_whole(
    errors: list[RingfenceError], refused: list[dict[str, Any]], count: int
) -> RingfenceError:
    """The first refusal, saying the set (``count`` refused entries) was refused whole
    (``atomic``): nothing was changed."""
    first = errors[0]
    return first.with_(
        message=f"{first.message}; the change set was refused as a whole "
        f"({count} refused entries), nothing was changed",
        details={**first.details, "refused": refused},
    )
