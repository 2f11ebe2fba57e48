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


@needs_bwrap
@needs_git
def test_a_directory_made_below_an_inner_root_cannot_complete_a_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``x/objects -> ../sub/inner/o`` (dangling: ``x`` no repository) was laid by one
    session's confined command. A session on ``ws`` and ``ws/sub/inner`` then had
    ``write_file sub/inner/o/f`` make ``o``: the check read ``ws/sub/inner/o`` as the inner
    root's, while the write named it the outer root's, so it judged ``o`` still missing,
    and ``x`` (its ``HEAD``, ``refs/`` and ``config`` the agent's) became a repository
    whose ``core.fsmonitor`` the person's ``git status`` ran."""
    ws = tmp_path / "ws"
    inner = ws / "sub" / "inner"
    inner.mkdir(parents=True)
    config = '[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch PWNED; false"\n'
    command = (
        "mkdir -p x/refs && printf 'ref: refs/heads/main\\n' > x/HEAD && "
        f"ln -s ../sub/inner/o x/objects && printf '{config}' > x/config"
    )
    out = _cli(capsys, [ws], "call", "run_shell", "--args", json.dumps({"command": command}))
    assert out["ok"] and out["result"]["changes"]["refused"] == [], out
    assert git_found(ws / "x", tmp_path) is None  # objects leads nowhere yet
    before = exact_state(ws)

    for path in ("sub/inner/o/f", str(inner / "o" / "f")):  # relative, and absolute
        out = _cli(capsys, [ws, inner], "call", "write_file", "--args",
                   json.dumps({"path": path, "content": "x"}))  # fmt: skip
        assert not out["ok"] and out["error"]["code"] == "git_metadata", out
        assert "bare repository" in out["error"]["message"], out
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


@needs_bwrap
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
    command = (
        "mkdir -p x/refs && printf 'ref: refs/heads/main\\n' > x/HEAD && ln -s ../sub/o x/objects"
    )
    out = _cli(capsys, [ws], "call", "run_shell", "--args", json.dumps({"command": command}))
    assert out["ok"] and out["result"]["changes"]["refused"] == [], out
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
