"""Attacks on "git metadata is never written" with one workspace root inside another.

A session may be given ``--workspace /p --workspace /p/sub``. The resulting-tree check
(``changes/_resulting.py``) reads the tree a write leaves through a view keyed by place;
each test performs its attack through the command line (in-process ``main``) and asks the
real git, as the person's next ``git status`` would, what it finds afterwards.
"""

from __future__ import annotations

import json
import shutil
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
