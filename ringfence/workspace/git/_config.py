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
"""

from __future__ import annotations

import os
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
                raise InvalidArguments(
                    f"the workspace root {root} holds {file}, git's own configuration: any "
                    "tool writing the workspace could set a command (core.fsmonitor, "
                    "core.pager, an alias) that the host's next git runs in every repository; "
                    "choose a root that does not hold it (a project directory)",
                    field="roots",
                    root=str(root),
                    git_config=str(file),
                )
