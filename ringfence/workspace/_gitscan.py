"""Git metadata around a shell command: snapshot it, find what a command changed, undo that.

A shell command is not confined by the resolver, so ``run_shell`` checks its
*effect* instead: :func:`scan_git_metadata` before and after the command, then
:func:`enforce_git_metadata` on the two snapshots. "Git metadata" is

* every entry whose name git reads as ``.git`` (:func:`is_dotgit`: any case,
  trailing dots/spaces, ``git~1``, HFS+ ignorables, …), whatever its type
  (directory, gitfile, symlink), at any depth;
* every directory git would accept as a repository (:func:`is_git_directory`:
  bare, separate, worktree and submodule git directories, whatever their name);
* everything inside either of those ("inside a git directory").

What the enforcement promises, for two snapshots of the same roots:

* **New metadata** (a ``.git`` name or a git directory that was not there) is
  moved out of the workspace, whole, into ``quarantine`` — by ``rename`` when
  it is on the same file system, else copied (regular files, directories and
  symlinks; at most :data:`QUARANTINE_COPY_BYTES`) and removed.
* **A changed or deleted gitfile or ``.git`` symlink** is quarantined and its
  before-image put back (gitfiles up to :data:`IMAGE_MAX_BYTES`).
* **Inside an existing git directory**, files git takes programs from
  (``config``, ``config.worktree``, ``commondir``, ``gitdir``, ``hooks/**``)
  are restored from their before-image or, when new, quarantined. Other
  changes there (objects, refs, logs) are reported but left alone:
  removing half of a commit would corrupt the repository. An existing index
  rewritten in place is only noted (``index_rewritten``): ``git diff`` does
  that to refresh its stat cache, git runs nothing from it, and staging new
  content needs new objects, which are found. Below ``objects/``
  only names are compared (objects are named by their content; git runs
  nothing from them), so an object rewritten in place is not noticed.
* **A directory this process cannot list** whose status changed during the
  command (``chmod 311`` hides a ``.git`` from a listing, not from git) is
  moved out whole.
* Every finding is reported, with what was done to it; any finding means the
  command is refused (``git_metadata``).
* Optionally, setuid/setgid bits on regular files whose status changed during
  the command are cleared (a file created in a container must not be setuid
  on the host).

Non-promises: the walk never follows symlinks and never enters a linked
directory, so metadata *outside* the roots is not watched; a process that
keeps writing while the check runs can race it (the docker backend kills every
sandbox process before the command returns, so there is none there); a
command may change files that git configuration already points to outside git
metadata (``core.hooksPath = .githooks``, ``include.path``) — those are
ordinary workspace files; an existing git directory whose before-image was not
kept (objects, index, a config over :data:`IMAGE_MAX_BYTES`) is reported, not
restored; the subtree of a directory that was already unlistable before the
command is not watched. A first scan is linear in the number of entries under
the roots; a scan from a ``base`` (the previous one) costs one ``lstat`` per
directory, one per entry inside git metadata (below ``objects/``: per
directory) and a listing per changed directory, on the assumptions
:func:`scan_git_metadata` states (ctime cannot be set back, the clock is not
stepped back, hot directories are listed again); measured:
``benchmarks/gitscan.py``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._gitguard import is_dotgit, is_git_directory

__all__ = [
    "HOT_MARGIN_NS",
    "IMAGE_MAX_BYTES",
    "QUARANTINE_COPY_BYTES",
    "DirState",
    "GitFinding",
    "GitReport",
    "GitSnapshot",
    "MetaEntry",
    "describe_findings",
    "diff_git_metadata",
    "enforce_git_metadata",
    "scan_git_metadata",
]

# Before-images are kept for files up to this size (a gitfile or config is a few hundred bytes).
IMAGE_MAX_BYTES = 64 * 1024
# ... and for at most this much per snapshot, so a huge hooks/ directory cannot make scans slow.
IMAGE_BUDGET_BYTES = 4 * 1024 * 1024
# When quarantine is on another file system, at most this much is copied out before removal.
QUARANTINE_COPY_BYTES = 256 * 1024 * 1024

# A directory or file whose ctime is this close to the start of the scan that saw it (or later)
# may have changed again within the same timestamp tick, keeping its ctime: the next scan reads
# it again. Timestamps come from the kernel's coarse clock (a tick: 1-10 ms); 50 ms is 5 ticks
# or more, and costs little (what was just written is listed once more).
HOT_MARGIN_NS = 50_000_000
# A ctime this far ahead of our clock means the file system's clock is not ours (a network file
# system): ctimes cannot be trusted to order changes, so the next scan walks in full.
FUTURE_SLACK_NS = 1_000_000_000
# The wall clock stepping back by more than this since the base scan (measured against the
# monotonic clock) means a full walk: a change could then get a ctime the base already saw.
# Steps below the hot margin cannot do that; this leaves room for measuring jitter.
CLOCK_STEP_NS = 10_000_000

_SETID = stat.S_ISUID | stat.S_ISGID
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Names in a git directory that git takes programs or other repositories from.
_EXEC_NAMES = frozenset({"config", "config.worktree", "commondir", "gitdir"})


@dataclass(frozen=True)
class MetaEntry:
    """One path that is or lies in git metadata, as seen by one scan.

    ``kind`` is ``dir``, ``file``, ``link`` or ``other``; ``top`` is the
    relative path of the metadata it belongs to (itself for a ``.git`` name or
    a git directory). ``image`` is the before-image when one was kept: the
    bytes of a small file, the target of a symlink.
    """

    kind: str
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    top: str
    image: bytes | None = None
    uid: int = -1
    gid: int = -1

    def same_as(self, other: MetaEntry) -> bool:
        if self.kind != other.kind or self.mode != other.mode:
            return False
        if self.kind == "dir":
            # Added or removed entries are found as entries (below objects/, by the digest).
            return self.image == other.image
        if self.kind == "link":
            return self.image == other.image
        # Images are compared too: a file rewritten within one timestamp tick keeps its status.
        if self.image is not None and other.image is not None and self.image != other.image:
            return False
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino) == (
            other.size,
            other.mtime_ns,
            other.ctime_ns,
            other.ino,
        )


# Stands for an unlistable directory in _undo (only "something is there" matters).
_OPAQUE = MetaEntry("dir", 0, 0, 0, 0, 0, "")


@dataclass(frozen=True)
class DirState:
    """One directory as a scan saw it: what lets the next scan skip listing it.

    ``kind`` says how its entries were treated: ``plain`` (outside git
    metadata; ``names`` are its subdirectories and ``.git`` names, the only
    entries a scan acts on), ``meta`` (inside git metadata; ``names`` are all
    its entries) or ``objects`` (below a git directory's ``objects/``;
    ``names`` are its subdirectories, ``digest`` covers its file names).
    ``top`` is the metadata it lies in (None outside). A ``volatile``
    directory is listed by every scan: its names make it a candidate git
    directory, and git also reads ``HEAD``'s content, which can change without
    the directory changing. Directories that could not be listed have none.
    """

    dev: int
    ino: int
    ctime_ns: int
    mtime_ns: int
    top: str | None
    kind: str
    names: tuple[str, ...]
    volatile: bool = False
    digest: bytes | None = None


@dataclass(frozen=True)
class GitSnapshot:
    """Git metadata under some roots at one moment.

    ``entries`` maps ``(root index, relative path)`` to every metadata path;
    ``tops`` are the keys that are metadata themselves (``.git`` names and git
    directories outside other metadata); ``setid`` the regular files with a
    setuid/setgid bit and ``opaque`` the unlistable directories that changed
    since the scan's ``since`` (see :func:`scan_git_metadata`); ``visited``
    the number of directory entries the walk looked at. ``dirs`` is every
    directory the walk saw (what a later scan with this one as ``base``
    needs), ``scanned_ns`` when the scan started (wall clock;
    ``clock_offset_ns`` its offset from the monotonic clock), ``listed`` and
    ``reused`` how many directories it listed and took unchanged from its
    base; ``trusted`` is False when a ``ctime`` was in the future (the next
    scan from this one walks in full).
    """

    roots: tuple[Path, ...]
    entries: dict[tuple[int, str], MetaEntry]
    tops: frozenset[tuple[int, str]]
    setid: frozenset[tuple[int, str]] = frozenset()
    visited: int = 0
    opaque: frozenset[tuple[int, str]] = frozenset()
    dirs: Mapping[tuple[int, str], DirState] = field(default_factory=dict)
    scanned_ns: int = 0
    clock_offset_ns: int = 0
    trusted: bool = True
    listed: int = 0
    reused: int = 0

    def path(self, key: tuple[int, str]) -> Path:
        return self.roots[key[0]] / key[1]

    @property
    def gitfiles(self) -> list[Path]:
        """Host paths of the ``.git`` *files* (gitfiles), for read-only mounts."""
        return sorted(
            self.path(k) for k in self.tops if self.entries[k].kind == "file" and _leaf_dotgit(k)
        )


@dataclass(frozen=True)
class GitFinding:
    """One change to git metadata: ``new``, ``changed`` or ``deleted``, and what was done.

    ``action``: ``quarantined`` (moved out of the workspace), ``restored``
    (before-image put back; the changed version quarantined, if any),
    ``left`` (reported only), or ``failed: <reason>``.
    """

    path: str
    change: str
    action: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "change": self.change, "action": self.action}


@dataclass(frozen=True)
class GitReport:
    """What :func:`enforce_git_metadata` found and did.

    ``findings`` refuse the command; ``index_rewritten`` (an existing index
    rewritten in place, as ``git diff`` does to refresh its stat cache) and
    ``setid_cleared`` do not.
    """

    findings: tuple[GitFinding, ...] = ()
    setid_cleared: tuple[str, ...] = ()
    quarantine: Path | None = None
    index_rewritten: tuple[str, ...] = ()

    @property
    def refused(self) -> bool:
        return bool(self.findings)


# -- scanning ---------------------------------------------------------------------------


class _Uncertain(Exception):
    """The cheap path cannot vouch for a root (a path vanished under an unchanged parent)."""


def scan_git_metadata(
    roots: Sequence[Path],
    *,
    since: int | None = None,
    setid: bool = False,
    base: GitSnapshot | None = None,
) -> GitSnapshot:
    """Walk ``roots`` (real paths) and record their git metadata. Blocking.

    Never follows a symlink. ``since`` (ns since the epoch, the start of the
    command being checked) adds what only a check after a command needs,
    decided by ``ctime``, which a command cannot set back (unlike ``mtime``):

    * ``opaque``: directories this process cannot open or list whose status
      changed since then (a command could hide a ``.git`` behind ``chmod
      311``: git on the host can still enter such a directory);
    * with ``setid``, ``setid``: regular files with a setuid/setgid bit whose
      status changed since then. That costs an ``lstat`` per file (and a full
      walk: ``base`` is not used).

    ``base`` (an earlier snapshot of the same roots) makes the scan
    incremental: a directory whose device, inode, ``ctime`` and ``mtime`` are
    those ``base`` saw is not listed again, its entries are taken from
    ``base`` (see :class:`DirState`): one ``lstat`` per unchanged directory,
    plus one per entry inside git metadata and the before-images of the files
    whose status changed. The result is the snapshot a full walk would give,
    on these assumptions:

    * Adding, removing or renaming an entry changes its directory's ``ctime``,
      and nobody sets a ``ctime`` back: ``utimensat`` can set ``mtime``, not
      ``ctime``. Only moving the system clock back could forge one, which
      needs ``CAP_SYS_TIME``: no sandboxed command has it (docker drops all;
      the wall clock is not namespaced either way), but a command of the
      unconfined ``local`` backend running as root does. A step back is
      seen (see below); a root command that steps the clock back, writes,
      and steps it forward to the same offset again is not. Such a command
      can as well write the host's ``/etc/gitconfig`` or ``~/.gitconfig``,
      which no scan of the workspace sees, so the check is no boundary
      against root on the host whatever it walks: root on the host keeps
      the incremental scan.
    * A directory changed again within the same clock tick as the scan that
      saw it can keep its ``ctime`` (git's "racily clean" problem): every
      directory and metadata file whose ``ctime`` is within
      :data:`HOT_MARGIN_NS` of ``base``'s start, or later, is "hot" and read
      again.
    * The file system keeps ``ctime`` (every local Linux file system does) and
      its clock is this machine's: a ``ctime`` more than
      :data:`FUTURE_SLACK_NS` in the future marks the snapshot untrusted, and
      the next scan from it walks in full.

    A full walk is also done for a root whose directory was replaced, for a
    root where an entry of an unchanged directory cannot be found (something
    raced the scan), when the wall clock stepped back since ``base`` (by more
    than :data:`CLOCK_STEP_NS` against the monotonic clock: a root command
    that moves the clock back and forth again to the same offset is not
    seen), when ``base`` is of other roots, and with ``setid``.
    """
    offset, started = _clock_offset()
    paths = tuple(Path(r) for r in roots)
    usable = (
        base is not None
        and base.trusted
        and not setid
        and base.roots == paths
        and 0 < base.scanned_ns <= started
        and base.clock_offset_ns - offset <= CLOCK_STEP_NS
    )
    walk = _Walk(since, setid, base if usable else None, started)
    for index, root in enumerate(paths):
        try:
            top_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            # A root inside git metadata is metadata throughout (its top is the root itself).
            inherited = "" if _root_in_git(root, top_fd) else None
            walk.run(index, top_fd, inherited)
        finally:
            os.close(top_fd)
    return GitSnapshot(
        paths,
        walk.entries,
        frozenset(walk.tops),
        frozenset(walk.setids),
        walk.visited,
        frozenset(walk.opaque),
        dirs=walk.dirs,
        scanned_ns=started,
        clock_offset_ns=offset,
        trusted=walk.trusted,
        listed=walk.listed,
        reused=walk.reused,
    )


def _clock_offset() -> tuple[int, int]:
    """``(wall clock - monotonic clock, wall clock)`` now, in ns: the offset moves only on a step.

    The tightest of three readings, so a preemption between them does not look like a step.
    """
    best: tuple[int, int, int] | None = None
    for _ in range(3):
        before = time.monotonic_ns()
        wall = time.time_ns()
        spread = time.monotonic_ns() - before
        if best is None or spread < best[0]:
            best = (spread, wall - (before + spread // 2), wall)
    assert best is not None
    return best[1], best[2]


class _Walk:
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
            except _Uncertain:
                self._forget(index)
                self.visited, self.listed, self.reused, self.budget[0] = counts
            finally:
                self.base_dirs, self.base_entries = {}, {}
        self._walk(inherited)

    def _walk(self, inherited: str | None) -> None:
        self.stack = [(os.dup(self.root_fd), "", inherited)]
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
        for found in (self.tops, self.setids, self.opaque):
            found.difference_update([k for k in found if k[0] == index])

    def _visit(self, fd: int, rel: str, top: str | None) -> None:
        """Take one directory from the base or list it (``fd``, when open, is the caller's)."""
        key = (self.index, rel)
        if fd < 0:
            # Its parent is unchanged, so this name is still this directory.
            try:
                st = os.stat(rel, dir_fd=self.root_fd, follow_symlinks=False)
            except OSError as exc:
                raise _Uncertain(rel) from exc
            if not stat.S_ISDIR(st.st_mode):
                raise _Uncertain(rel)
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
            fd = _open_rel(self.root_fd, rel)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise _Uncertain(rel) from exc
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
        if top is None and rel and _may_be_git_dir({e.name for e in listing}):
            # git also reads HEAD's content, which changes without the directory changing:
            # a candidate is listed and tested by every scan.
            volatile = True
            if is_git_directory(fd):
                # The directory itself is a repository: a top (its entry is its parent's).
                top = rel
                self.tops.add((index, rel))
                entries[(index, rel)] = _entry(dir_st, "dir", rel)
        prefix = f"{rel}/" if rel else ""
        if top is None:
            # The common case, kept lean: most entries are ordinary files, seen by name only.
            setid_since = self.setid_since
            kept: list[str] = []
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
                elif setid_since is not None and e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if st.st_mode & _SETID and st.st_ctime_ns >= setid_since:
                        self.setids.add((index, prefix + name))
            self._keep(rel, None, dir_st, "plain", kept, volatile)
            return len(listing)
        if _in_objects(prefix, top) and not _may_be_git_dir({e.name for e in listing}):
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
                raise _Uncertain(child) from exc
            return
        kind = _kind(st.st_mode)
        old = self.base_entries.get(key)
        image: bytes | None = None
        if not _wants_image(st, child, top):
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
            image = _image(fd, name, st, child, top, self.budget)
        else:
            parent = _open_rel(self.root_fd, child.rpartition("/")[0])
            try:
                image = _image(parent, name, st, child, top, self.budget)
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
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
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


def _open_rel(root_fd: int, rel: str) -> int:
    """``rel`` below the open ``root_fd``, one component at a time, never through a symlink."""
    fd = os.dup(root_fd)
    for name in rel.split("/") if rel else ():
        try:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _may_be_git_dir(names: set[str]) -> bool:
    """git's test needs HEAD and either commondir or objects/ + refs/: decide most dirs by name."""
    return "HEAD" in names and ("commondir" in names or ("objects" in names and "refs" in names))


def _root_in_git(root: Path, fd: int) -> bool:
    if any(is_dotgit(part) for part in root.parts[1:]) or is_git_directory(fd):
        return True
    for ancestor in root.parents:
        try:
            afd = os.open(ancestor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if is_git_directory(afd):
                return True
        finally:
            os.close(afd)
    return False


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
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


def _leaf_dotgit(key: tuple[int, str]) -> bool:
    return is_dotgit(key[1].rsplit("/", 1)[-1])


def _inner(rel: str, top: str) -> str:
    """``rel`` relative to the metadata ``top`` it lies in ("" for the top itself)."""
    if rel == top:
        return ""
    return rel[len(top) + 1 :] if top else rel


def _in_objects(rel: str, top: str) -> bool:
    """Is ``rel`` below the ``objects/`` directory of the git directory ``top``?"""
    return _inner(rel, top).startswith("objects/")


def _is_index(rel: str, top: str) -> bool:
    """The index of a git directory (``index``, ``worktrees/*/index``, ``modules/**/index``)."""
    return rel.rpartition("/")[2] == "index" and not _exec_relevant(rel, top)


def _exec_relevant(rel: str, top: str) -> bool:
    """Does git take programs (or another repository) from this path inside a git directory?"""
    inner = _inner(rel, top).split("/")
    if inner == [""]:
        return False
    return inner[-1] in _EXEC_NAMES or "hooks" in inner


def _wants_image(st: os.stat_result, rel: str, top: str) -> bool:
    """Is a before-image kept for this entry (see :func:`_image`)? Decided by its status."""
    if stat.S_ISLNK(st.st_mode):
        return True
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_size <= IMAGE_MAX_BYTES
        and (rel == top or _exec_relevant(rel, top))
    )


def _image(
    fd: int, name: str, st: os.stat_result, rel: str, top: str, budget: list[int]
) -> bytes | None:
    """The before-image of a gitfile, a ``.git`` symlink or an exec-relevant file, if small."""
    kind = _kind(st.st_mode)
    if kind == "link":
        try:
            return os.fsencode(os.readlink(name, dir_fd=fd))
        except OSError:
            return None
    if kind != "file" or st.st_size > IMAGE_MAX_BYTES or st.st_size > budget[0]:
        return None
    if rel != top and not _exec_relevant(rel, top):
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


# -- comparing and undoing -------------------------------------------------------------------


def diff_git_metadata(before: GitSnapshot, after: GitSnapshot) -> list[tuple[tuple[int, str], str]]:
    """``(key, change)`` for every metadata path that is new, changed or deleted.

    Sorted by key (a directory before what is in it). Only the outermost path
    of a new or deleted subtree is listed. Linear in the number of entries
    (times the path length), however deep the tree.
    """
    b, a = before.entries, after.entries
    out: list[tuple[tuple[int, str], str]] = [(k, "new") for k in a.keys() - b.keys()]
    out += [(k, "changed") for k in a.keys() & b.keys() if not b[k].same_as(a[k])]
    out += [(k, "deleted") for k in b.keys() - a.keys()]
    out.sort()
    # A path that is new, deleted or changed its kind (a .git directory now a gitfile)
    # covers the new and deleted paths below it.
    covering = {k for k, c in out if c != "changed" or b[k].kind != a[k].kind}
    memo: dict[tuple[int, str], bool] = {}
    return [
        (key, change)
        for key, change in out
        if change == "changed" or not _below(_parent(key), covering, memo)
    ]


def _parent(key: tuple[int, str]) -> tuple[int, str]:
    return (key[0], key[1].rpartition("/")[0])


def _below(
    key: tuple[int, str], marked: set[tuple[int, str]], memo: dict[tuple[int, str], bool]
) -> bool:
    """Is ``key`` or one of its ancestors in ``marked``? Memoised along the way up.

    Valid while nothing is added to ``marked`` at or above a memoised path
    (callers walk keys in sorted order and only ever mark the current one).
    """
    index, rel = key
    chain: list[tuple[int, str]] = []
    result = False
    while rel:
        k = (index, rel)
        if k in memo:
            result = memo[k]
            break
        if k in marked:
            result = True
            break
        chain.append(k)
        rel = rel.rpartition("/")[0]
    for k in chain:
        memo[k] = result
    return result


def enforce_git_metadata(before: GitSnapshot, after: GitSnapshot, quarantine: Path) -> GitReport:
    """Undo what a command did to git metadata (see the module docstring). Blocking.

    ``quarantine`` (outside every root) is created only when something is
    moved there. Never raises for a failed undo: the finding says ``failed``.
    """
    findings: list[GitFinding] = []
    refreshed: list[str] = []
    moved: set[tuple[int, str]] = set()
    memo: dict[tuple[int, str], bool] = {}
    holds_exec = _exec_holders(before, after)
    for key, change in diff_git_metadata(before, after):
        index, rel = key
        old, new = before.entries.get(key), after.entries.get(key)
        if _below(_parent(key), moved, memo):
            continue  # below something already moved out whole
        display = str(after.path(key))
        entry = new or old
        assert entry is not None
        is_top = key in after.tops or key in before.tops
        if change == "changed" and not is_top and _is_index(rel, entry.top):
            # git diff rewrites the index's stat cache even with GIT_OPTIONAL_LOCKS=0; git
            # runs nothing from it, and staging new content needs new objects (found).
            refreshed.append(display)
            continue
        # Within an existing git directory, only what git runs programs from is undone
        # (a new directory there is moved out whole when anything in it is such a file).
        undo = (
            is_top
            or entry.top == rel
            or _exec_relevant(rel, entry.top)
            or (change == "new" and key in holds_exec)
        )
        if not undo or (
            old is not None and old.kind == "dir" and new is not None and new.kind == "dir"
        ):
            findings.append(GitFinding(display, change, "left"))
            continue
        action = _undo(after.roots[index], rel, old, new, quarantine / str(index))
        if new is not None and not action.startswith("failed"):
            moved.add(key)
        findings.append(GitFinding(display, change, action))
    memo.clear()
    for key in sorted(after.opaque):
        index, rel = key
        if _below(key, moved, memo):
            continue
        # It may hide a .git that git on the host would still find: out, whole.
        action = _undo(after.roots[index], rel, None, _OPAQUE, quarantine / str(index))
        moved.add(key)
        memo.clear()  # a new mark: memoised answers below it are stale
        findings.append(GitFinding(str(after.path(key)), "unreadable", action))
    cleared = _clear_setid(after)
    used = quarantine if quarantine.exists() else None
    return GitReport(tuple(findings), tuple(cleared), used, tuple(refreshed))


def _exec_holders(before: GitSnapshot, after: GitSnapshot) -> set[tuple[int, str]]:
    """New paths with a new exec-relevant file at or below them (linear, however deep)."""
    holders: set[tuple[int, str]] = set()
    for key in after.entries.keys() - before.entries.keys():
        if key in holders or not _exec_relevant(key[1], after.entries[key].top):
            continue
        index, rel = key
        while rel and (index, rel) not in holders:
            holders.add((index, rel))
            rel = rel.rpartition("/")[0]
    return holders


def _undo(
    root: Path, rel: str, old: MetaEntry | None, new: MetaEntry | None, quarantine: Path
) -> str:
    parent_rel, _, leaf = rel.rpartition("/")
    try:
        parent = _open_beneath(root, parent_rel)
    except OSError as exc:
        return f"failed: cannot open {parent_rel or '.'} ({exc.strerror})"
    try:
        moved = "quarantined"
        if new is not None:
            try:
                _quarantine(parent, leaf, quarantine / rel)
            except OSError as exc:
                # Out of the workspace matters more than keeping a copy: remove it instead.
                _remove(parent, leaf)
                moved = f"removed (quarantine failed: {exc.strerror or exc})"
        if old is None:
            return moved
        if old.image is None or old.kind not in ("file", "link"):
            return moved if new is not None else "left (no before-image)"
        _restore(parent, leaf, old)
        return "restored"
    except OSError as exc:
        return f"failed: {exc.strerror or exc}"
    finally:
        os.close(parent)


def _open_beneath(root: Path, rel: str) -> int:
    """A directory below ``root`` opened one component at a time, never through a symlink."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for name in rel.split("/") if rel else ():
        try:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _quarantine(parent: int, leaf: str, dest: Path) -> None:
    """Move ``leaf`` to ``dest`` (outside the roots), else copy it there and remove it."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    dfd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            _rename_out(parent, leaf, dfd, dest.name)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        # A partial copy is kept: what matters is that it leaves the workspace.
        with contextlib.suppress(OSError, RecursionError):
            _copy_out(parent, leaf, dfd, dest.name, [QUARANTINE_COPY_BYTES])
    finally:
        os.close(dfd)
    _remove(parent, leaf)


def _rename_out(parent: int, leaf: str, dfd: int, name: str) -> None:
    try:
        os.rename(leaf, name, src_dir_fd=parent, dst_dir_fd=dfd)
    except PermissionError:
        # Moving a directory to another parent needs write access to it (its ".." changes):
        # a command can leave it mode 0555. Its owner may add that back.
        _chmod_owner_rwx(parent, leaf)
        os.rename(leaf, name, src_dir_fd=parent, dst_dir_fd=dfd)


def _chmod_owner_rwx(parent: int, leaf: str) -> int | None:
    """Give a directory's owner rwx (never through a symlink); its device+inode, or None."""
    try:
        fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            return None
        if st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
            # chmod through the O_PATH descriptor: the directory checked is the one changed.
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
        return st.st_ino
    except OSError:
        return None
    finally:
        os.close(fd)


def _remove(parent: int, leaf: str) -> None:
    """Remove an entry and everything below it, never following a symlink.

    Iterative with one open directory at a time (it climbs back through
    ``..`` and checks the inode it expects), so neither depth nor a
    descriptor limit stops it; directories are made owner-rwx first, so a
    command's ``chmod 0`` does not either.
    """
    st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(leaf, dir_fd=parent)
        return
    _chmod_owner_rwx(parent, leaf)
    fd = os.open(leaf, _DIR_FLAGS, dir_fd=parent)
    # The inodes from the top down to the directory open at fd.
    chain = [os.fstat(fd).st_ino]
    try:
        while True:
            sub = None
            for child in os.listdir(fd):
                try:
                    os.unlink(child, dir_fd=fd)
                except IsADirectoryError:
                    sub = child
                    break
                except FileNotFoundError:
                    continue
            if sub is not None:
                _chmod_owner_rwx(fd, sub)
                nxt = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
                chain.append(os.fstat(fd).st_ino)
                continue
            chain.pop()
            if not chain:
                break
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            name_ino = os.fstat(fd).st_ino
            os.close(fd)
            fd = up
            if os.fstat(fd).st_ino != chain[-1]:
                raise OSError(errno.ESTALE, "a directory was moved during removal")
            for child in os.listdir(fd):
                child_st = os.stat(child, dir_fd=fd, follow_symlinks=False)
                if child_st.st_ino == name_ino and stat.S_ISDIR(child_st.st_mode):
                    os.rmdir(child, dir_fd=fd)
                    break
    finally:
        os.close(fd)
    os.rmdir(leaf, dir_fd=parent)


def _copy_out(src_dir: int, name: str, dst_dir: int, dst_name: str, budget: list[int]) -> None:
    """Copy one entry across file systems without following symlinks, up to ``budget`` bytes."""
    st = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_dir), dst_name, dir_fd=dst_dir)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dst_name, 0o700, dir_fd=dst_dir)
        sfd = os.open(name, _DIR_FLAGS, dir_fd=src_dir)
        dfd = os.open(dst_name, _DIR_FLAGS, dir_fd=dst_dir)
        try:
            for child in os.listdir(sfd):
                _copy_out(sfd, child, dfd, child, budget)
        finally:
            os.close(sfd)
            os.close(dfd)
    elif stat.S_ISREG(st.st_mode) and st.st_size <= budget[0]:
        budget[0] -= st.st_size
        rfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
        try:
            wfd = os.open(
                dst_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dst_dir
            )
            try:
                while chunk := os.read(rfd, 1 << 20):
                    os.write(wfd, chunk)
            finally:
                os.close(wfd)
        finally:
            os.close(rfd)
    # FIFOs, devices, sockets and files over the budget are not copied (they are removed).


