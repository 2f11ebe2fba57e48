"""Git metadata as one scan saw it: the snapshot, the findings, and which names git reads.

The values :func:`._scan.scan_git_metadata` returns (:class:`GitSnapshot`
of :class:`MetaEntry` and :class:`DirState`) and :func:`._enforce.enforce_git_metadata`
reports (:class:`GitReport` of :class:`GitFinding`), and the rules both apply
to a path inside a git directory: which files git takes programs from
(:func:`exec_relevant`), which is an index (:func:`is_index`), which lie below
``objects/`` (:func:`in_objects`). :func:`open_rel` is the one walk below an
open root both use (one component at a time, never through a symlink).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._rules import is_dotgit

__all__ = [
    "DIR_FLAGS",
    "IMAGE_MAX_BYTES",
    "DirState",
    "GitFinding",
    "GitReport",
    "GitSnapshot",
    "MetaEntry",
    "describe_findings",
    "exec_relevant",
    "in_objects",
    "is_index",
    "open_rel",
]

# Before-images are kept for files up to this size (a gitfile or config is a few hundred bytes).
IMAGE_MAX_BYTES = 64 * 1024

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Names in a git directory that git takes programs or other repositories from.
_EXEC_NAMES = frozenset({"config", "config.worktree", "commondir", "gitdir"})


@dataclass(frozen=True)
class MetaEntry:
    """One path that is or lies in git metadata, as seen by one scan.

    ``kind`` is ``dir``, ``file``, ``symlink`` or ``other``; ``top`` is the
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
        if self.kind == "symlink":
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
    links: tuple[str, ...] = ()
    specials: tuple[str, ...] = ()  # sockets, FIFOs, devices (plain directories)


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
    links: frozenset[tuple[int, str]] = frozenset()
    # Tops that are metadata because a link in git metadata leads there (.git/hooks ->
    # ../githooks): everything in them is what git runs or reads, all of it undone.
    linked: frozenset[tuple[int, str]] = frozenset()
    # Sockets, FIFOs and devices outside git metadata (inside it: entries of kind ``other``).
    specials: frozenset[tuple[int, str]] = frozenset()

    def path(self, key: tuple[int, str]) -> Path:
        return self.roots[key[0]] / key[1]

    @property
    def special_files(self) -> list[Path]:
        """Host paths of every socket, FIFO and device node under the roots (in git metadata
        too: git's own ``fsmonitor--daemon.ipc`` is a host process's listening socket)."""
        keys = set(self.specials)
        keys.update(k for k, e in self.entries.items() if e.kind == "other")
        return sorted(self.path(k) for k in keys)

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


def open_rel(root_fd: int, rel: str) -> int:
    """``rel`` below the open ``root_fd``, one component at a time, never through a symlink."""
    fd = os.dup(root_fd)
    for name in rel.split("/") if rel else ():
        try:
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _leaf_dotgit(key: tuple[int, str]) -> bool:
    return is_dotgit(key[1].rsplit("/", 1)[-1])


def _inner(rel: str, top: str) -> str:
    """``rel`` relative to the metadata ``top`` it lies in ("" for the top itself)."""
    if rel == top:
        return ""
    return rel[len(top) + 1 :] if top else rel


def in_objects(rel: str, top: str) -> bool:
    """Is ``rel`` below the ``objects/`` directory of the git directory ``top``?"""
    return _inner(rel, top).startswith("objects/")


def is_index(rel: str, top: str) -> bool:
    """The index of a git directory (``index``, ``worktrees/*/index``, ``modules/**/index``)."""
    return rel.rpartition("/")[2] == "index" and not exec_relevant(rel, top)


def exec_relevant(rel: str, top: str) -> bool:
    """Does git take programs (or another repository) from this path inside a git directory?"""
    inner = _inner(rel, top).split("/")
    if inner == [""]:
        return False
    return inner[-1] in _EXEC_NAMES or "hooks" in inner


def describe_findings(findings: Sequence[GitFinding], limit: int = 20) -> str:
    """The findings for a message: at most ``limit``, then how many more."""
    shown = "; ".join(f"{f.path} ({f.change}, {f.action})" for f in findings[:limit])
    more = len(findings) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
