"""ringfence's own git calls run no program a repository names; worktree sessions and verbs.

The hostile repository's config names a marker program for hooks (the
default directory and ``core.hooksPath``), ``core.fsmonitor``,
``core.pager``, ``core.sshCommand``, ``core.editor``, ``diff.external``,
a filter driver (clean, smudge) and a diff driver (command, textconv)
that ``.gitattributes`` applies to every file. Plain ``git`` runs the
marker (the control); :func:`ringfence._git.run_git` and the ``worktree``
verbs never do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import (
    cli_json as cli,
    isolated,  # noqa: F401  (autouse fixture)
)

from ringfence._git import git_diff, run_git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo.parent)}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env)


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose config and attributes would run ``marker`` for each program."""
    repo = tmp_path / "repo"
    repo.mkdir()
    marker_log = tmp_path / "ran.log"
    marker = tmp_path / "marker"
    marker.write_text(f'#!/bin/sh\necho "ran $0 $*" >> {marker_log}\ncat\n')
    marker.chmod(0o755)
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("* filter=m diff=m\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("post-checkout", "pre-commit", "reference-transaction", "post-index-change"):
        for where in (hooks, repo / ".git" / "hooks"):
            (where / name).write_text(f"#!/bin/sh\necho hook {name} >> {marker_log}\n")
            (where / name).chmod(0o755)
    for key, value in (
        ("core.hooksPath", str(hooks)),
        ("core.fsmonitor", str(marker)),
        ("core.pager", str(marker)),
        ("core.sshCommand", str(marker)),
        ("core.editor", str(marker)),
        ("diff.external", str(marker)),
        ("filter.m.clean", str(marker)),
        ("filter.m.smudge", str(marker)),
        ("diff.m.command", str(marker)),
        ("diff.m.textconv", str(marker)),
    ):
        assert git(repo, "config", key, value).returncode == 0
    marker_log.unlink(missing_ok=True)
    return repo, marker_log


def test_plain_git_runs_the_markers(hostile: tuple[Path, Path]) -> None:
    """The control: the repository really is hostile to an unguarded git."""
    repo, ran = hostile
    (repo / "a.txt").write_text("two\n")
    git(repo, "status")
    git(repo, "diff")
    git(repo, "worktree", "add", "-q", str(repo.parent / "wt-plain"))
    text = ran.read_text()
    for what in ("hook post-checkout", "ran "):
        assert what in text


def test_run_git_runs_no_configured_program(hostile: tuple[Path, Path]) -> None:
    repo, ran = hostile
    (repo / "a.txt").write_text("two\n")
    assert run_git(["status", "--porcelain"], cwd=repo).code == 0
    diff = git_diff([], cwd=repo)
    assert diff.code == 0 and b"+two" in diff.stdout
    assert run_git(["-p", "log", "-1"], cwd=repo).code == 0  # -p: the pager, if any
    wt = repo.parent / "wt-guarded"
    result = run_git(["worktree", "add", "-q", str(wt)], cwd=repo)
    assert result.code == 0, result.stderr
    assert (wt / "a.txt").read_text() == "one\n"  # checked out without the smudge filter
    assert run_git(["worktree", "remove", str(wt)], cwd=repo).code == 0
    assert not ran.exists(), ran.read_text()


def test_worktree_session_list_diff_remove(
    capsys: pytest.CaptureFixture[str], hostile: tuple[Path, Path]
) -> None:
    repo, ran = hostile
    for path, content in (("a.txt", "agent\n"), ("new.txt", "n\n")):
        code, body = cli(
            capsys,
            "call",
            "write_file",
            "--workspace",
            str(repo),
            "--worktree",
            "feat",
            "--posture",
            "allow-reversible",
            "--args",
            json.dumps({"path": path, "content": content}),
        )
        assert code == 0, body
        assert (repo / "a.txt").read_text() == "one\n"  # the person's checkout is untouched

    code, body = cli(capsys, "worktree", "list", "--workspace", str(repo))
    assert code == 0
    assert [(w["name"], w["branch"]) for w in body["result"]] == [("feat", "ringfence/feat")]
    path = Path(body["result"][0]["path"])
    assert (path / "a.txt").read_text() == "agent\n"
    assert repo not in path.parents  # outside the workspace

    code, body = cli(capsys, "worktree", "diff", "feat", "--workspace", str(repo))
    assert code == 0
    assert "-one\n+agent\n" in body["result"]["diff"]
    assert body["result"]["untracked"] == ["new.txt"]

    code, body = cli(capsys, "worktree", "remove", "feat", "--workspace", str(repo))
    assert code != 0 and "--force" in body["error"]["message"]  # changes are not dropped silently
    assert path.exists()
    code, body = cli(capsys, "worktree", "remove", "feat", "--force", "--workspace", str(repo))
    assert code == 0, body
    assert not path.exists()
    code, body = cli(capsys, "worktree", "list", "--workspace", str(repo))
    assert body["result"] == []
    assert not ran.exists(), ran.read_text()  # no hook, filter or program ran


def test_worktree_names_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, body = cli(capsys, "worktree", "diff", "../x", "--workspace", str(tmp_path))
    assert code == 2 and body["error"]["field"] == "worktree"


def test_the_git_ringfence_runs_is_never_one_in_the_repository(
    hostile: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An activated project venv puts ``<repo>/.venv/bin`` first on PATH: the agent's own
    ``git`` there ran on the host at ringfence's next worktree verb. It is passed over now,
    and so is the directory in the git child's PATH."""
    repo, ran = hostile
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    planted = bin_dir / "git"
    planted.write_text(f'#!/bin/sh\necho planted >> {ran}\nexec {shutil.which("git")} "$@"\n')
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert run_git(["status", "--porcelain"], cwd=repo).code == 0
    assert not ran.exists(), ran.read_text()
