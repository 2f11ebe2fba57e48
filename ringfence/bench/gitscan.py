"""The cost ``run_shell``'s git metadata check adds to every command (issue 11, escape 1).

Per command the tool scans the roots before the command and again after it,
then compares (``scan_git_metadata`` + ``enforce_git_metadata``); on docker
the second scan also ``lstat``s every file for setuid/setgid bits (a full
walk). Since the scans are incremental, each starts from the previous one: a
directory whose device, inode, ctime and mtime did not move is not listed
again. Measured over a generated tree (100 files per directory) against a
bare ``os.walk`` of the same tree (names only), interleaved, with and without
a repository full of loose objects:

* ``full walks``: both scans walk everything: what every command cost before
  the scans were incremental (now: a session's first scan). Informational.
* ``nothing changed``: the steady state for a command that writes nothing.
  Goal: no directory listed, i.e. one ``lstat`` per directory plus the
  entries inside git metadata (below ``objects/``: one per directory), and
  within 3x ``os.walk``.
* ``one file written``: the command creates a file in one directory (that
  directory is listed again, by this check and, being hot, the next).
* docker (``+ setid``): the after-scan stays a full walk with an ``lstat`` per
  file; informational.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ringfence.workspace.git._enforce import enforce_git_metadata
from ringfence.workspace.git._scan import scan_git_metadata
from ringfence.workspace.git._snapshot import GitSnapshot

from ._harness import SyncArm, interleave_blocking
from ._suite import Row, Scenario

GOAL_RATIO = 3.0
GIT_ENV = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.com",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}
# Older than scan_git_metadata's hot margin (50 ms): a tree written this long ago is settled.
SETTLE_SECONDS = 0.1


def _tree(root: Path, files: int) -> None:
    for d in range(files // 100):
        sub = root / f"d{d:03}"
        sub.mkdir()
        for f in range(100):
            (sub / f"f{f:03}.txt").write_text(f"{d} {f}\n")


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV, "HOME": str(root.parent)}
    subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)


def _walk(root: Path) -> None:
    for _ in os.walk(root):
        pass


class _Session:
    """One run_shell session's checks: each command's after-scan is the next one's base."""

    def __init__(self, roots: list[Path], quarantine: Path) -> None:
        self.roots = roots
        self.quarantine = quarantine
        self.last: GitSnapshot | None = None
        self.listed = 0

    def command(self, setid: bool = False, effect: Callable[[], None] | None = None) -> None:
        before = scan_git_metadata(self.roots, base=self.last)
        since = time.time_ns()
        if effect is not None:
            effect()
        after = scan_git_metadata(self.roots, since=since, setid=setid, base=before)
        enforce_git_metadata(before, after, self.quarantine)
        self.last = after
        self.listed = before.listed + after.listed


def _full(roots: list[Path], quarantine: Path) -> None:
    since = time.time_ns()
    before = scan_git_metadata(roots)
    after = scan_git_metadata(roots, since=since)
    enforce_git_metadata(before, after, quarantine)


async def run(quick: bool) -> list[Row]:
    sizes, rounds = ((2000, 10000), 5) if quick else ((2000, 10000), 15)
    rows: list[Row] = []
    for files in sizes:
        rows += _measure(files, rounds)
    return rows


def _measure(files: int, rounds: int) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        # Two copies: the arm that writes must not disturb the ones that do not.
        root, other = Path(tmp) / "ws", Path(tmp) / "ws2"
        for r in (root, other):
            r.mkdir()
            _tree(r, files)
            _git(r, "init", "-q")
            _git(r, "config", "gc.auto", "0")  # keep the loose objects for the second row
        quarantine = Path(tmp) / "quarantine"
        roots = [root]
        counter = itertools.count()

        def write_one() -> None:
            (other / "d000" / f"new{next(counter)}.txt").write_text("x\n")

        for label in ("fresh .git", f"{files:,} loose objects"):
            if "loose" in label:
                for r in (root, other):
                    _git(r, "add", "-A")
                    _git(r, "commit", "-qm", "all")
            time.sleep(SETTLE_SECONDS)
            quiet, docker = _Session(roots, quarantine), _Session(roots, quarantine)
            busy = _Session([other], quarantine)
            s = interleave_blocking(
                [
                    SyncArm("os.walk", lambda: _walk(root)),
                    SyncArm("full", lambda: _full(roots, quarantine)),
                    SyncArm("quiet", quiet.command),
                    SyncArm("busy", lambda b=busy: b.command(effect=write_one)),
                    SyncArm("docker", lambda d=docker: d.command(setid=True)),
                ],
                rounds=rounds,
                warmup=1,
            )
            dirs = len(quiet.last.dirs) if quiet.last is not None else 0
            note = {"files": files, "git": label, "directories": dirs}
            walk = s["os.walk"]
            head = f"git check per command, {files:,} files, {label}"
            rows.append(
                Row(
                    "gitscan",
                    f"{head}, full walks (local; a session's first command, all before)",
                    s["full"],
                    walk,
                    "informational",
                    None,
                    note,
                )
            )
            rows.append(
                Row(
                    "gitscan",
                    f"{head}, nothing changed (local)",
                    s["quiet"],
                    walk,
                    f"no directory listed, within {GOAL_RATIO:g}x os.walk",
                    quiet.listed == 0 and s["quiet"].median / walk.median < GOAL_RATIO,
                    {**note, "listed": quiet.listed},
                )
            )
            rows.append(
                Row(
                    "gitscan",
                    f"{head}, one file written (local)",
                    s["busy"],
                    walk,
                    "informational",
                    None,
                    {**note, "listed": busy.listed},
                )
            )
            rows.append(
                Row(
                    "gitscan",
                    f"{head}, nothing changed (docker: + setid lstat, full after-scan)",
                    s["docker"],
                    walk,
                    "informational",
                    None,
                    note,
                )
            )
    return rows


SCENARIO = Scenario(
    "gitscan",
    "run_shell's git metadata check per command vs a bare os.walk",
    f"nothing changed: no directory listed, within {GOAL_RATIO:g}x os.walk (local)",
    run,
)
SCENARIOS = [SCENARIO]
