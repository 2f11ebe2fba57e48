"""``--worktree [NAME]`` sessions and ``ringfence worktree list|diff NAME|remove NAME``.

A worktree session runs in a fresh ``git worktree`` of the first root, kept
outside it at ``$RINGFENCE_HOME/worktrees/<workspace id>/<NAME>`` on branch
``ringfence/<NAME>``; the session's first root is that worktree, so the
agent's edits never touch the checkout the person works in. Every git call
goes through :func:`ringfence._git.run_git` (hooks, filters and configured
programs off). ``remove`` deletes the worktree, not its branch (commits made
there stay reachable).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..runtime._errors import InvalidArguments, NotFound, ToolError
from ..runtime._files import ringfence_home
from ..runtime._render import one_line, visible_line
from ..workspace._names import escape_name
from ..workspace._workspace import Workspace
from ..workspace.changes._store import workspace_id
from ._output import print_ok
from ._verbs import add_verb_parser, add_workspace_option

if TYPE_CHECKING:
    from .._git import GitResult

# ringfence._git (and the process supervisor it spawns through) is imported where git
# runs: every session verb has --worktree, and most sessions never use it.

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "worktree")
    psub = p.add_subparsers(dest="worktree_verb", required=True, metavar="ACTION")
    for name, help_ in (
        ("list", "the session worktrees of this workspace"),
        ("diff", "what a session changed in its worktree (tracked changes and new files)"),
        ("remove", "delete a session worktree (its branch is kept)"),
    ):
        q = psub.add_parser(name, help=help_)
        if name != "list":
            q.add_argument("name", metavar="NAME", help="the worktree's name")
        if name == "remove":
            q.add_argument("--force", action="store_true", help="also with uncommitted changes")
        add_workspace_option(
            q, "the workspace (its first root is the repository); default as for sessions"
        )
        q.add_argument("--json", action="store_true", help="print one JSON object")
        q.set_defaults(func=globals()[f"run_{name}"])


def add_worktree_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worktree",
        nargs="?",
        const="",
        default=None,
        metavar="NAME",
        help="run the session in a git worktree of the first root (made if missing; default "
        "name: session-<time>); see `ringfence worktree`",
    )


def _base(roots: list[Path]) -> tuple[Path, Path]:
    """The repository (first root, real path) and the directory of its session worktrees."""
    repo = Path(os.path.realpath(roots[0]))
    with Workspace([repo]) as ws:
        wsid = workspace_id(ws)
    return repo, ringfence_home() / "worktrees" / wsid


def _check(result: GitResult, what: str, where: Path | str) -> GitResult:
    """``result`` if git succeeded; else a ToolError naming the command, the directory, git's words."""
    if result.code != 0:
        text = result.stderr.decode("utf-8", "replace").strip()
        raise ToolError(f"git {what} in {where} failed (exit {result.code}): {text}")
    return result


def _named(name: str) -> str:
    if not _NAME.match(name) or ".." in name:
        raise InvalidArguments(
            f"worktree name {name!r}: 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
            field="worktree",
        )
    return name


def session_roots(roots: list[Path], name: str) -> list[Path]:
    """The session's roots with the first replaced by worktree ``name`` (made if missing)."""
    name = _named(name or time.strftime("session-%Y%m%d-%H%M%S"))
    repo, base = _base(roots)
    path = base / name
    if not path.exists():
        from .._git import run_git

        _check(
            run_git(["rev-parse", "--show-toplevel"], cwd=repo), "rev-parse (is it a repo?)", repo
        )
        # A refused session leaves nothing behind: the directories made for it go again.
        made = [p for p in (base, *base.parents) if not p.exists()]
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            _check(
                run_git(["worktree", "add", "-b", f"ringfence/{name}", str(path)], cwd=repo),
                "worktree add",
                repo,
            )
        except BaseException:
            for p in made:  # deepest first; rmdir only removes them while empty
                with contextlib.suppress(OSError):
                    p.rmdir()
            raise
    return [path, *roots[1:]]


def _ours(roots: list[Path]) -> tuple[Path, Path, list[dict[str, str]]]:
    from .._git import run_git

    repo, base = _base(roots)
    listed = _check(run_git(["worktree", "list", "--porcelain"], cwd=repo), "worktree list", repo)
    found: list[dict[str, str]] = []
    for block in listed.stdout.decode("utf-8", "surrogateescape").split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        path = fields.get("worktree", "")
        if path and Path(path).parent == base:
            branch = fields.get("branch", "").removeprefix("refs/heads/")
            found.append({"name": Path(path).name, "path": path, "branch": branch})
    return repo, base, found


def _find(args: argparse.Namespace) -> tuple[Path, dict[str, str]]:
    name = _named(args.name)
    repo, _, found = _ours(args.settings.roots(args.workspace))
    for w in found:
        if w["name"] == name:
            return repo, w
    raise NotFound(f"no session worktree {name!r} (see `ringfence worktree list`)", field="name")


async def run_list(args: argparse.Namespace) -> int:
    _, _, found = _ours(args.settings.roots(args.workspace))
    if args.json:
        return print_ok(found, True)
    for w in found:
        sys.stdout.write(f"{w['name']}  {w['branch']}  {w['path']}\n")
    return 0


async def run_diff(args: argparse.Namespace) -> int:
    from .._git import git_diff, run_git

    _, w = _find(args)
    diff = _check(git_diff(["HEAD"], cwd=w["path"]), "diff", w["path"]).stdout.decode(
        "utf-8", "replace"
    )
    new = _check(
        run_git(["ls-files", "-z", "--others", "--exclude-standard"], cwd=w["path"]),
        "ls-files",
        w["path"],
    )
    untracked = [n for n in new.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    if args.json:
        return print_ok({"name": w["name"], "diff": diff, "untracked": untracked}, True)
    # The agent's content through the one renderer: every line as a review view shows it.
    for line in diff.removesuffix("\n").split("\n") if diff else ():
        content = line[:1] in ("+", "-", " ") and not line.startswith(("+++ ", "--- "))
        shown = line[0] + visible_line(line[1:]) if content else visible_line(line)
        sys.stdout.write(f"{shown}\n")
    for n in untracked:
        sys.stdout.write(f"new file (untracked): {one_line(escape_name(n))}\n")
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    from .._git import run_git

    repo, w = _find(args)
    force = ["--force"] if args.force else []
    _check(run_git(["worktree", "remove", *force, w["path"]], cwd=repo), "worktree remove", repo)
    if args.json:
        return print_ok({"removed": w["name"], "branch_kept": w["branch"]}, True)
    sys.stdout.write(f"removed {w['name']} (branch {w['branch']} kept)\n")
    return 0
