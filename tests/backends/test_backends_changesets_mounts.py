"""Where the local backend's overlay directories go: on the workspace's mount, so merges rename.

A command's new files and trees reach the workspace by ``rename`` from the
overlay's upper directory, which works only within one mount. These tests
put the workspace on a real tmpfs of its own (root only: they mount it) with
``$RINGFENCE_HOME`` elsewhere, and check that the upper directory follows the
workspace (the system's temporary directory on that tmpfs is chosen over the
spool), that ``$RINGFENCE_LAYERS_DIR`` overrides the choice (on another mount
the merge copies, correctly, and a ``notice`` event says why and what to
set), and that a layers directory inside the workspace is refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_backends_changesets_trees import PACKAGE, run_and_merge

from ringfence.backends import SessionSpec
from ringfence.backends._mounts import mount_of
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.runtime import InvalidArguments, use_places

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of the test's own, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the workspace needs root")
    point = tmp_path / "mnt"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


async def _run_package(workspace: Path, spool: Path) -> tuple[Path, bool, list[str]]:
    """PACKAGE merged: (its upper directory, whether the tree left it whole, the notices)."""
    merged = await run_and_merge(workspace, PACKAGE, spool)
    changes = merged.out["changes"]
    assert changes["files"] == 10 and changes["refused"] == [], changes
    assert (workspace / "pkg" / "lib" / "index.js").read_text() == "module.exports = 1;\n"
    (upper,) = merged.result.uppers
    notices = [data["message"] for kind, data in merged.ctx.events if kind == "notice"]
    return upper.path, "pkg" not in merged.left_in_upper, notices


async def test_the_upper_follows_the_workspace_onto_its_mount(
    tmpfs: Path, ringfence_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, temp = tmpfs / "ws", tmpfs / "tmp"
    workspace.mkdir()
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    spool = ringfence_home / "spool"
    assert mount_of(spool) != mount_of(workspace)  # the spool would make every merge a copy
    upper, moved, notices = await _run_package(workspace, spool)
    assert upper.is_relative_to(temp), upper
    assert moved  # renamed whole, as on one mount
    assert notices == []
    assert not list(spool.rglob("ringfence-layers-*"))  # nothing was made there


async def test_a_layers_dir_on_another_mount_is_used_and_the_copy_is_said(
    tmpfs: Path, tmp_path: Path, ringfence_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, layers = tmpfs / "ws", tmp_path / "layers"
    workspace.mkdir()
    assert mount_of(tmp_path) != mount_of(workspace)
    with use_places(layers_dir=layers):
        upper, moved, notices = await _run_package(workspace, ringfence_home / "spool")
    assert upper.is_relative_to(layers), upper
    assert not moved  # copied entry by entry: a rename cannot cross mounts
    (notice,) = notices
    assert "copied" in notice and "RINGFENCE_LAYERS_DIR" in notice, notice


@pytest.mark.parametrize("where", ["inside", "relative", "a file"])
async def test_a_layers_dir_inside_the_workspace_relative_or_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "a-file").write_text("not a directory\n")
    given = {
        "inside": str(workspace / "layers"),
        "relative": "layers",
        "a file": str(tmp_path / "a-file"),
    }[where]
    monkeypatch.chdir(tmp_path)
    with use_places(layers_dir=given), pytest.raises(InvalidArguments) as info:
        await start_local(SessionSpec(roots=(workspace,), change_sets=True))  # before anything
    assert info.value.field == "layers_dir" and given in info.value.message
    assert "RINGFENCE_LAYERS_DIR" in info.value.message  # the command line's name for it
    assert list(workspace.iterdir()) == []
    assert not (tmp_path / "layers").exists()
