"""Attacks on "git metadata is never written" with one workspace root inside another.

A session may be given ``--workspace /p --workspace /p/sub``. The resulting-tree check
(``changes/_resulting.py``) reads the tree a write leaves through a view keyed by place;
each test performs its attack through the command line (in-process ``main``) and asks the
real git, as the person's next ``git status`` would, what it finds afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state, git_found

from ringfence.cli._main import main

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _cli(capsys: pytest.CaptureFixture[str], roots: list[Path], *words: str) -> dict[str, Any]:
    workspace = [w for root in roots for w in ("--workspace", str(root))]
    main([*words, *workspace, "--approve", "no", "--json", "--posture", "allow-reversible"])
    return json.loads(capsys.readouterr().out)


@needs_git
def test_a_directory_made_below_an_inner_root_cannot_complete_a_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``x/objects -> ../sub/inner/o`` (dangling: ``x`` no repository for git) lay in the
    workspace (a command could lay it before links named ``objects`` counted). A session on ``ws`` and ``ws/sub/inner`` then had
    ``write_file sub/inner/o/f`` make ``o``: the check read ``ws/sub/inner/o`` as the inner
    root's, while the write named it the outer root's, so it judged ``o`` still missing,
    and ``x`` (its ``HEAD``, ``refs/`` and ``config`` the agent's) became a repository
    whose ``core.fsmonitor`` the person's ``git status`` ran."""
    ws = tmp_path / "ws"
    inner = ws / "sub" / "inner"
    inner.mkdir(parents=True)
    config = '[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch PWNED; false"\n'
    # Laid by hand (a version before links named objects counted whatever they lead to let
    # a command lay it: test_a_repository_waiting_for_a_session_on_other_roots_is_refused).
    (ws / "x" / "refs").mkdir(parents=True)
    (ws / "x" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "x" / "objects").symlink_to("../sub/inner/o")
    (ws / "x" / "config").write_text(config)
    assert git_found(ws / "x", tmp_path) is None  # objects leads nowhere yet
    before = exact_state(ws)

    for path in ("sub/inner/o/f", str(inner / "o" / "f")):  # relative, and absolute
        out = _cli(capsys, [ws, inner], "call", "write_file", "--args",
                   json.dumps({"path": path, "content": "x"}))  # fmt: skip
        assert not out["ok"] and out["error"]["code"] == "git_metadata", out
        assert exact_state(ws) == before
        assert git_found(ws / "x", tmp_path) is None
    # The outer root alone judged the same write the same way all along.
    out = _cli(capsys, [ws], "call", "write_file", "--args",
               json.dumps({"path": "sub/inner/o/f", "content": "x"}))  # fmt: skip
    assert not out["ok"] and out["error"]["code"] == "git_metadata", out
    assert exact_state(ws) == before


def _can_bind_mount(tmp_path: Path) -> bool:
    (tmp_path / "probe-a").mkdir()
    (tmp_path / "probe-b").mkdir()
    done = subprocess.run(["mount", "--bind", tmp_path / "probe-a", tmp_path / "probe-b"],
                          capture_output=True, check=False)  # fmt: skip
    if done.returncode == 0:
        subprocess.run(["umount", tmp_path / "probe-b"], check=True)
    return done.returncode == 0