def _restore(parent: int, leaf: str, old: MetaEntry) -> None:
    """Put a before-image back at ``leaf`` (which is free: its occupant was quarantined)."""
    assert old.image is not None
    tmp = f".ringfence-restore-{os.getpid()}-{leaf[:32]}.tmp"
    if old.kind == "link":
        os.symlink(os.fsdecode(old.image), tmp, dir_fd=parent)
        with contextlib.suppress(OSError):  # only root may give it back to its owner
            os.chown(tmp, old.uid, old.gid, dir_fd=parent, follow_symlinks=False)
    else:
        wfd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=parent,
        )
        try:
            view = memoryview(old.image)
            while view:
                view = view[os.write(wfd, view) :]
            with contextlib.suppress(OSError):  # only root may give it back to its owner
                os.fchown(wfd, old.uid, old.gid)
            os.fchmod(wfd, stat.S_IMODE(old.mode) & 0o777)
            os.fsync(wfd)
        finally:
            os.close(wfd)
    os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)


def _clear_setid(after: GitSnapshot) -> list[str]:
    """Clear the setuid/setgid bits ``after`` found; the host paths that were cleared."""
    cleared: list[str] = []
    for key in sorted(after.setid):
        index, rel = key
        parent_rel, _, leaf = rel.rpartition("/")
        try:
            parent = _open_beneath(after.roots[index], parent_rel)
        except OSError:
            continue
        try:
            fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError:
            os.close(parent)
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                # chmod through the O_PATH descriptor: the file checked is the file changed.
                os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) & ~0o6000)
                cleared.append(str(after.path(key)))
        except OSError:
            pass
        finally:
            os.close(fd)
            os.close(parent)
    return cleared


def describe_findings(findings: Sequence[GitFinding], limit: int = 20) -> str:
    """The findings for a message: at most ``limit``, then how many more."""
    shown = "; ".join(f"{f.path} ({f.change}, {f.action})" for f in findings[:limit])
    more = len(findings) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
