"""The merge walks each directory once: what it must still notice between siblings.

``merge_changes`` keeps the directories it wrote into, so a sibling skips the
walk from the root. These sets change a kept directory's chain mid-merge (a
directory made a git directory) and check
that the merge sees the change exactly as a walk per entry would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.runtime import GitMetadata, InvalidArguments
from ringfence.workspace import Change, CheckpointStore, Workspace
from ringfence.workspace.changes._merge import merge_changes
from ringfence.workspace.changes._model import Image


def test_a_set_that_writes_through_a_link_it_makes_is_refused_whole(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """A change set names physical paths: one that replaces ``a/`` by a link and then
    writes ``a/y.txt`` (through the link) is refused before anything is applied, since the
    tree it would leave is not the one it names."""
    root = tmp_path / "ws"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        x, y, link = store.put(b"x\n"), store.put(b"y\n"), store.put(b"b")
        changes = [
            Change(0, "a/x.txt", None, Image("file", 0o644, x, 2)),  # keeps a/
            Change(0, "a/x.txt", Image("file", 0o644, x, 2), None),
            Change(0, "a", Image("dir", 0o755), None),
            Change(0, "a", None, Image("symlink", 0o777, link, 1)),  # a -> b
            Change(0, "a/y.txt", None, Image("file", 0o644, y, 2)),  # through the new link
        ]
        with pytest.raises(InvalidArguments, match="not a directory after this change set"):
            merge_changes(ws, changes, store, force=True)
        store.close()
    assert (root / "a").is_dir() and not (root / "a").is_symlink()
    assert list((root / "a").iterdir()) == [] and list((root / "b").iterdir()) == []


def test_a_git_directory_assembled_below_a_kept_directory_is_refused(
    tmp_path: Path, ringfence_home: Path
) -> None:
    root = tmp_path / "ws"
    (root / "r").mkdir(parents=True)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        head, f = store.put(b"ref: refs/heads/main\n"), store.put(b"f\n")
        changes = [
            Change(0, "r/one.txt", None, Image("file", 0o644, f, 2)),  # keeps r/
            Change(0, "r/HEAD", None, Image("file", 0o644, head, 21)),
            Change(0, "r/objects", None, Image("dir", 0o755)),
            Change(0, "r/refs", None, Image("dir", 0o755)),  # would complete a git directory
        ]
        with pytest.raises(GitMetadata):
            merge_changes(ws, changes, store, atomic=False)
        store.close()
    assert not (root / "r" / "refs").exists()
