"""One scan's walk below the roots: what it lists, what it takes from the base, what it keeps.

:class:`Walk` is the state of one :func:`._scan.scan_git_metadata` call:
the entries, tops, set-id files and unlistable directories it found, and the
directories still to visit. With a base snapshot it lists only directories
whose status changed or that are "hot" (:data:`HOT_MARGIN_NS`), and raises
:class:`Uncertain` when the cheap path cannot vouch for a root (the scan then
walks that root in full). It keeps before-images of gitfiles, ``.git``
symlinks and the files git takes programs from (at most
:data:`._snapshot.IMAGE_MAX_BYTES` each, :data:`IMAGE_BUDGET_BYTES` a scan).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Mapping

from ._rules import git_discovery_name, is_dotgit, is_git_directory
from ._snapshot import (
    DIR_FLAGS,
    IMAGE_MAX_BYTES,
    DirState,
    GitSnapshot,
    MetaEntry,
    exec_relevant,
    in_objects,
    open_rel,
)

__all__ = [
    "FUTURE_SLACK_NS",
    "HOT_MARGIN_NS",
    "IMAGE_BUDGET_BYTES",
    "Uncertain",
    "Walk",
    "file_kind",
    "git_dir_by_folded_names_only",
    "may_be_git_dir",
]

# Before-images are kept for at most this much per snapshot, so a huge hooks/ directory
# cannot make scans slow.
IMAGE_BUDGET_BYTES = 4 * 1024 * 1024

# A directory or file whose ctime is this close to the start of the scan that saw it (or later)
# may have changed again within the same timestamp tick, keeping its ctime: the next scan reads
# it again. Timestamps come from the kernel's coarse clock (a tick: 1-10 ms); 50 ms is 5 ticks
# or more, and costs little (what was just written is listed once more).
HOT_MARGIN_NS = 50_000_000
# A ctime this far ahead of our clock means the file system's clock is not ours (a network file
# system): ctimes cannot be trusted to order changes, so the next scan walks in full.
FUTURE_SLACK_NS = 1_000_000_000

_SETID = stat.S_ISUID | stat.S_ISGID


class Uncertain(Exception):
    """The cheap path cannot vouch for a root (a path vanished under an unchanged parent)."""


class Walk:
    """One scan's state: what it found, and the directories still to visit.

    A stack item is ``(fd, rel, top)``: ``fd`` is the directory opened below
    its (listed) parent, or -1 when its parent was taken from the base
    snapshot (it is then looked at by path, from the root).
    """

    def __init__(
        self, since: int | None, setid: bool, base: GitSnapshot | None, started: int
    ) -> None:
        self.since = since
        self.setid_since = since if setid else None
        self.base = base
        self.hot_ns = (base.scanned_ns - HOT_MARGIN_NS) if base is not None else 0
        self.future_ns = started + FUTURE_SLACK_NS
        self.entries: dict[tuple[int, str], MetaEntry] = {}
        self.tops: set[tuple[int, str]] = set()
        self.setids: set[tuple[int, str]] = set()
        self.opaque: set[tuple[int, str]] = set()
        self.dirs: dict[tuple[int, str], DirState] = {}
        self.links: set[tuple[int, str]] = set()  # symbolic links outside git metadata
        # Sockets, FIFOs and devices outside git metadata (inside it: entries of kind other).
        self.specials: set[tuple[int, str]] = set()
        # Tops a link in git metadata leads to: every file there is kept like a hook.
        self.linked: set[tuple[int, str]] = set()
        self.budget = [IMAGE_BUDGET_BYTES]
        self.visited = 0
        self.listed = 0
        self.reused = 0
        self.trusted = True
        self.index = 0
        self.root_fd = -1
        # The base's tables while walking a root the base is used for, else empty.
        self.base_dirs: Mapping[tuple[int, str], DirState] = {}
        self.base_entries: Mapping[tuple[int, str], MetaEntry] = {}
        self.stack: list[tuple[int, str, str | None]] = []

    def run(self, index: int, root_fd: int, inherited: str | None) -> None:
        self.index, self.root_fd = index, root_fd
        old = self.base.dirs.get((index, "")) if self.base is not None else None
        st = os.fstat(root_fd)
        # A replaced root (another directory at its path) is walked in full.
        if (
            old is not None
            and self.base is not None
            and (old.dev, old.ino) == (st.st_dev, st.st_ino)
        ):
            counts = (self.visited, self.listed, self.reused, self.budget[0])
            self.base_dirs, self.base_entries = self.base.dirs, self.base.entries
            try:
                self._walk(inherited)
                return
            except Uncertain:
                self._forget(index)
                self.visited, self.listed, self.reused, self.budget[0] = counts
            finally:
                self.base_dirs, self.base_entries = {}, {}
        self._walk(inherited)

    def run_metadata(self, index: int, root_fd: int, rel: str, *, linked: bool = False) -> None:
        """Walk the directory ``rel`` of root ``index`` again as git metadata of its own (a
        top): a git directory's common directory, which :meth:`run` listed as plain; with
        ``linked``, a place a link in git metadata leads to (every file's image kept)."""
        self.index, self.root_fd = index, root_fd
        fd = open_rel(root_fd, rel)
        if linked:
            self.linked.add((index, rel))
        self.tops.add((index, rel))
        self.entries[(index, rel)] = _entry(os.fstat(fd), "dir", rel)
        self.stack = [(fd, rel, rel)]
        self._drain()

    def add_top(self, index: int, root_fd: int, rel: str) -> None:
        """Record the file (or other non-directory) ``rel`` of root ``index`` as git metadata
        of its own (a top), its before-image kept: a file a link in git metadata leads to."""
        parent, _, name = rel.rpartition("/")
        fd = open_rel(root_fd, parent)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            image = _image(fd, name, st, rel, rel, self.budget)
        finally:
            os.close(fd)
        self.tops.add((index, rel))
        self.entries[(index, rel)] = _entry(st, file_kind(st.st_mode), rel, image)

    def _walk(self, inherited: str | None) -> None:
        self.stack = [(os.dup(self.root_fd), "", inherited)]
        self._drain()

    def _drain(self) -> None:
        """Visit what the stack holds until it is empty; every descriptor closed either way."""
        try:
            while self.stack:
                fd, rel, top = self.stack.pop()
                try:
                    self._visit(fd, rel, top)
                finally:
                    if fd >= 0:
                        os.close(fd)
        finally:
            for fd, _, _ in self.stack:
                if fd >= 0:
                    os.close(fd)
            self.stack = []

    def _forget(self, index: int) -> None:
        """Drop what a partial walk of root ``index`` recorded (it is walked again)."""
        for table in (self.entries, self.dirs):
            for key in [k for k in table if k[0] == index]:
                del table[key]
        for found in (self.tops, self.setids, self.opaque, self.links, self.specials):
            found.difference_update([k for k in found if k[0] == index])

    def _visit(self, fd: int, rel: str, top: str | None) -> None:
        """Take one directory from the base or list it (``fd``, when open, is the caller's)."""
        key = (self.index, rel)
        if fd < 0:
            # Its parent is unchanged, so this name is still this directory.
            try:
                st = os.stat(rel, dir_fd=self.root_fd, follow_symlinks=False)
            except OSError as exc:
                raise Uncertain(rel) from exc
            if not stat.S_ISDIR(st.st_mode):
                raise Uncertain(rel)
        else:
            st = os.fstat(fd)
        if st.st_ctime_ns > self.future_ns:
            self.trusted = False  # the file system's clock is not ours: next time, walk all
        old = self.base_dirs.get(key)
        if (
            old is not None
            and not old.volatile
            and old.top == top
            and (old.dev, old.ino, old.ctime_ns, old.mtime_ns)
            == (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns)
            and old.ctime_ns < self.hot_ns
        ):
            self._replay(fd, rel, top, old)
            return
        if fd >= 0:
            self.visited += self._scan_dir(fd, rel, top, st)
            return
        try:
            fd = open_rel(self.root_fd, rel)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise Uncertain(rel) from exc
            self._opaque_st(rel, st)
            return
        try:
            self.visited += self._scan_dir(fd, rel, top, st)
        finally:
            os.close(fd)

    def _replay(self, fd: int, rel: str, top: str | None, old: DirState) -> None:
        """An unchanged directory: its entries are the base's; only metadata is looked at."""
        index, entries = self.index, self.entries
        self.reused += 1
        self.visited += len(old.names)
        self.dirs[(index, rel)] = old
        prefix = f"{rel}/" if rel else ""
        if old.kind == "plain":
            self.links.update((index, prefix + name) for name in old.links)
            self.specials.update((index, prefix + name) for name in old.specials)
            for name in old.names:
                child = prefix + name
                if is_dotgit(name):
                    self.tops.add((index, child))
                    self._record(fd, name, child, child, None)
                else:
                    self.stack.append((-1, child, None))
            return
        assert top is not None
        if old.kind == "objects":
            for name in old.names:
                child = prefix + name
                entries[(index, child)] = MetaEntry("dir", 0, 0, 0, 0, 0, top)
                self.stack.append((-1, child, top))
            key = (index, rel)
            if key in entries:
                prior, kept = entries[key], self.base_entries.get(key)
                if kept is None or (kept.kind, kept.mode, kept.top, kept.image) != (
                    prior.kind,
                    prior.mode,
                    top,
                    old.digest,
                ):
                    kept = MetaEntry(prior.kind, prior.mode, 0, 0, 0, 0, top, old.digest)
                entries[key] = kept
            return
        for name in old.names:
            self._record(fd, name, prefix + name, top, None)

    def _scan_dir(self, fd: int, rel: str, top: str | None, dir_st: os.stat_result) -> int:
        index, entries = self.index, self.entries
        try:
            with os.scandir(fd) as it:
                listing = list(it)
        except OSError:
            self._opaque_st(rel, dir_st)
            return 0
        self.listed += 1
        volatile = False
        if top is None and rel and may_be_git_dir({e.name for e in listing}):
            # git also reads HEAD's content, which changes without the directory changing:
            # a candidate is listed and tested by every scan.
            volatile = True
            if is_git_directory(fd, beneath=(self.root_fd, rel)):
                # The directory itself is a repository: a top (its entry is its parent's).
                top = rel
                self.tops.add((index, rel))
                entries[(index, rel)] = _entry(dir_st, "dir", rel)
        prefix = f"{rel}/" if rel else ""
        if top is None:
            # The common case, kept lean: most entries are ordinary files, seen by name only.
            setid_since = self.setid_since
            kept: list[str] = []
            links: list[str] = []
            specials: list[str] = []
            for e in listing:
                name = e.name
                if is_dotgit(name):
                    child = prefix + name
                    self.tops.add((index, child))
                    self._record(fd, name, child, child, e)
                    kept.append(name)
                elif e.is_dir(follow_symlinks=False):
                    self._push(fd, name, prefix + name, None)
                    kept.append(name)
                elif e.is_symlink():
                    links.append(name)
                    self.links.add((index, prefix + name))
                elif not e.is_file(follow_symlinks=False):
                    # A socket, FIFO or device (the entry's type: no stat): a host process's
                    # listener or reader a command could reach through a writable root.
                    specials.append(name)
                    self.specials.add((index, prefix + name))
                elif setid_since is not None:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if st.st_mode & _SETID and st.st_ctime_ns >= setid_since:
                        self.setids.add((index, prefix + name))
            self._keep(rel, None, dir_st, "plain", kept, volatile, links=links, specials=specials)
            return len(listing)
        if in_objects(prefix, top) and not may_be_git_dir({e.name for e in listing}):
            # Loose objects and packs are named by their content and git runs nothing from
            # them: the names in each objects/ directory are compared (one digest per
            # directory), not each file's stat, so many loose objects stay cheap to scan.
            # (A repository planted in there is recorded in full, like any other.)
            files = []
            kept = []
            for e in listing:
                if e.is_dir(follow_symlinks=False):
                    child = prefix + e.name
                    entries[(index, child)] = MetaEntry("dir", 0, 0, 0, 0, 0, top)
                    self._push(fd, e.name, child, top)
                    kept.append(e.name)
                else:
                    files.append(e.name)
            digest = hashlib.blake2b(
                "\0".join(sorted(files)).encode(errors="surrogateescape")
            ).digest()
            key = (index, rel)
            if key in entries:
                old = entries[key]
                entries[key] = MetaEntry(old.kind, old.mode, 0, 0, 0, 0, top, digest)
            self._keep(rel, top, dir_st, "objects", kept, volatile, digest)
            return len(listing)
        for e in listing:
            self._record(fd, e.name, prefix + e.name, top, e)
        self._keep(rel, top, dir_st, "meta", [e.name for e in listing], volatile)
        return len(listing)

    def _keep(
        self,
        rel: str,
        top: str | None,
        st: os.stat_result,
        kind: str,
        names: list[str],
        volatile: bool,
        digest: bytes | None = None,
        links: list[str] | None = None,
        specials: list[str] | None = None,
    ) -> None:
        self.dirs[(self.index, rel)] = DirState(
            st.st_dev,
            st.st_ino,
            st.st_ctime_ns,
            st.st_mtime_ns,
            top,
            kind,
            tuple(names),
            volatile,
            digest,
            tuple(links or ()),
            tuple(specials or ()),
        )

    def _record(self, fd: int, name: str, child: str, top: str, e: os.DirEntry[str] | None) -> None:
        """Record one entry inside git metadata; queue it when it is a directory.

        ``e`` is its directory entry when the parent was listed; otherwise the
        parent is unchanged and the entry must still be there.
        """
        key = (self.index, child)
        try:
            if e is not None:
                st = e.stat(follow_symlinks=False)
            elif fd >= 0:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            else:
                st = os.stat(child, dir_fd=self.root_fd, follow_symlinks=False)
        except OSError as exc:
            if e is None:
                raise Uncertain(child) from exc
            return
        kind = file_kind(st.st_mode)
        old = self.base_entries.get(key)
        image: bytes | None = None
        whole = (self.index, top) in self.linked
        if not _wants_image(st, child, top, whole):
            pass
        elif (
            old is not None
            and old.image is not None
            and (old.kind, old.mode, old.size, old.mtime_ns, old.ctime_ns, old.ino)
            == (kind, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            and old.ctime_ns < self.hot_ns
        ):
            # Unchanged and not hot: the before-image read last time still holds.
            image = old.image
            if kind == "file":
                self.budget[0] -= len(image)
        elif fd >= 0:
            image = _image(fd, name, st, child, top, self.budget, whole)
        else:
            parent = open_rel(self.root_fd, child.rpartition("/")[0])
            try:
                image = _image(parent, name, st, child, top, self.budget, whole)
            finally:
                os.close(parent)
        self.entries[key] = _entry(st, kind, top, image)
        if kind == "dir":
            if fd >= 0:
                self._push(fd, name, child, top)
            else:
                self.stack.append((-1, child, top))

    def _push(self, fd: int, name: str, child: str, top: str | None) -> None:
        try:
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                with contextlib.suppress(OSError):
                    self._opaque_st(child, os.stat(name, dir_fd=fd, follow_symlinks=False))
            return
        self.stack.append((sub, child, top))

    def _opaque_st(self, rel: str, st: os.stat_result) -> None:
        """A directory that cannot be listed: opaque when it changed during the command."""
        if self.since is not None and rel and st.st_ctime_ns >= self.since:
            self.opaque.add((self.index, rel))


def _named_git_dir(names: set[str]) -> bool:
    return "HEAD" in names and ("commondir" in names or ("objects" in names and "refs" in names))


def _folded_git_dir(names: set[str]) -> bool:
    found = {g for g in map(git_discovery_name, names) if g is not None}
    return "HEAD" in found and ("commondir" in found or ("objects" in found and "refs" in found))


def may_be_git_dir(names: set[str]) -> bool:
    """git's test needs HEAD and either commondir or objects/ + refs/: decide most dirs by name,
    as a case-insensitive file system may read them (``Head``, ``OBJECTS``:
    :func:`._rules.git_discovery_name`), so a candidate there is tested like any other."""
    return _named_git_dir(names) or _folded_git_dir(names)


def git_dir_by_folded_names_only(names: set[str]) -> bool:
    """A candidate git directory only in another case or form (``head``, ``OBJECTS``): git's
    names on a case-insensitive file system, which a test on a case-sensitive one misses."""
    return not _named_git_dir(names) and _folded_git_dir(names)


def file_kind(mode: int) -> str:
    """The workspace's one vocabulary of entry kinds: ``dir``, ``file``, ``symlink``, ``other``
    (the scan's entries and the change sets' images both speak it)."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _entry(st: os.stat_result, kind: str, top: str, image: bytes | None = None) -> MetaEntry:
    return MetaEntry(
        kind,
        st.st_mode,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        top,
        image,
        st.st_uid,
        st.st_gid,
    )


def _wants_image(st: os.stat_result, rel: str, top: str, whole: bool = False) -> bool:
    """Is a before-image kept for this entry (see :func:`_image`)? Decided by its status;
    ``whole``: every file of its top (a place a link in git metadata leads to)."""
    if stat.S_ISLNK(st.st_mode):
        return True
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_size <= IMAGE_MAX_BYTES
        and (rel == top or whole or exec_relevant(rel, top))
    )


def _image(
    fd: int,
    name: str,
    st: os.stat_result,
    rel: str,
    top: str,
    budget: list[int],
    whole: bool = False,
) -> bytes | None:
    """The before-image of a gitfile, a ``.git`` symlink or an exec-relevant file, if small."""
    kind = file_kind(st.st_mode)
    if kind == "symlink":
        try:
            return os.fsencode(os.readlink(name, dir_fd=fd))
        except OSError:
            return None
    if kind != "file" or st.st_size > IMAGE_MAX_BYTES or st.st_size > budget[0]:
        return None
    if rel != top and not whole and not exec_relevant(rel, top):
        return None
    try:
        rfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    try:
        data = os.read(rfd, IMAGE_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(rfd)
    if len(data) > IMAGE_MAX_BYTES:
        return None
    budget[0] -= len(data)
    return data
