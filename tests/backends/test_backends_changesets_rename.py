"""Change sets on the confined ``local`` backend, merged by rename: what the fast path keeps.

A command's new files are renamed from its overlay upper directory into the
workspace while the checkpoint store keeps its own copy of their bytes (one
pack per command). These tests drive real commands through the CLI and check
that the renamed inode is shared with nothing (not the store, not another
workspace path), carries nothing of the upper's (extended attributes), and
that the stored after-images stay intact when the workspace file is then
edited in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)

from ringfence.workspace import CheckpointStore, Workspace

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

ARGS = ("--posture", "allow-reversible", "--approve", "no")


def run(capsys: pytest.CaptureFixture[str], ws: Path, command: str) -> dict[str, Any]:
    code, out = cli_json(
        capsys,
        "call",
        "run_shell",
        "--args",
        json.dumps({"command": command}),
        "--workspace",
        str(ws),
        *ARGS,
    )
    assert code == 0, out
    changes: dict[str, Any] = out["result"]["changes"]
    assert changes["refused"] == [] and changes["id"], changes
    return changes


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def stored_after(ws: Path, set_id: str, path: str) -> bytes:
    with Workspace([ws]) as workspace:
        store = CheckpointStore(workspace)
        try:
            (change,) = [c for c in store.load(set_id).changes if c.path == path]
            assert change.after is not None and change.after.digest is not None
            return store.get(change.after.digest)
        finally:
            store.close()


def test_an_in_place_edit_of_a_merged_file_never_changes_its_stored_after_image(
    ws: Path, capsys: pytest.CaptureFixture[str], ringfence_home: Path
) -> None:
    changes = run(capsys, ws, "printf 'first\\n' > f.txt && mkdir d && printf 'deep\\n' > d/g.txt")
    for name in ("f.txt", "d/g.txt"):
        assert (ws / name).stat().st_nlink == 1  # no other name: not the store's, not the upper's
    store_inodes = {p.stat().st_ino for p in ringfence_home.rglob("*") if p.is_file()}
    assert (ws / "f.txt").stat().st_ino not in store_inodes
    with open(ws / "f.txt", "r+b") as f:  # in place: the same inode, as an editor might
        f.write(b"EDITED")
    assert stored_after(ws, changes["id"], "f.txt") == b"first\n"
    assert stored_after(ws, changes["id"], "d/g.txt") == b"deep\n"
    code, shown = cli_json(capsys, "checkpoints", "show", changes["id"], "--workspace", str(ws))
    assert code == 0 and "+first" in json.dumps(shown), shown


def test_hard_links_made_by_a_command_become_separate_files(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, ws, "printf 'shared\\n' > a.txt && ln a.txt b.txt")
    a, b = (ws / "a.txt").stat(), (ws / "b.txt").stat()
    assert a.st_ino != b.st_ino and a.st_nlink == b.st_nlink == 1
    (ws / "a.txt").write_bytes(b"changed\n")  # the other name must not see it
    assert (ws / "b.txt").read_bytes() == b"shared\n"


def test_extended_attributes_of_the_upper_are_not_merged(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = "import os; open('x.txt', 'w').write('x'); os.setxattr('x.txt', 'user.planted', b'1')"
    run(capsys, ws, f'python3 -c "{script}"')
    assert (ws / "x.txt").read_text() == "x"
    assert os.listxattr(ws / "x.txt", follow_symlinks=False) == []


def test_a_hundred_new_files_cost_the_store_one_pack_not_a_hundred_blobs(
    ws: Path, capsys: pytest.CaptureFixture[str], ringfence_home: Path
) -> None:
    changes = run(capsys, ws, "for i in $(seq 100); do echo $i > f$i; done")
    assert changes["files"] == 100
    (store,) = ringfence_home.glob("checkpoints/*")
    assert [p.suffix for p in sorted((store / "packs").iterdir())] == [".idx", ".pack"]
    assert not any((store / "blobs").iterdir())
    for i in (1, 50, 100):
        data = (ws / f"f{i}").read_bytes()
        assert data == f"{i}\n".encode()
        assert stored_after(ws, changes["id"], f"f{i}") == data
        assert hashlib.sha256(data).hexdigest()  # the stored image is checked on read