@needs_git
def test_a_second_root_bind_mounted_from_inside_the_first_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same attack with the inner root under another spelling: ``alias`` a bind mount of
    ``ws/sub``. ``write_file <alias>/o/f`` made ``ws/sub/o``, which the check, reading
    places by path, never saw, and ``x`` became a repository. A session on such roots is
    refused before anything opens; the control: a bind mount of a directory outside ``ws``
    is a root like any other."""
    if os.geteuid() != 0 or not _can_bind_mount(tmp_path):
        pytest.skip("bind mounts need root here")
    ws, alias, elsewhere = tmp_path / "ws", tmp_path / "alias", tmp_path / "elsewhere"
    for d in (ws / "sub", alias, elsewhere):
        d.mkdir(parents=True)
    (ws / "x" / "refs").mkdir(parents=True)  # laid by hand, as above
    (ws / "x" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "x" / "objects").symlink_to("../sub/o")
    before = exact_state(ws)
    attack = json.dumps({"path": str(alias / "o" / "f"), "content": "x"})
    mounted: list[Path] = []
    try:
        subprocess.run(["mount", "--bind", ws / "sub", alias], check=True)
        mounted.append(alias)
        code = main(["call", "write_file", "--args", attack, "--workspace", str(ws),
                     "--workspace", str(alias), "--posture", "allow-reversible",
                     "--approve", "no"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and "bind mount of a directory inside it" in err, err
        assert exact_state(ws) == before
        assert git_found(ws / "x", tmp_path) is None
        subprocess.run(["umount", mounted.pop()], check=True)
        # The control: another directory mounted there is a root like any other.
        subprocess.run(["mount", "--bind", elsewhere, alias], check=True)
        mounted.append(alias)
        out = _cli(capsys, [ws, alias], "call", "write_file", "--args", attack)
        assert out["ok"], out
        assert (elsewhere / "o" / "f").read_text() == "x"
        assert exact_state(ws) == before
    finally:
        for target in mounted:
            subprocess.run(["umount", target], check=False)


@needs_bwrap
@needs_git
def test_a_repository_waiting_for_a_session_on_other_roots_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session on ``ws`` laid ``x`` (``HEAD``, ``refs/``, ``config``) with ``objects ->
    ../sub/o`` dangling: no repository yet, merged. A later session on ``ws/sub`` alone
    made ``o`` (``write_file o/f``): its check sees only its own root, and ``x`` became a
    repository. Nothing a later writer does to ``sub`` is judged against ``x``, so ``x`` is
    judged a git directory when laid: a link named ``objects`` or ``refs`` counts whatever
    it leads to (its target can change without ``x`` changing)."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    config = '[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch PWNED; false"\n'
    head = "printf 'ref: refs/heads/main\\n' > x/HEAD"
    plant = f"mkdir -p x/refs && {head} && ln -s ../sub/o x/objects && printf '{config}' > x/config"
    before = exact_state(ws)
    out = _cli(capsys, [ws], "call", "run_shell", "--args", json.dumps({"command": plant}))
    assert not out["ok"] and out["error"]["code"] == "git_metadata", out
    assert exact_state(ws) == before
    # In two steps, the HEAD last (by a command, as a link, and by write_file): the same.
    step1 = f"mkdir -p x/refs && ln -s ../sub/o x/objects && printf '{config}' > x/config"
    out = _cli(capsys, [ws], "call", "run_shell", "--args", json.dumps({"command": step1}))
    assert out["ok"] and out["result"]["changes"]["refused"] == [], out
    laid = exact_state(ws)
    for command in (head, "ln -s refs/heads/main x/HEAD"):
        out = _cli(capsys, [ws], "call", "run_shell", "--args", json.dumps({"command": command}))
        assert not out["ok"] and out["error"]["code"] == "git_metadata", out
        assert exact_state(ws) == laid
    out = _cli(capsys, [ws], "call", "write_file", "--args",
               json.dumps({"path": "x/HEAD", "content": "ref: refs/heads/main\n"}))  # fmt: skip
    assert not out["ok"] and out["error"]["code"] == "git_metadata", out
    assert exact_state(ws) == laid
    # The later session on ws/sub: o made, and still no repository at x.
    out = _cli(capsys, [ws / "sub"], "call", "write_file", "--args",
               json.dumps({"path": "o/f", "content": "x"}))  # fmt: skip
    assert out["ok"], out
    assert git_found(ws / "x", tmp_path) is None


@needs_bwrap
@needs_git
def test_a_head_with_a_second_name_counts_as_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same wait through ``HEAD``'s bytes: a command writing the roots itself (approved
    ``--no-change-sets``) made ``x/objects/``, ``x/refs/`` and ``x/HEAD`` a hard link of
    ``sub/h`` (``hello``: no repository, accepted). A later session on ``ws/sub`` rewrites
    ``h`` in place and ``x`` is a repository. A ``HEAD`` with another name counts as valid,
    and so does an ``objects`` file with another name (its mode is that name's too)."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    config = '[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch PWNED; false"\n'
    command = (
        "mkdir -p x/objects x/refs && echo hello > sub/h && ln sub/h x/HEAD && "
        f"printf '{config}' > x/config"
    )
    main(["call", "run_shell", "--args", json.dumps({"command": command}), "--workspace",
          str(ws), "--no-change-sets", "--approve", "yes", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and out["error"]["code"] == "git_metadata", out
    assert not (ws / "x").exists()  # quarantined
    (ws / "sub" / "h").write_text("ref: refs/heads/main\n")  # the later session, in place
    assert git_found(ws / "x", tmp_path) is None
    # objects a hard link of a file without x: its mode changes through the other name.
    command = (
        "mkdir -p x/refs && printf 'ref: refs/heads/main\\n' > x/HEAD && touch sub/o && "
        f"ln sub/o x/objects && printf '{config}' > x/config"
    )
    main(["call", "run_shell", "--args", json.dumps({"command": command}), "--workspace",
          str(ws), "--no-change-sets", "--approve", "yes", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and out["error"]["code"] == "git_metadata", out
    assert not (ws / "x").exists()
    (ws / "sub" / "o").chmod(0o755)
    assert git_found(ws / "x", tmp_path) is None


@needs_bwrap
@needs_git
@pytest.mark.parametrize("where", ["sub/new", "sub"])
def test_a_repository_under_a_root_inside_another_is_undone_and_reported_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """``--no-change-sets`` with ``ws`` and ``ws/sub`` as roots: the scan lists what is below
    ``sub`` under both roots' names. A repository a command made there (``sub/new/.git``,
    or ``sub`` itself) was moved out under the first name and then reported again under the
    second, ``failed: No such file or directory``: a refusal that said the undo failed.
    Now each place is reported once, as what was done, and git finds no repository."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    config = '[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch PWNED; false"\n'
    git_dir = f"{where}/.git" if where != "sub" else "sub"
    command = (
        f"mkdir -p {git_dir}/objects {git_dir}/refs && "
        f"printf 'ref: refs/heads/main\\n' > {git_dir}/HEAD && printf '{config}' > {git_dir}/config"
    )
    main(["call", "run_shell", "--args", json.dumps({"command": command}),
          "--workspace", str(ws), "--workspace", str(ws / "sub"), "--no-change-sets",
          "--approve", "yes", "--json", "--posture", "allow-reversible"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and out["error"]["code"] == "git_metadata", out
    paths = [p["path"] for p in out["error"]["details"]["paths"]]
    assert len(paths) == len(set(paths)), paths
    assert not any(p["action"].startswith("failed") for p in out["error"]["details"]["paths"])
    assert git_found(ws / where, tmp_path) is None
    assert not (ws / where / "PWNED").exists()
