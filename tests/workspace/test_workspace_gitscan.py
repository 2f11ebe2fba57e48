"""The incremental git metadata scan (``scan_git_metadata(..., base=...)``) sees what a full walk sees.

Each test builds a real tree with real git metadata, takes a base snapshot,
changes the tree for real, and compares the incremental scan with a fresh full
walk. The racy-timestamp tests forge only what a coarse clock would have
produced (a directory whose ctime did not move although its entries did): the
kernel here may hand out fine-grained timestamps, so the race cannot be made
to happen on demand.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ringfence.backends._run_shell import CTIME_SLACK_NS
from ringfence.workspace.git._enforce import diff_git_metadata
from ringfence.workspace.git._scan import scan_git_metadata
from ringfence.workspace.git._snapshot import GitSnapshot
from ringfence.workspace.git._walk import HOT_MARGIN_NS

GIT_ENV = {
    "PATH": os.environ["PATH"],
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(cwd: Path, *args: str) -> None:
    env = {**GIT_ENV, "HOME": str(cwd)}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=30)


def settle() -> None:
    """Wait until what was just written is no longer "hot" for the next base scan."""
    time.sleep(HOT_MARGIN_NS / 1e9 + 0.02)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A workspace with ordinary directories, a repository, a linked worktree and a candidate."""
    ws = tmp_path / "ws"
    for d in range(5):
        (ws / f"d{d}" / "deep" / "er").mkdir(parents=True)
        (ws / f"d{d}" / "deep" / "er" / "f.txt").write_text("x\n")
    (ws / "repo").mkdir()
    git(ws / "repo", "init", "-q", "-b", "main")
    (ws / "repo" / "README").write_text("hi\n")
    git(ws / "repo", "add", "README")
    git(ws / "repo", "commit", "-q", "-m", "init")
    git(ws / "repo", "worktree", "add", "-q", "../wt")
    # Named like a git directory, but HEAD is not a ref: git does not take it (yet).
    (ws / "cand" / "objects").mkdir(parents=True)
    (ws / "cand" / "refs").mkdir()
    (ws / "cand" / "HEAD").write_text("not a ref, padded to ok\n")
    settle()
    return ws


def same(a: GitSnapshot, b: GitSnapshot) -> None:
    assert a.entries == b.entries
    assert a.tops == b.tops
    assert a.opaque == b.opaque


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite a file's bytes without a new inode (its directory does not change)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_nothing_changed_lists_no_directory(root: Path) -> None:
    base = scan_git_metadata([root])
    assert base.listed == len(base.dirs) > 20 and base.reused == 0
    again = scan_git_metadata([root], base=base)
    same(again, base)
    assert diff_git_metadata(base, again) == []
    # Only the candidate git directory is listed again (HEAD's content decides it).
    assert again.listed == 1 and again.reused == len(base.dirs) - 1
    assert again.dirs == base.dirs


def _plant_deep(ws: Path) -> None:
    (ws / "d3" / "deep" / "er" / ".git").mkdir()


def _plant_spelling(ws: Path) -> None:
    (ws / "d1" / "deep" / ".GIT.").write_text("gitdir: ../../repo/.git\n")


def _gitfile_same_size(ws: Path) -> None:
    old = (ws / "wt" / ".git").read_bytes()
    rewrite_in_place(ws / "wt" / ".git", b"gitdir: .evil".ljust(len(old) - 1, b"/") + b"\n")


def _config_appended(ws: Path) -> None:
    with (ws / "repo" / ".git" / "config").open("a") as f:
        f.write('\tfsmonitor = "touch /tmp/pwned"\n')


