"""An overlay's upper directory read as a change set (for the confined shell's capture).

When a command ran on an overlay whose lower layer is a workspace root,
its upper directory holds everything it changed, in overlayfs's encoding:

* a file, link or directory that exists in the upper layer is its new
  state (copied up, or new);
* a character device 0:0 is a *whiteout*: the lower entry was deleted;
* a directory with the xattr ``trusted.overlay.opaque`` or
  ``user.overlay.opaque`` (unprivileged overlays) set to ``y`` is *opaque*:
  it replaced the lower directory, whose other entries are gone.

:func:`changes_from_upper` turns that into the file-level changes of a
:class:`~._model.ChangeSet` (a renamed directory, copied up whole and
whited out, becomes its deletions and creations), storing every after- and
before-image in ``blobs``, so :func:`~._merge.merge_changes` can merge or
refuse it like any other set. Other special files (FIFOs, devices,
sockets) are described, not stored: the merge refuses them.

Not handled: ``redirect_dir`` and ``metacopy`` (ringfence mounts without
them, so a rename is a copy-up and every file's data is in the upper layer).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from itertools import islice
from typing import TYPE_CHECKING, NamedTuple

from ...runtime._errors import ToolError
from ..git._rules import is_git_directory
from ..git._snapshot import DirState
from ..git._walk import git_dir_by_folded_names_only, may_be_git_dir
from ._model import Blobs, Change, Image, UpperSource, UpperTree, image_and_identity, image_at

if TYPE_CHECKING:
    from ._store import PackWriter

__all__ = ["UpperFiles", "UpperState", "changes_from_upper"]

_PACKED_MAX = 1 << 20  # files up to this size go into the pack, larger ones into a blob each

_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# A new directory's files (the lean read in _Reader.walk): without an access-time update. Each
# is read once, just after the command made it, so relatime would write every inode (a
# journaled change per file of a 10,000-file command) for a time nothing here keeps. The
# owner's (or CAP_FOWNER's) flag only: a file it is refused for is opened without it.
_NEW_FILE_FLAGS = _FILE_FLAGS | os.O_NOATIME
_S_IFMT = 0o170000
# Module globals, not ``os.`` attributes: looked up once per file of a 10,000-file capture.
_open, _fstat, _read, _close, _listxattr = os.open, os.fstat, os.read, os.close, os.listxattr
_lseek, _SEEK_SET, _S_IFREG = os.lseek, os.SEEK_SET, stat.S_IFREG
# The named tuples' own constructor is a Python function: a file's three are made in C.
_tuple = tuple.__new__
# Read files' descriptors closed by one ``close_range`` (see _close_all) per this many.
_CLOSE_BATCH = 64
# How deep a change set reaches below its root. The walks descend one call (and one descriptor)
# per level; a command can make a tree far deeper than Python's recursion limit, so past this
# depth the whole set is refused with a clear error instead of failing halfway.
MAX_DEPTH = 512


# The most entries a command's change set may hold per root: its upper directory's entries
# as they are listed, and each entry of a directory it deleted. A set is held in memory
# (about 1 KiB an entry) and merged entry by entry (about half a millisecond each): a
# million empty files cost a gigabyte and ten minutes, and an undo the same again.
MAX_ENTRIES = 500_000


def _too_many() -> ToolError:
    return ToolError(
        f"the command's changes hold more than {MAX_ENTRIES:,} entries below one root (files, "
        "directories, links and deletions; the limit of a change set); it was refused whole, "
        "nothing of this command was merged; write fewer files in one command",
        field="command",
        limit=MAX_ENTRIES,
    )


def _too_deep(path: str) -> ToolError:
    return ToolError(
        f"the command's changes reach more than {MAX_DEPTH} directory levels below the root "
        f"(at {path[:200]}…); change sets stop there, so nothing of this command was merged",
        field="command",
    )


# Upper states that are no image of their own (``changes_from_upper``'s ``state``).
_WHITEOUT = Image("whiteout", 0)
_OPAQUE = "opaque-dir"
# How long before a read began a file's ctime must lie for the next read to trust its stat
# signature instead of reading it: a write after that read moves the ctime to the clock's
# time then (a coarse clock lags by a tick, a few ms), far past this.
_SETTLED_NS = 1_000_000_000


class UpperState:
    """What one read of a live upper directory found: per path its state (``marks``: the
    image; a whiteout, an opaque directory marked as such), per regular file its stat
    signature (``sigs``), and when the read began (``since_ns``, ``time.time_ns()`` taken
    with nothing writing the upper directory: its process frozen)."""

    __slots__ = ("marks", "sigs", "since_ns")

    def __init__(self, since_ns: int) -> None:
        self.marks: dict[str, Image] = {}
        self.sigs: dict[str, tuple[int, ...]] = {}
        self.since_ns = since_ns


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(fd: int) -> bool:
    for name in _OPAQUE_XATTRS:
        with contextlib.suppress(OSError):
            if os.getxattr(fd, name) == b"y":
                return True
    return False


def _open_dir(parent_fd: int | None, name: str) -> int | None:
    if parent_fd is None:
        return None
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a link, not a directory
            return None
        raise


def changes_from_upper(
    upper_fd: int,
    lower_fd: int,
    root: int,
    blobs: Blobs,
    *,
    pack: PackWriter | None = None,
    sources: dict[str, UpperSource] | None = None,
    trees: dict[str, UpperTree] | None = None,
    known: dict[tuple[int, str], tuple[tuple[int, ...], Image]] | None = None,
    previous: UpperState | None = None,
    state: UpperState | None = None,
    made_mode: int | None = None,
) -> list[Change]:
    """The changes an overlay's upper directory (``upper_fd``) makes to ``lower_fd``.

    ``lower_fd`` is the workspace root the overlay had as its lower layer
    (position ``root`` in the workspace); both are directory descriptors
    the caller owns. Before-images of changed and deleted files are stored
    in ``blobs`` too, so the set can be undone after it is merged. Order:
    a deletion before a creation at the same path, a directory before its
    entries, entries before their directory's deletion.

    ``pack``: every image's bytes (before-images too) are appended to it
    (commit it before the set is saved), none hard-linked into the store;
    ``sources`` (with ``pack`` only) then names the upper files the merge may
    rename into the workspace (:class:`UpperSource`, by path below the upper
    directory), and ``trees`` (with ``sources`` only) the new directories it
    may rename whole (:class:`UpperTree`; the outermost and the ones inside).
    ``known`` hears, by ``(root, path)``, the before-images of regular files
    that did not change while they were read, with their identity then
    (:func:`~._model.image_and_identity`): the merge's conflict check
    need not read them again (:attr:`UpperFiles.known`).

    ``state`` (an upper directory still mounted, read again after each call of
    a writable MCP server; see :class:`UpperState`): hears each upper entry's
    state; an entry in the state ``previous`` (the last read's) found it in
    makes no change this time: what was read then was merged, refused or
    staged then, and a lower entry the host changed since stays as the host
    left it. Its directories are still read (what is below may have changed).

    ``made_mode``: the upper directory's own mode when the command started (its
    root's then), so a different one is the command's ``chmod`` of the root: a change
    at ``.`` (first, from the root's mode now), which the merge refuses, named. A
    root the host chmodded meanwhile is not the command's change.
    """
    if pack is None:
        sources = None
    reader = _Reader(
        root, pack or blobs, pack, sources, trees if sources is not None else None, known
    )
    if state is not None:
        reader.state, reader.previous = state, previous or UpperState(0)
    if made_mode is not None:
        before, after = (stat.S_IMODE(os.fstat(fd).st_mode) for fd in (lower_fd, upper_fd))
        image = Image("dir", after)
        if made_mode != after != before and not reader._same(".", image):
            reader.out.append(Change(root, ".", Image("dir", before), image))
    reader.walk(upper_fd, lower_fd, "", None)
    return reader.out


class _Fit:
    """Whether the new directory read so far may be moved whole (see :class:`UpperTree`),
    and what a scan of the workspace would record of it (its subdirectories and links by
    name, whether its names make it a candidate git directory)."""

    __slots__ = ("dirs", "links", "longest", "ok", "owner", "volatile")

    def __init__(self, st: os.stat_result) -> None:
        self.ok = True
        self.owner = (st.st_uid, st.st_gid)
        self.longest = 0
        self.dirs: list[str] = []
        self.links: list[str] = []
        self.volatile = False

    def note(self, st: os.stat_result) -> None:
        if (st.st_uid, st.st_gid) != self.owner:
            self.ok = False

    def names(self, prefix: str, names: list[str]) -> None:
        """Hear one directory's entries: their longest path (bytes below the root), whether
        they make it a candidate git directory (as the scan decides it)."""
        self.volatile = may_be_git_dir(set(names))
        if self.volatile and git_dir_by_folded_names_only(set(names)):
            # git's names in another case (head, OBJECTS): the upper's own test cannot see what
            # a case-insensitive workspace will, so merged entry by entry, each judged on disk.
            self.ok = False
        if names:
            if "".join(names).isascii():  # then a name's length is its bytes': no encoding
                longest = max(map(len, names))
            else:
                longest = max(len(os.fsencode(n)) for n in names)
            self.longest = max(self.longest, len(os.fsencode(prefix)) + longest)

    def join(self, inner: _Fit) -> None:
        self.ok = self.ok and inner.ok and inner.owner == self.owner
        self.longest = max(self.longest, inner.longest)


class _Sub(NamedTuple):
    """A directory :meth:`_Reader._entry` opened to be read below (``start``: how many
    changes were made before its entries')."""

    upper_fd: int
    lower_fd: int | None
    name: str
    path: str
    st: os.stat_result
    fit: _Fit | None
    start: int


class _Reader:
    """One upper directory read into changes (``out``); see :func:`changes_from_upper`.

    Its cost is per file (a command may write 10,000), so a regular file
    costs one open, one fstat, a read and a close (and, in a new directory,
    one ``flistxattr``), and nothing is built twice.
    """

    def __init__(
        self,
        root: int,
        blobs: Blobs,
        pack: PackWriter | None,
        sources: dict[str, UpperSource] | None,
        trees: dict[str, UpperTree] | None,
        known: dict[tuple[int, str], tuple[tuple[int, ...], Image]] | None,
    ) -> None:
        self.root = root
        self.blobs = blobs  # the pack, when there is one: before-images and links too
        self.pack = pack
        self.sources = sources
        self.trees = trees
        self.known = known
        self.out: list[Change] = []
        self.listed = 0  # entries listed so far, held to MAX_ENTRIES
        self.add = pack.add if pack is not None else blobs.put
        self.state: UpperState | None = None  # see changes_from_upper
        self.previous = UpperState(0)

    def _same(self, path: str, mark: Image) -> bool:
        """Record ``path``'s upper state; True when the last read found the same (live only)."""
        if self.state is None:
            return False
        self.state.marks[path] = mark
        return self.previous.marks.get(path) == mark

    def _unchanged_file(self, upper_fd: int, name: str, path: str) -> bool:
        """A regular upper file the last read found, not written since (live only): its stat
        signature is the one recorded then, which was taken well before that read began
        (:data:`_SETTLED_NS`: a write since would have moved its ctime past it)."""
        state = self.state
        if state is None:
            return False
        st = os.stat(name, dir_fd=upper_fd, follow_symlinks=False)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
        state.sigs[path] = sig
        previous = self.previous
        mark = previous.marks.get(path)
        if (
            mark is None
            or previous.sigs.get(path) != sig
            or st.st_ctime_ns >= previous.since_ns - _SETTLED_NS
        ):
            return False
        state.marks[path] = mark
        return True

    def _before(self, lower_fd: int | None, name: str, path: str) -> Image | None:
        """The lower entry's image (stored: it can be undone), its identity noted in ``known``."""
        if lower_fd is None:
            return None
        before, identity = image_and_identity(lower_fd, name, self.blobs)
        if identity is not None and self.known is not None:
            self.known[(self.root, path)] = (identity, before)
        return before

    def walk(self, upper_fd: int, lower_fd: int | None, prefix: str, fit: _Fit | None) -> None:
        """Read the directory ``upper_fd`` (``prefix`` below the root); ``fit`` (a new
        directory, when trees are wanted) hears whether each entry may move with it.

        One call per level (the depth a set may reach is :data:`MAX_DEPTH`, past Python's
        recursion limit at two): an entry is read by :meth:`_entry`, a directory's own
        entries here.
        """
        if prefix.count("/") >= MAX_DEPTH:
            raise _too_deep(prefix)
        room = MAX_ENTRIES - self.listed
        with os.scandir(upper_fd) as it:  # one past the room: never a huge listing whole
            entries = [(e.name, e.is_file(follow_symlinks=False)) for e in islice(it, room + 1)]
        self.listed += len(entries)
        if len(entries) > room:
            raise _too_many()
        entries.sort()
        if fit is not None:
            fit.names(prefix, [name for name, _ in entries])
        # A directory the command made, nothing live: the bulk of a big command (10,000 files).
        # Its regular files are read in this loop as _packed reads them, with no call per file
        # but the system calls and the hash; anything else (and a file that is not one after
        # all) by _entry.
        lean = self.pack is not None and self.state is None and lower_fd is None
        out, root, add, sources, put_fd = self.out, self.root, self.add, self.sources, None
        owner = fit.owner if fit is not None else None
        done: list[int] = []  # the read files' descriptors, closed together (_close_all)
        # A new directory's files go with it when it is renamed whole (UpperTree): their own
        # UpperSource (for a merge renaming them one by one) is made only if the directory
        # turns out unfit (below). Flat atoms here: 10,000 tracked objects fewer for the
        # collector in a big command's new tree.
        later: list[str | int] | None = [] if fit is not None and sources is not None else None
        try:
            for name, regular in entries:
                path = prefix + name
                if regular and lean:
                    regular = False  # if it is not read here, it is not read as a file
                    try:
                        fd = _open(name, _NEW_FILE_FLAGS, dir_fd=upper_fd)
                    except PermissionError:  # O_NOATIME is the owner's: read it as it is
                        try:
                            fd = _open(name, _FILE_FLAGS, dir_fd=upper_fd)
                        except OSError:
                            fd = -1
                    except OSError:
                        fd = -1  # a link (ELOOP) or gone: the entry's own stat decides
                    if fd >= 0:
                        try:
                            st = _fstat(fd)
                            mode = st.st_mode
                            if mode & _S_IFMT == _S_IFREG:
                                size = st.st_size
                                # One read: a regular file's read is short only at its end.
                                data = _read(fd, size + 1) if size <= _PACKED_MAX else None
                                if data is None or len(data) > size:  # large, or grew: a blob
                                    _lseek(fd, 0, _SEEK_SET)
                                    put_fd = put_fd or self.blobs.put_fd
                                    digest, size = put_fd(fd)
                                else:
                                    digest = add(data)
                                one_name = st.st_nlink == 1 and st.st_size == size
                                if fit is not None and (
                                    not one_name
                                    or (st.st_uid, st.st_gid) != owner
                                    or _listxattr(fd)
                                ):
                                    fit.ok = False
                            else:
                                mode = -1
                        except BaseException:
                            _close(fd)
                            raise
                        done.append(fd)
                        if len(done) >= _CLOSE_BATCH:
                            _close_all(done)
                        if mode >= 0:
                            if one_name and sources is not None:
                                if later is not None:
                                    later += (path, st.st_ino, size, st.st_mtime_ns)
                                else:
                                    sources[path] = _tuple(
                                        UpperSource, (path, st.st_ino, size, st.st_mtime_ns)
                                    )
                            image = _tuple(Image, ("file", mode & 0o7777, digest, size))
                            out.append(_tuple(Change, (root, path, None, image)))
                            continue
                if done:
                    _close_all(done)
                sub = self._entry(upper_fd, lower_fd, name, path, regular, fit)
                if sub is not None:  # a directory: read below, then judged whole
                    try:
                        self.walk(sub.upper_fd, sub.lower_fd, path + "/", sub.fit)
                        self._walked(sub, fit)
                    finally:
                        os.close(sub.upper_fd)
                        if sub.lower_fd is not None:
                            os.close(sub.lower_fd)
        finally:
            if done:
                _close_all(done)
        if later and fit is not None and not fit.ok and sources is not None:
            for i in range(0, len(later), 4):
                path = str(later[i])
                ino, size, mtime_ns = map(int, later[i + 1 : i + 4])
                sources[path] = UpperSource(path, ino, size, mtime_ns)

    def _entry(
        self,
        upper_fd: int,
        lower_fd: int | None,
        name: str,
        path: str,
        regular: bool,
        fit: _Fit | None,
    ) -> _Sub | None:
        """One upper entry ``name`` (``path`` below the root) read into changes; ``regular``:
        its directory entry says it is a regular file (read through the pack, if any). A
        directory is opened and returned, for the caller to read below it (its descriptors
        the caller's to close)."""
        blobs, out, root = self.blobs, self.out, self.root
        packed = self._packed if self.pack is not None else None
        same = self._same
        if regular and packed is not None:
            if self.state is not None and self._unchanged_file(upper_fd, name, path):
                return None
            after = packed(upper_fd, name, path, fit)
            if after is not None:  # else not a regular file after all: judged below
                if same(path, after):
                    return None
                before = self._before(lower_fd, name, path)
                if before is None:  # the common case, a file the command made
                    out.append(Change(root, path, None, after))
                else:
                    self._add(lower_fd, name, path, before, after)
                return None
        before = self._before(lower_fd, name, path)
        st = os.stat(name, dir_fd=upper_fd, follow_symlinks=False)
        if _is_whiteout(st):
            if fit is not None:
                fit.ok = False  # a whiteout must never be moved into the workspace
            if not same(path, _WHITEOUT) and before is not None:
                assert lower_fd is not None
                self._deleted(lower_fd, name, path, before)
            return None
        if not stat.S_ISDIR(st.st_mode):
            if fit is not None and not _link_fits(upper_fd, name, st):
                fit.ok = False  # special files are refused; moved whole, they would not be
            elif fit is not None:
                fit.note(st)
                fit.links.append(name)
            after = _after_image(upper_fd, name, st, blobs)
            if after is None or not same(path, after):
                self._add(lower_fd, name, path, before, after)
            return None
        sub_upper_fd = os.open(name, _DIR_FLAGS, dir_fd=upper_fd)
        sub_lower_fd = None
        try:
            opaque = _is_opaque(sub_upper_fd)
            mode = stat.S_IMODE(st.st_mode)
            new = before is None
            # Read before: its own change is not made again, what is below is read.
            quiet = same(path, Image(_OPAQUE if opaque else "dir", mode))
            if before is not None and (before.kind != "dir" or opaque):
                assert lower_fd is not None
                if not quiet:
                    self._deleted(lower_fd, name, path, before)  # replaced: gone first
                before = None
            elif before is not None:
                sub_lower_fd = _open_dir(lower_fd, name)
            if (before is None or before.mode != mode) and not quiet:
                out.append(Change(root, path, before, Image("dir", mode)))
            sub_fit = None
            if new and self.trees is not None:
                sub_fit = _Fit(st)
                # Its own attributes (an opaque mark) would move with it; a git directory is
                # refused entry by entry, with its name.
                if os.listxattr(sub_upper_fd) or is_git_directory(sub_upper_fd):
                    sub_fit.ok = False
        except BaseException:
            os.close(sub_upper_fd)
            if sub_lower_fd is not None:
                os.close(sub_lower_fd)
            raise
        return _Sub(sub_upper_fd, sub_lower_fd, name, path, st, sub_fit, len(out))

    def _walked(self, sub: _Sub, fit: _Fit | None) -> None:
        """The directory ``sub`` was read below: may it move whole (and ``fit``'s with it)?"""
        sub_fit, st, path = sub.fit, sub.st, sub.path
        if sub_fit is None:
            if fit is not None:
                fit.ok = False
            return
        assert self.trees is not None
        if sub_fit.ok:
            # Its state now is the one it has once moved: nothing writes it meanwhile, and a
            # rename changes no status of what it moves but the top's.
            scan = DirState(
                st.st_dev,
                st.st_ino,
                st.st_ctime_ns,
                st.st_mtime_ns,
                None,
                "plain",
                tuple(sub_fit.dirs),
                sub_fit.volatile,
                None,
                tuple(sub_fit.links),
            )
            self.trees[path] = UpperTree(
                path, st.st_ino, sub_fit.owner, len(self.out) - sub.start, sub_fit.longest, scan
            )
        if fit is not None:
            fit.join(sub_fit)
            fit.dirs.append(sub.name)

    def _packed(self, upper_fd: int, name: str, path: str, fit: _Fit | None) -> Image | None:
        """The image of ``name`` if it is a regular file (else None), its bytes appended to
        the pack (large ones: a blob of their own).

        With ``sources``, a file with one name is noted there as a candidate
        to be renamed into the workspace by the merge: the store keeps its
        own copy (the pack), so the two never share an inode. Nothing writes
        an upper directory any more when it is read, and the merge checks
        the identity noted here again before it renames. ``O_NONBLOCK``: a
        FIFO is never waited on. ``fit`` hears whether the file may move
        with its new directory (one name, no extended attribute).
        """
        # Run once per file of a big command: plain bit tests, no helper calls on the way.
        try:
            fd = _open(name, _FILE_FLAGS, dir_fd=upper_fd)
        except OSError:
            return None  # a link (ELOOP) or gone: the caller's stat decides
        try:
            st = _fstat(fd)
            if st.st_mode & _S_IFMT != stat.S_IFREG:
                return None
            size = st.st_size
            # One read: a regular file's read is short only at its end.
            data = _read(fd, size + 1) if size <= _PACKED_MAX else None
            if data is None or len(data) > size:  # large, or grew since: a blob of its own
                os.lseek(fd, 0, os.SEEK_SET)
                digest, size = self.blobs.put_fd(fd)
            else:
                digest = self.add(data)
            one_name = st.st_nlink == 1 and st.st_size == size
            if fit is not None and (
                not one_name or (st.st_uid, st.st_gid) != fit.owner or _listxattr(fd)
            ):
                fit.ok = False
        finally:
            _close(fd)
        if one_name and self.sources is not None:
            self.sources[path] = UpperSource(path, st.st_ino, size, st.st_mtime_ns)
        return Image("file", st.st_mode & 0o7777, digest, size)

    def _add(
        self, lower_fd: int | None, name: str, path: str, before: Image | None, after: Image | None
    ) -> None:
        """Record a non-directory upper entry (``after``) over the lower one (``before``)."""
        if before is not None and before.kind == "dir":
            assert lower_fd is not None
            self._deleted(lower_fd, name, path, before)  # a directory replaced by a file
            before = None
        if before != after:
            self.out.append(Change(self.root, path, before, after))

    def _deleted(self, lower_fd: int, name: str, path: str, found: Image) -> None:
        """Deletions of ``name`` (a lower entry) and, for a directory, of all below it first."""
        if path.count("/") >= MAX_DEPTH:
            raise _too_deep(path)
        if found.kind == "dir":
            sub_fd = os.open(name, _DIR_FLAGS, dir_fd=lower_fd)
            try:
                room = MAX_ENTRIES - self.listed
                with os.scandir(sub_fd) as it:
                    children = [e.name for e in islice(it, room + 1)]
                self.listed += len(children)
                if len(children) > room:
                    raise _too_many()
                for child in sorted(children):
                    image = image_at(sub_fd, child, self.blobs)  # stored: it can be undone
                    if image is not None:
                        self._deleted(sub_fd, child, f"{path}/{child}", image)
            finally:
                os.close(sub_fd)
        self.out.append(Change(self.root, path, found, None))


def _close_all(fds: list[int]) -> None:
    """Close ``fds`` (all open, all the caller's) and empty the list: one ``close_range``
    when they are one run of numbers (held open at once, no other file can have a number
    between them), else one ``close`` each. A 10,000-file read saves ~10,000 system calls."""
    low, high = min(fds), max(fds)
    if high - low == len(fds) - 1:
        os.closerange(low, high + 1)
    else:
        for fd in fds:
            _close(fd)
    fds.clear()


def _link_fits(dir_fd: int, name: str, st: os.stat_result) -> bool:
    """May this non-directory entry move with its new directory? Only a link without
    extended attributes (no other kind is ever merged)."""
    if not stat.S_ISLNK(st.st_mode):
        return False
    try:  # there is no llistxattr at a directory descriptor: through its /proc name
        return not os.listxattr(f"/proc/self/fd/{dir_fd}/{name}", follow_symlinks=False)
    except OSError:
        return False


def _after_image(upper_fd: int, name: str, st: os.stat_result, blobs: Blobs) -> Image | None:
    """The upper entry's image; a regular file's bytes go into the store by a hard link
    when the store can take one (``adopt``: same file system), else by copy.

    Safe to link: the upper directory is never written again (its command's
    processes are gone, the overlay unmounted) and is only emptied, so the
    store's link is the inode's one remaining name.
    """
    adopt = getattr(blobs, "adopt", None)
    if adopt is None or not stat.S_ISREG(st.st_mode):
        return image_at(upper_fd, name, blobs)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upper_fd)
    try:
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    digest = h.hexdigest()
    if not adopt(upper_fd, name, digest):
        return image_at(upper_fd, name, blobs)
    return Image("file", stat.S_IMODE(st.st_mode), digest, size)


class UpperFiles:
    """The files of overlay upper directories that a merge may rename (see ``merge_changes``).

    ``uppers`` maps a root's number to its upper directory's descriptor
    (the caller's), the files read from it (:class:`UpperSource` by path)
    and the new directories it may rename whole (:class:`UpperTree` by
    path); ``known``: the before-images the read hashed, by ``(root, path)``,
    with their identity then (see ``changes_from_upper``). One upper
    directory is open at a time (a merge goes directory by directory), so a
    10,000-directory set needs no 10,000 descriptors.
    """

    def __init__(
        self,
        uppers: dict[int, tuple[int, dict[str, UpperSource], dict[str, UpperTree]]],
        known: dict[tuple[int, str], tuple[tuple[int, ...], Image]] | None = None,
    ) -> None:
        self._uppers = uppers
        self.known = known or {}
        self.disabled = False
        self._dir: tuple[int, str, int] | None = None  # (root, directory, fd)
        euid = os.geteuid()
        self._ids = None if euid == 0 else (euid, os.getegid())

    def tree(self, change: Change) -> UpperTree | None:
        """The change's new directory if the read found it fit to move whole (a lookup)."""
        entry = self._uppers.get(change.root)
        if self.disabled or entry is None:
            return None
        return entry[2].get(change.path)

    def scans_below(self, moved: list[Change]) -> dict[tuple[int, str], DirState]:
        """What a scan of the workspace records of the directories inside the ``moved``
        trees (renamed whole by a merge), by ``(root, path)``. Not a moved tree's top: its
        rename changed its status."""
        out: dict[tuple[int, str], DirState] = {}
        for root in {c.root for c in moved}:
            entry = self._uppers.get(root)
            if entry is None:
                continue
            tops = {c.path for c in moved if c.root == root}
            for path, tree in entry[2].items():
                if tree.scan is None or path in tops:
                    continue
                parent = path
                while "/" in parent:
                    parent = parent.rpartition("/")[0]
                    if parent in tops:
                        out[(root, path)] = tree.scan
                        break
        return out

    def take_tree(
        self, change: Change, tree: UpperTree, owner: tuple[int, int], limit: int
    ) -> tuple[int, str, int] | None:
        """``(dir_fd, name, fd)`` of ``tree`` if it may be renamed whole now, else None.

        It must still be the directory read, owned (every entry, as the read
        found) by ``owner`` when ringfence runs as root (nothing is given
        away afterwards) or else by ringfence's own ids, and no path in it
        longer than ``limit`` bytes. ``fd`` (open on the directory) is the
        caller's to close.
        """
        entry = self._uppers.get(change.root)
        wanted = owner if self._ids is None else self._ids
        if entry is None or tree.owner != wanted or tree.longest > limit:
            return None
        parent, _, name = change.path.rpartition("/")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            dir_fd = self._open_dir(change.root, entry[0], parent)
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError:
            return None
        st = os.fstat(fd)
        if st.st_ino != tree.ino or (st.st_uid, st.st_gid) != wanted:
            os.close(fd)
            return None
        return dir_fd, name, fd

    def take(self, change: Change, after: Image) -> tuple[int, str, int] | None:
        """``(dir_fd, name, fd)`` of the change's upper file if it may be renamed, else None.

        ``fd`` (open on the file) is the caller's to close.
        """
        entry = self._uppers.get(change.root)
        if self.disabled or entry is None:
            return None
        upper_fd, files, _ = entry
        src = files.pop(change.path, None)  # a path is renamed at most once
        if src is None or src.size != after.size:
            return None
        parent, _, name = change.path.rpartition("/")
        try:
            dir_fd = self._open_dir(change.root, upper_fd, parent)
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_nlink != 1
            or (st.st_ino, st.st_size, st.st_mtime_ns) != (src.ino, src.size, src.mtime_ns)
            or (self._ids is not None and (st.st_uid, st.st_gid) != self._ids)
        ):
            os.close(fd)
            return None
        try:  # the upper's own attributes (overlay's, the command's) are never merged
            for attr in os.listxattr(fd):
                os.removexattr(fd, attr)
        except OSError:  # one we may not remove (e.g. a file capability): copy instead
            os.close(fd)
            return None
        return dir_fd, name, fd

    def _open_dir(self, root: int, upper_fd: int, parent: str) -> int:
        if self._dir is not None and self._dir[:2] == (root, parent):
            return self._dir[2]
        self.close()
        fd = upper_fd
        if parent:
            fd = _open_dirs(upper_fd, parent)
        self._dir = (root, parent, fd)
        return fd

    def close(self) -> None:
        if self._dir is not None:
            _, parent, fd = self._dir
            if parent:
                os.close(fd)
            self._dir = None


def _open_dirs(dir_fd: int, path: str) -> int:
    """The directory ``path`` below ``dir_fd``, no link followed on the way (OSError if not)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = dir_fd
    try:
        for name in path.split("/"):
            sub = os.open(name, flags, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = sub
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
    return fd
