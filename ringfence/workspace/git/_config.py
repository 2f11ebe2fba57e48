"""git's own configuration files for the person: never inside a workspace root.

git runs what its configuration names (``core.fsmonitor`` on ``git status``,
``core.pager``, aliases, filters) in *every* repository, and the global and
system files are read wherever git runs: ``$GIT_CONFIG_GLOBAL``, else
``~/.gitconfig`` and ``$XDG_CONFIG_HOME/git/config`` (``~/.config/git/config``);
``$GIT_CONFIG_SYSTEM``, else ``/etc/gitconfig``. A workspace root that holds one
(the home itself, ``~/.config``, a dotfiles directory a ``~/.gitconfig`` link
points into) would let any writer of the workspace — a file tool, a merge, a
writable MCP server — plant a command the host's next ``git status`` runs.

So such a root is refused outright (like ``$RINGFENCE_HOME`` inside a root): one
check of one fact, instead of a rule every writer must apply. Compared by
identity (device and inode of each directory from the file's real directory up
to ``/``), so symlinks and bind mounts spelling a root otherwise count; a file
that does not exist yet is judged by the directories that would hold it.

A file with more than one name (a hard link: a dotfiles directory kept by
``ln`` rather than ``ln -s``) may have one inside a root whatever directory
holds ``~/.gitconfig``: a command writing the roots directly
(``--no-change-sets``, ``host``, a writable MCP server) appends to the shared
inode. The roots are then searched for that inode (device and inode of each
entry, links not followed): only when git's file has several names.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...runtime._errors import InvalidArguments

__all__ = ["git_config_files", "refuse_git_config_inside_roots"]


def git_config_files(env: Mapping[str, str]) -> list[Path]:
    """The configuration files git reads for a person with this environment (whether they
    exist or not): the global and the system ones, as git chooses them."""
    files: list[Path] = []
    home = env.get("HOME")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(Path(env["GIT_CONFIG_GLOBAL"]))
    elif home:
        xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files += [Path(home) / ".gitconfig", Path(xdg) / "git" / "config"]
    files.append(Path(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"))
    return [f for f in files if f.is_absolute()]


def _holders(file: Path) -> list[Path]:
    """The directories that hold ``file`` (its own and every one above), as spelled and as
    its link, if it is one, resolves."""
    places = [Path(os.path.realpath(file.parent))]
    if os.path.islink(file):
        places.append(Path(os.path.realpath(file)).parent)
    return [d for place in places for d in (place, *place.parents)]


def refuse_git_config_inside_roots(
    roots: Sequence[Path], env: Mapping[str, str] | None = None
) -> None:
    """Raise ``InvalidArguments`` (field ``roots``) when a root holds a git configuration
    file of :func:`git_config_files` (``env``: the person's, default this process's)."""
    by_identity: dict[tuple[int, int], Path] = {}
    for path in roots:
        st = os.stat(path)
        by_identity[(st.st_dev, st.st_ino)] = path
    for file in git_config_files(os.environ if env is None else env):
        for where in _holders(file):
            try:
                st = os.stat(where)
            except OSError:
                continue  # not made yet: the directories above it decide
            root = by_identity.get((st.st_dev, st.st_ino))
            if root is not None:
                raise _held(root, file, "choose a root that does not hold it (a project directory)")
        linked = _other_name(file, roots)
        if linked is not None:
            root, name = linked
            raise _held(
                root,
                file,
                f"{name} is the same file (a hard link); make {file} a file of its own "
                f"(cp {file} {file}.new && mv {file}.new {file}) or choose another root",
            )


def _held(root: Path, file: Path, fix: str) -> InvalidArguments:
    return InvalidArguments(
        f"the workspace root {root} holds {file}, git's own configuration: any "
        "tool writing the workspace could set a command (core.fsmonitor, "
        "core.pager, an alias) that the host's next git runs in every repository; " + fix,
        field="roots",
        root=str(root),
        git_config=str(file),
    )


def _other_name(file: Path, roots: Sequence[Path]) -> tuple[Path, Path] | None:
    """``(root, name)``: a name below a root of the regular file ``file`` (its link followed)
    when it has more than one name, else None. A walk of every root that never follows a
    link, matching each entry's device and inode; done only for a file with several names."""
    try:
        st = os.stat(file)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return None
    wanted = (st.st_dev, st.st_ino)
    for root in roots:
        try:
            top = os.open(root, _DIR_FLAGS)
        except OSError:
            continue
        found = _search(top, wanted)
        if found is not None:
            return root, root / found
    return None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _search(top: int, wanted: tuple[int, int]) -> str | None:
    """The path below the directory ``top`` (closed here) of a file whose device and inode
    are ``wanted``, or None. By descriptor, links never followed; one ``lstat`` per file
    (not readdir's ``d_ino``, which is not ``st_ino`` on every file system)."""
    pending = [(top, "")]
    try:
        while pending:
            fd, rel = pending.pop()
            try:
                with os.scandir(fd) as entries:
                    listing = list(entries)
                for entry in listing:
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((os.open(entry.name, _DIR_FLAGS, dir_fd=fd), name))
                        elif entry.is_file(follow_symlinks=False):
                            found = entry.stat(follow_symlinks=False)
                            if (found.st_dev, found.st_ino) == wanted:
                                return name
                    except OSError:
                        continue
            except OSError:
                continue
            finally:
                os.close(fd)
    finally:
        for fd, _ in pending:
            os.close(fd)
    return None
