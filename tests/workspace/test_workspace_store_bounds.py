"""The checkpoint store's bounds and its journal on a full disk, through the CLI and the API.

A file tool's write keeps the before-image of the file it replaces: the store's limit
(``RINGFENCE_CHECKPOINTS_MIB``) bounds that set as it bounds a shell command's. The journal's
``E`` line is written on a disk that may have filled since its ``B`` line: the operation's
answer stays true (a named ``unavailable``, or done and recorded as done).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)


def _store_bytes(home: Path) -> int:
    """The bytes the checkpoint stores hold on disk (blocks, so a sparse copy counts too)."""
    total = 0
    for path in (home / "checkpoints").rglob("*"):
        st = path.lstat()
        if path.is_file() and not path.is_symlink():
            total += st.st_blocks * 512
    return total


def test_a_write_over_a_file_larger_than_the_store_keeps_is_refused(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``write_file`` over a 64 MiB (sparse) file with a 1 MiB store: before, all 64 MiB were
    copied into the store as the set's before-image (a sparse file of terabytes filled the
    disk with its holes). Now it is refused as a shell command's set is, naming the limit,
    before a byte is stored, and the file keeps its bytes."""
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_MIB", "1")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "small").write_text("s\n")
    with open(root / "big", "wb") as f:
        f.write(b"head")
        f.truncate(64 << 20)
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "big", "content": "x"}), *args)  # fmt: skip
    assert code != 0 and out["error"]["code"] == "unavailable", out
    message = out["error"]["message"]
    assert "RINGFENCE_CHECKPOINTS_MIB" in message and "big" in message, message
    assert (root / "big").stat().st_size == 64 << 20
    with open(root / "big", "rb") as f:
        assert f.read(4) == b"head"
    assert _store_bytes(ringfence_home) < 256 * 1024
    code, listed = cli_json(capsys, "checkpoints", "list", "--workspace", str(root))
    assert code == 0 and listed["result"] == [], listed
    # Within the limit the same write is made, and undone.
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "small", "content": "t\n"}), *args)  # fmt: skip
    assert code == 0, out
    code, out = cli_json(capsys, "undo", out["result"]["checkpoint"], *args)
    assert code == 0, out
    assert (root / "small").read_text() == "s\n"
    assert not os.path.exists(root / "x")
