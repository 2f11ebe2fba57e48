"""Undo what a shell command did to git metadata: compare two snapshots, quarantine, restore.

What :func:`enforce_git_metadata` promises, for two snapshots of the same
roots (:func:`._scan.scan_git_metadata` before and after the command):

* **New metadata** (a ``.git`` name or a git directory that was not there) is
  moved out of the workspace, whole, into ``quarantine`` — by ``rename`` when
  it is on the same file system, else copied (regular files, directories and
  symlinks; at most :data:`QUARANTINE_COPY_BYTES`) and removed.
* **A changed or deleted gitfile or ``.git`` symlink** is quarantined and its
  before-image put back (gitfiles up to :data:`._snapshot.IMAGE_MAX_BYTES`).
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
* The quarantine is made inert: every ``HEAD`` in it is renamed
  (:data:`QUARANTINED_HEAD`), so git takes no directory there for a repository
  (a person inspecting it ran a kept ``core.fsmonitor``); one that cannot be
  made inert is removed.
* Every finding is reported, with what was done to it; any finding means the
  command is refused (``git_metadata``).
* Optionally, setuid/setgid bits on regular files whose status changed during
  the command are cleared (a file created in a container must not be setuid
  on the host).

The non-promises (what the scans do not see, what cannot be put back) are
:mod:`._scan`'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from ._rules import git_discovery_name
from ._snapshot import (
    DIR_FLAGS,
    GitFinding,
    GitReport,
    GitSnapshot,
    MetaEntry,
    exec_relevant,
    is_index,
    open_rel,
)

__all__ = ["QUARANTINE_COPY_BYTES", "diff_git_metadata", "enforce_git_metadata"]

# When quarantine is on another file system, at most this much is copied out before removal.
QUARANTINE_COPY_BYTES = 256 * 1024 * 1024

# Stands for an unlistable directory in _undo (only "something is there" matters).
_OPAQUE = MetaEntry("dir", 0, 0, 0, 0, 0, "")


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


def _moved_already(path: str, moved: set[str]) -> bool:
    """Was ``path``, or a directory above it, moved out already? (A root inside another
    lists the inner root's entries twice, under each root's name.)"""
    while path and path != "/":
        if path in moved:
            return True
        path = path.rpartition("/")[0]
    return False


def enforce_git_metadata(before: GitSnapshot, after: GitSnapshot, quarantine: Path) -> GitReport:
    """Undo what a command did to git metadata (see this module's docstring). Blocking.

    ``quarantine`` (outside every root) is created only when something is
    moved there. Never raises for a failed undo: the finding says ``failed``.
    """
    findings: list[GitFinding] = []
    refreshed: list[str] = []
    moved: set[tuple[int, str]] = set()
    moved_paths: set[str] = set()  # the same, as host paths
    memo: dict[tuple[int, str], bool] = {}
    holds_exec = _exec_holders(before, after)
    became = _roots_become_git(before, after)
    for key, change in diff_git_metadata(before, after):
        index, rel = key
        old, new = before.entries.get(key), after.entries.get(key)
        if _below(_parent(key), moved, memo):
            continue  # below something already moved out whole
        display = str(after.path(key))
        if _moved_already(display, moved_paths):
            continue  # moved out under the other name of a root inside another
        entry = new or old
        assert entry is not None
        is_top = key in after.tops or key in before.tops
        if change == "changed" and not is_top and is_index(rel, entry.top):
            # git diff rewrites the index's stat cache even with GIT_OPTIONAL_LOCKS=0; git
            # runs nothing from it, and staging new content needs new objects (found).
            refreshed.append(display)
            continue
        # Within an existing git directory, only what git runs programs from is undone
        # (a new directory there is moved out whole when anything in it is such a file).
        undo = (
            is_top
            or entry.top == rel
            # What a link in git metadata leads to (.git/hooks -> ../githooks): all of it.
            or (index, entry.top) in after.linked
            or (index, entry.top) in before.linked
            or exec_relevant(rel, entry.top)
            or (change == "new" and key in holds_exec)
            # A root the command made a git directory: what git's discovery reads there goes.
            or (change == "new" and index in became and git_discovery_name(rel) is not None)
        )
        if not undo or (
            old is not None and old.kind == "dir" and new is not None and new.kind == "dir"
        ):
            findings.append(GitFinding(display, change, "left"))
            continue
        action = _undo(after.roots[index], rel, old, new, quarantine / str(index))
        if new is not None and not action.startswith("failed"):
            moved.add(key)
            moved_paths.add(display)
        findings.append(GitFinding(display, change, action))
    memo.clear()
    for key in sorted(after.opaque):
        index, rel = key
        if _below(key, moved, memo) or _moved_already(str(after.path(key)), moved_paths):
            continue
        # It may hide a .git that git on the host would still find: out, whole.
        action = _undo(after.roots[index], rel, None, _OPAQUE, quarantine / str(index))
        moved.add(key)
        moved_paths.add(str(after.path(key)))
        memo.clear()  # a new mark: memoised answers below it are stale
        findings.append(GitFinding(str(after.path(key)), "unreadable", action))
    cleared = _clear_setid(after)
    used = quarantine if quarantine.exists() else None
    if used is not None:
        try:
            _make_inert(used)
        except OSError as exc:
            # A quarantine git could still take for a repository is a planted one kept live
            # on the host: out of the workspace and inert matter more than keeping a copy.
            with contextlib.suppress(OSError):
                _remove_path(used)
            used = None
            why = f"removed (the quarantine could not be made inert: {exc.strerror or exc})"
            findings = [
                GitFinding(f.path, f.change, why) if f.action == "quarantined" else f
                for f in findings
            ]
    # What a root inside another left alone is found twice, once under each name.
    return GitReport(tuple(dict.fromkeys(findings)), tuple(cleared), used, tuple(refreshed))


# What a quarantined HEAD is renamed to (then ``-1``, ``-2``, … if taken).
QUARANTINED_HEAD = "HEAD.quarantined"


def _make_inert(quarantine: Path) -> None:
    """Rename every ``HEAD`` (any case) in ``quarantine`` to :data:`QUARANTINED_HEAD`.

    The quarantine keeps what a command planted, at its path, for a person to inspect; a
    person who does (``cd`` there, with a shell prompt that runs ``git status``, an editor's
    git integration) ran the planted ``core.fsmonitor`` when a repository was kept whole.
    Every way git takes a directory for a repository (a ``.git`` directory, a gitfile's
    target, the directory itself) ends in ``is_git_directory``, which needs a valid
    ``HEAD`` there: with none left, git finds no repository inside the quarantine. Case
    folded, for a case-insensitive file system. Iterative with one open directory at a
    time (climbing back through ``..``, checking the inode), never through a symlink;
    directories a command left without owner rwx get it first. Raises ``OSError`` when a
    directory cannot be read or a name cannot be changed."""
    fd = os.open(quarantine, DIR_FLAGS)
    # Per level: the directory's inode and the subdirectories still to visit.
    chain = [(os.fstat(fd).st_ino, _inert_dir(fd))]
    try:
        while chain:
            pending = chain[-1][1]
            if pending:
                name = pending.pop()
                _chmod_owner_rwx(fd, name)
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
                chain.append((os.fstat(fd).st_ino, _inert_dir(fd)))
                continue
            chain.pop()
            if not chain:
                break
            up = os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            if os.fstat(fd).st_ino != chain[-1][0]:
                raise OSError(errno.ESTALE, "a directory was moved while it was made inert")
    finally:
        os.close(fd)


def _inert_dir(fd: int) -> list[str]:
    """Rename a ``HEAD`` in the directory open at ``fd``; its subdirectories' names."""
    names = os.listdir(fd)
    taken = {n.casefold() for n in names}
    subdirs: list[str] = []
    for name in names:
        if git_discovery_name(name) == "HEAD":  # any case, "HEAD." too (vfat drops the dot)
            new, n = QUARANTINED_HEAD, 0
            while new.casefold() in taken:
                n += 1
                new = f"{QUARANTINED_HEAD}-{n}"
            os.rename(name, new, src_dir_fd=fd, dst_dir_fd=fd)
            taken.add(new.casefold())
            name = new
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            subdirs.append(name)
    return subdirs


def _remove_path(path: Path) -> None:
    """Remove ``path`` and everything below it (see :func:`_remove`)."""
    parent = os.open(path.parent, DIR_FLAGS)
    try:
        _remove(parent, path.name)
    finally:
        os.close(parent)


def _roots_become_git(before: GitSnapshot, after: GitSnapshot) -> set[int]:
    """The roots that are git metadata throughout after the command and were not before: the
    command made the root itself a git directory (its own entries have the root as their top).
    The root cannot be moved out like a new directory, so the names that make it one are."""

    def inside(snapshot: GitSnapshot) -> set[int]:
        return {index for (index, _), entry in snapshot.entries.items() if entry.top == ""}

    return inside(after) - inside(before)


def _exec_holders(before: GitSnapshot, after: GitSnapshot) -> set[tuple[int, str]]:
    """New paths with a new exec-relevant file at or below them (linear, however deep)."""
    holders: set[tuple[int, str]] = set()
    for key in after.entries.keys() - before.entries.keys():
        if key in holders or not exec_relevant(key[1], after.entries[key].top):
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
                _quarantine(parent, leaf, quarantine, rel)
            except OSError as exc:
                # Out of the workspace matters more than keeping a copy: remove it instead.
                _remove(parent, leaf)
                moved = f"removed (quarantine failed: {exc.strerror or exc})"
        if old is None:
            return moved
        if old.image is None or old.kind not in ("file", "symlink"):
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
    try:
        return open_rel(fd, rel)
    finally:
        os.close(fd)


def _quarantine(parent: int, leaf: str, quarantine: Path, rel: str) -> None:
    """Move ``leaf`` to ``quarantine/rel`` (outside the roots), else copy it there and remove it.

    The copy's directories are made one component at a time by descriptor: ``rel`` can be
    deeper than Python's recursion and longer than ``PATH_MAX`` (a command's tree is), and a
    path-based ``mkdir(parents=True)`` failed there, which left the metadata in place.
    """
    quarantine.mkdir(parents=True, exist_ok=True, mode=0o700)
    dfd = os.open(quarantine, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in rel.split("/")[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=dfd)
            nxt = os.open(name, DIR_FLAGS, dir_fd=dfd)
            os.close(dfd)
            dfd = nxt
        try:
            _rename_out(parent, leaf, dfd, leaf)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        # A partial copy is kept: what matters is that it leaves the workspace.
        with contextlib.suppress(OSError, RecursionError):
            _copy_out(parent, leaf, dfd, leaf, [QUARANTINE_COPY_BYTES])
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
    fd = os.open(leaf, DIR_FLAGS, dir_fd=parent)
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
                nxt = os.open(sub, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
                chain.append(os.fstat(fd).st_ino)
                continue
            chain.pop()
            if not chain:
                break
            up = os.open("..", DIR_FLAGS, dir_fd=fd)
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
        sfd = os.open(name, DIR_FLAGS, dir_fd=src_dir)
        dfd = os.open(dst_name, DIR_FLAGS, dir_fd=dst_dir)
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
    if old.kind == "symlink":
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
