"""Attacks on "every change is undoable, and a crash never leaves a workspace mixed".

Each test performs its attack through the command line (in-process ``main``, or
a real ``python -m ringfence`` killed with SIGKILL at a chosen system call by
``strace --inject``) and asserts the promise and that nothing else changed on
disk: the tree byte for byte with modes (:func:`tree_helpers.exact_state`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state

from ringfence.cli._main import main


def _cli(capsys: pytest.CaptureFixture[str], root: Path, *words: str) -> dict[str, Any]:
    main([*words, "--workspace", str(root), "--approve", "no", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    return json.loads(capsys.readouterr().out)


def test_undo_refuses_to_overwrite_a_mode_changed_after_the_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The person's ``chmod`` after the change set is theirs: ``undo`` names it a conflict
    instead of putting the old mode (and bytes) back over it."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    (root / "f").chmod(0o644)
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "f", "content": "new\n"}))  # fmt: skip
    assert out["ok"], out
    (root / "f").chmod(0o600)  # the person's change, after the set
    mine = exact_state(root)
    out = _cli(capsys, root, "undo")
    assert not out["ok"] and out["error"]["details"]["conflicts"] == ["f"], out
    assert exact_state(root) == mine
    # A directory the set made, its mode changed since: the same.
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "d/g", "content": "x"}))  # fmt: skip
    assert out["ok"], out
    (root / "d").chmod(0o700)
    (root / "d" / "g").unlink()
    (root / "d" / "g").write_text("x")  # the same bytes again, by someone else: not a conflict
    (root / "d" / "g").chmod(0o644)
    mine = exact_state(root)
    out = _cli(capsys, root, "undo")
    assert not out["ok"] and out["error"]["details"]["conflicts"] == ["d"], out
    assert exact_state(root) == mine