def _hook_added(ws: Path) -> None:
    (ws / "repo" / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")


def _candidate_head_made_valid(ws: Path) -> None:
    rewrite_in_place(ws / "cand" / "HEAD", b"ref: refs/heads/main\n")


def _directory_replaced(ws: Path) -> None:
    shutil.rmtree(ws / "d2" / "deep")
    (ws / "d2" / "deep" / "er" / "git~1").mkdir(parents=True)


def _object_added(ws: Path) -> None:
    objects = ws / "repo" / ".git" / "objects"
    next(p for p in objects.iterdir() if len(p.name) == 2).joinpath("0" * 38).write_bytes(b"x")


def _root_replaced(ws: Path) -> None:
    ws.rename(ws.with_name("old"))
    (ws / "sub" / ".git").mkdir(parents=True)


def _renamed_in(ws: Path) -> None:
    (ws / "repo").rename(ws / "d4" / "deep" / "moved")


MUTATIONS: dict[str, Callable[[Path], None]] = {
    "new .git deep in unchanged directories": _plant_deep,
    "new gitfile spelled .GIT.": _plant_spelling,
    "gitfile rewritten in place, same size": _gitfile_same_size,
    "config appended in place": _config_appended,
    "hook added": _hook_added,
    "candidate HEAD made valid in place": _candidate_head_made_valid,
    "directory replaced by a new one with git~1": _directory_replaced,
    "loose object added": _object_added,
    "root replaced": _root_replaced,
    "repository renamed into a deep directory": _renamed_in,
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_incremental_scan_equals_a_full_walk(root: Path, mutate: Callable[[Path], None]) -> None:
    base = scan_git_metadata([root])
    settle()  # a real command takes longer than a tick: not the racy case (tested below)
    mutate(root)
    incremental = scan_git_metadata([root], base=base)
    full = scan_git_metadata([root])
    same(incremental, full)
    assert diff_git_metadata(base, incremental) == diff_git_metadata(base, full) != []


def test_a_directory_changed_within_the_base_scans_tick_is_listed_again(root: Path) -> None:
    """git's "racily clean" problem, reproduced: the directory's ctime stays what the base saw."""
    base = scan_git_metadata([root])
    target = root / "d0" / "deep"
    (target / ".git").mkdir()
    # A coarse clock gives a change in the same tick the same ctime: forge exactly that.
    st = os.stat(target)
    key = (0, "d0/deep")
    racy = dataclasses.replace(base.dirs[key], ctime_ns=st.st_ctime_ns, mtime_ns=st.st_mtime_ns)
    forged = dataclasses.replace(base, dirs={**base.dirs, key: racy})
    assert st.st_ctime_ns >= forged.scanned_ns - HOT_MARGIN_NS  # hot
    found = scan_git_metadata([root], base=forged)
    assert diff_git_metadata(base, found) == [((0, "d0/deep/.git"), "new")]
    # Without the margin the same forged base would hide it: the margin is what catches it.
    settle()
    cold = dataclasses.replace(forged, scanned_ns=st.st_ctime_ns + HOT_MARGIN_NS + 1)
    assert diff_git_metadata(base, scan_git_metadata([root], base=cold)) == []


def test_a_metadata_file_rewritten_within_the_base_scans_tick_is_read_again(root: Path) -> None:
    base = scan_git_metadata([root])
    gitfile = root / "wt" / ".git"
    old = gitfile.read_bytes()
    rewrite_in_place(gitfile, b"gitdir: .evil".ljust(len(old) - 1, b"/") + b"\n")
    st = os.lstat(gitfile)
    key = (0, "wt/.git")
    racy = dataclasses.replace(
        base.entries[key],
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        ino=st.st_ino,
        mode=st.st_mode,
    )
    forged = dataclasses.replace(base, entries={**base.entries, key: racy})
    found = scan_git_metadata([root], base=forged)
    assert found.entries[key].image == gitfile.read_bytes() != old
    assert diff_git_metadata(forged, found) == [(key, "changed")]


def test_changes_right_after_a_scan_are_caught_every_time(root: Path) -> None:
    """The real race, many times over: plant a .git right after the base scan, twice."""
    base = scan_git_metadata([root])
    for i in range(30):
        target = root / f"d{i % 5}" / "deep"
        (target / ".git").mkdir()
        (target / "x").mkdir()  # a second change in the same directory, same tick or not
        found = scan_git_metadata([root], base=base)
        assert diff_git_metadata(base, found) == [((0, f"d{i % 5}/deep/.git"), "new")], i
        (target / ".git").rmdir()
        (target / "x").rmdir()
        base = scan_git_metadata([root], base=found)
        assert diff_git_metadata(found, base) == [((0, f"d{i % 5}/deep/.git"), "deleted")]


def test_an_entry_missing_below_an_unchanged_directory_means_a_full_walk(root: Path) -> None:
    base = scan_git_metadata([root])
    key = (0, "d1")
    ghost = dataclasses.replace(base.dirs[key], names=(*base.dirs[key].names, "ghost"))
    forged = dataclasses.replace(base, dirs={**base.dirs, key: ghost})
    (root / "d1" / "deep" / ".git").mkdir()  # changes d1/deep, not d1
    found = scan_git_metadata([root], base=forged)
    same(found, scan_git_metadata([root]))
    assert found.reused == 0 and found.listed == len(found.dirs)


def _untrusted(base: GitSnapshot) -> GitSnapshot:
    return dataclasses.replace(base, trusted=False)


def _clock_went_back(base: GitSnapshot) -> GitSnapshot:
    return dataclasses.replace(base, scanned_ns=time.time_ns() + 10**12)


def _clock_stepped_back(base: GitSnapshot) -> GitSnapshot:
    # The wall clock now reads a second less, against the monotonic clock, than at the base.
    return dataclasses.replace(base, clock_offset_ns=base.clock_offset_ns + 10**9)


def _other_roots(base: GitSnapshot) -> GitSnapshot:
    return dataclasses.replace(base, roots=(base.roots[0].parent,))


@pytest.mark.parametrize("spoil", [_untrusted, _clock_went_back, _clock_stepped_back, _other_roots])
def test_an_uncertain_base_means_a_full_walk(
    root: Path, spoil: Callable[[GitSnapshot], GitSnapshot]
) -> None:
    base = spoil(scan_git_metadata([root]))
    found = scan_git_metadata([root], base=base)
    assert found.reused == 0 and found.listed == len(found.dirs)


def test_the_setid_sweep_walks_in_full(root: Path) -> None:
    base = scan_git_metadata([root])
    # As run_shell does: file times come from a coarse clock, a tick behind time.time_ns()
    # (without the slack, a file changed right after `since` could look older: CI failed so).
    since = time.time_ns() - CTIME_SLACK_NS
    tool = root / "d0" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)  # changes the file, not its directory
    found = scan_git_metadata([root], since=since, setid=True, base=base)
    assert found.setid == frozenset({(0, "d0/tool")})
    assert found.reused == 0
