"""Git metadata around a shell command: snapshot it, find what a command changed, undo that.

A shell command is not confined by the resolver, so ``run_shell`` checks its
*effect* instead: :func:`scan_git_metadata` before and after the command, then
:func:`._enforce.enforce_git_metadata` on the two snapshots (what it
promises is written there). "Git metadata" is

* every entry whose name git reads as ``.git`` (:func:`is_dotgit`: any case,
  trailing dots/spaces, ``git~1``, HFS+ ignorables, …), whatever its type
  (directory, gitfile, symlink), at any depth;
* every directory git would accept as a repository (:func:`is_git_directory`:
  bare, separate, worktree and submodule git directories, whatever their name);
* everything inside either of those ("inside a git directory").

Non-promises: the walk never follows symlinks and never enters a linked
directory, so metadata *outside* the roots is not watched; a process that
keeps writing while the check runs can race it (the docker backend kills every
sandbox process before the command returns, so there is none there); a
command may change files that git configuration already points to outside git
metadata (``core.hooksPath = .githooks``, ``include.path``) — those are
ordinary workspace files; an existing git directory whose before-image was not
kept (objects, index, a config over :data:`._snapshot.IMAGE_MAX_BYTES`) is reported, not
restored; the subtree of a directory that was already unlistable before the
command is not watched. A first scan is linear in the number of entries under
the roots; a scan from a ``base`` (the previous one) costs one ``lstat`` per
directory, one per entry inside git metadata (below ``objects/``: per
directory) and a listing per changed directory, on the assumptions
:func:`scan_git_metadata` states (ctime cannot be set back, the clock is not
stepped back, hot directories are listed again); measured:
``benchmarks/gitscan.py``.

Where the parts live: this module starts a scan (:func:`scan_git_metadata`,
whether a base may be used); :mod:`._walk` walks; :mod:`._snapshot` holds
the snapshot and the findings; :mod:`._enforce` compares two snapshots and
undoes what changed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from ._rules import first_git_directory, is_dotgit, is_git_directory, read_commondir
from ._snapshot import GitSnapshot, open_rel
from ._walk import Walk

__all__ = ["CLOCK_STEP_NS", "scan_git_metadata", "sharing_git_directory"]

# The wall clock stepping back by more than this since the base scan (measured against the
# monotonic clock) means a full walk: a change could then get a ctime the base already saw.
# Steps below the hot margin cannot do that; this leaves room for measuring jitter.
CLOCK_STEP_NS = 10_000_000


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
      :data:`._walk.HOT_MARGIN_NS` of ``base``'s start, or later, is "hot" and read
      again.
    * The file system keeps ``ctime`` (every local Linux file system does) and
      its clock is this machine's: a ``ctime`` more than
      :data:`._walk.FUTURE_SLACK_NS` in the future marks the snapshot untrusted, and
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
    walk = Walk(since, setid, base if usable else None, started)
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
    # A git directory's common directory (its commondir names it) is git metadata too: git
    # reads that repository's config and hooks there, and it needs no HEAD to be one.
    named = [key for key in walk.entries if key[1].rpartition("/")[2] == "commondir"]
    if named:
        fds: dict[int, int] = {}
        try:
            for index in sorted({i for i, _ in named}):
                with contextlib.suppress(OSError):
                    fds[index] = os.open(paths[index], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            for index, rel in _common_directories(walk, named, fds):
                with contextlib.suppress(OSError):  # gone meanwhile: nothing there to watch
                    walk.run_metadata(index, fds[index], rel)
        finally:
            for fd in fds.values():
                os.close(fd)
    # What git reads through a link in git metadata (.git/hooks -> ../githooks) is git
    # metadata under another name (:func:`_walk_linked`).
    linked: set[tuple[int, str]] = set()
    if _names_places(walk, paths):
        fds = {}
        try:
            for index, root in enumerate(paths):
                with contextlib.suppress(OSError):
                    fds[index] = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            if len(fds) == len(paths):
                linked = _walk_linked(walk, paths, fds)
        finally:
            for fd in fds.values():
                os.close(fd)
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
        links=frozenset(walk.links),
        linked=frozenset(linked),
        specials=frozenset(walk.specials),
    )


def _names_places(walk: Walk, paths: tuple[Path, ...]) -> bool:
    """Might the metadata ``walk`` found below ``paths`` (or a repository above them) lead
    git elsewhere (a link, a configuration's include or hooks directory:
    :func:`..changes._linked.names_places`)?"""
    from ..changes._linked import names_places

    return names_places(GitSnapshot(paths, walk.entries, frozenset()))


def _walk_linked(walk: Walk, paths: tuple[Path, ...], fds: dict[int, int]) -> set[tuple[int, str]]:
    """Walk, as metadata of its own (a top), each place inside the roots (``fds``: their
    descriptors) that a link in the metadata ``walk`` found leads to (``.git/hooks ->
    ../githooks``; links past it too, as :func:`..changes._linked.linked_metadata`
    follows them): git runs the hooks and reads the config there. The tops added; a place
    that does not exist is not one (yet)."""
    from ..changes._linked import linked_metadata
    from ..changes._view import TreeView

    added: set[tuple[int, str]] = set()
    view = TreeView([(str(p), fds[i]) for i, p in enumerate(paths)])
    snapshot = GitSnapshot(paths, dict(walk.entries), frozenset(), links=frozenset(walk.links))
    for target in sorted(linked_metadata(snapshot, view)):
        where = view.locate(target)
        if where is None or where in walk.entries:
            continue
        index, rel = where
        node = view.lstat(target)
        if node is None or not rel:
            continue
        with contextlib.suppress(OSError):  # gone meanwhile: nothing there to watch
            if node.kind == "dir":
                walk.run_metadata(index, fds[index], rel, linked=True)
            else:
                walk.add_top(index, fds[index], rel)
            added.add(where)
    return added


def _common_directories(
    walk: Walk, named: list[tuple[int, str]], fds: dict[int, int]
) -> list[tuple[int, str]]:
    """``(root index, path)`` of each directory inside the roots that the ``commondir`` of a
    git directory (``named``: those files, in the metadata ``walk`` found; ``fds``: the
    roots' descriptors) names and that is not metadata already. Matched by identity: the
    ``commondir`` is followed from its git directory as git does, and compared with the
    directories the walk listed."""
    wanted: set[tuple[int, int]] = set()
    for index, rel in named:
        parent = rel.rpartition("/")[0]
        if index not in fds:
            continue
        try:
            gitdir = open_rel(fds[index], parent)
        except OSError:
            continue
        try:
            common = None
            if is_git_directory(gitdir, beneath=(fds[index], parent)):
                common = read_commondir(gitdir)
            if common is not None:
                with contextlib.suppress(OSError, ValueError):
                    st = os.stat(common, dir_fd=gitdir)
                    wanted.add((st.st_dev, st.st_ino))
        finally:
            os.close(gitdir)
    return sorted(
        key
        for key, state in walk.dirs.items()
        if (state.dev, state.ino) in wanted and key not in walk.entries
    )


def sharing_git_directory(
    roots: Sequence[tuple[Path, int]], directory_fd: int, base: GitSnapshot | None = None
) -> tuple[str | None, GitSnapshot]:
    """A git directory in ``roots`` (``(real path, descriptor)`` pairs) whose ``commondir``
    names the directory open at ``directory_fd``, as a path, or None; and the scan it made
    (incremental from ``base``, a scan of the same roots). git reads that
    repository's ``config``, ``hooks``, ``objects`` and ``refs`` from its common directory,
    which need not be a git directory itself (no ``HEAD``).

    By a scan of the roots (every ``commondir`` git reads lies in git metadata: in a git
    directory, which the scan finds by name and content) and identity: the ``commondir``'s
    path followed from its git directory (links too, as git's ``realpath``) is compared
    with ``directory_fd`` by device and inode. Blocking; a scan (one ``lstat`` per directory from a recent ``base``), so callers ask only
    about a directory :func:`._rules.may_be_common_directory` accepts.
    """
    st = os.fstat(directory_fd)
    wanted = (st.st_dev, st.st_ino)
    snapshot = scan_git_metadata([path for path, _ in roots], base=base)
    for index, rel in sorted(snapshot.entries):
        parent, _, leaf = rel.rpartition("/")
        if leaf != "commondir":
            continue
        root_path, root_fd = roots[index]
        try:
            gitdir = open_rel(root_fd, parent)
        except OSError:
            continue
        try:
            if not is_git_directory(gitdir, beneath=(root_fd, parent)):
                continue
            common = read_commondir(gitdir)
            if common is None:
                continue
            try:
                found = os.stat(common, dir_fd=gitdir)
            except (OSError, ValueError):
                continue
            if (found.st_dev, found.st_ino) == wanted:
                return (str(root_path / parent) if parent else str(root_path)), snapshot
        finally:
            os.close(gitdir)
    return None, snapshot


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


def _root_in_git(root: Path, fd: int) -> bool:
    if any(is_dotgit(part) for part in root.parts[1:]) or is_git_directory(fd, beneath=(fd, "")):
        return True
    return first_git_directory(root.parents) is not None
