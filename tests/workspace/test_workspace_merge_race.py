"""The merge's write-time git guards: another writer between the check and the write.

The merge judges the tree its set would leave (``check_resulting_tree``) before it
writes anything; then, file by file, it checks again on disk that the write does not
make its directory a git directory. Only a writer that is not the merge can change the
disk in between: another kernel or session merging into the same workspace (two
``serve`` processes, a ``ringfence call`` beside one), whose own set was judged alone.
Here that second writer's move is made, for real, at the moment the merge stores its
first before-image (after the check, before the next write): a timing seam on the
store, the writes themselves are the file system's. The oracle is the real git.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import git_found

from ringfence.runtime import GitMetadata
from ringfence.workspace import Change, CheckpointStore, Workspace
from ringfence.workspace.changes._merge import merge_changes
from ringfence.workspace.changes._model import Image, image_at


class _SecondWriter:
    """The store, with ``move`` made once, when the merge stores its first before-image."""

    def __init__(self, store: CheckpointStore, move: Callable[[], None]) -> None:
        self._store = store
        self._move: Callable[[], None] | None = move
        self.moved = False

    def put(self, data: bytes) -> str:
        if self._move is not None:
            move, self._move = self._move, None
            move()
            self.moved = True
        return self._store.put(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _plant_rest(sub: Path, marker: Path) -> Callable[[], None]:
    """The second writer's part: ``objects``, ``refs`` and a ``config`` whose fsmonitor
    runs a command, each harmless without a ``HEAD`` beside them."""

    def move() -> None:
        (sub / "objects").mkdir()
        (sub / "refs").mkdir()
        (sub / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
            f'\tfsmonitor = "touch {marker} #"\n'
        )

    return move


@pytest.mark.parametrize("head", ["file", "link", "dir", "chain"])
def test_a_write_that_would_complete_a_repository_planted_meanwhile_is_refused(
    tmp_path: Path, ringfence_home: Path, head: str
) -> None:
    """The set replaces ``sub/0.txt`` (the second writer moves when its before-image is
    stored) and then makes ``sub/HEAD`` (``file``; or, for the
    directory guard, ``sub/objects`` once the second writer has made ``HEAD`` and
    ``refs``: ``dir``): judged alone, no repository. The second writer completes the rest
    in between; the merge's write must refuse, and git must find no repository. ``link``:
    ``sub/HEAD`` made as a link to ``refs/heads/main`` (git reads a link's text). ``chain``:
    the set writes a hook into the plain directory ``sub/hooks`` and the second writer
    makes ``sub`` a whole git directory meanwhile; the hook must not land in it."""
    root = tmp_path / "ws"
    sub = root / "sub"
    sub.mkdir(parents=True)
    (sub / "hooks").mkdir()
    # The file whose before-image is stored first: the second writer moves then. For
    # ``chain`` in a directory of its own, so that only the hook's write can refuse.
    trigger = "other/0.txt" if head == "chain" else "sub/0.txt"
    (root / trigger).parent.mkdir(exist_ok=True)
    (root / trigger).write_text("before, unique to this test\n")
    marker = tmp_path / "fsmonitor-ran"
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            before = image_at(fd, trigger, None)  # not stored: the merge stores it
        finally:
            os.close(fd)
        new = b"after\n"
        changes = [Change(0, trigger, before, Image("file", 0o644, store.put(new), len(new)))]
        if head == "file":
            move = _plant_rest(sub, marker)
            data = b"ref: refs/heads/main\n"
            changes.append(Change(0, "sub/HEAD", None, Image("file", 0o644, store.put(data), 21)))
        elif head == "link":
            move = _plant_rest(sub, marker)
            target = b"refs/heads/main"
            image = Image("symlink", 0o777, store.put(target), len(target))
            changes.append(Change(0, "sub/HEAD", None, image))
        elif head == "chain":
            plant = _plant_rest(sub, marker)

            def move() -> None:
                plant()
                (sub / "HEAD").write_text("ref: refs/heads/main\n")

            hook = b"#!/bin/sh\ntouch " + os.fsencode(marker) + b"\n"
            image = Image("file", 0o755, store.put(hook), len(hook))
            changes.append(Change(0, "sub/hooks/pre-commit", None, image))
        else:
            plant = _plant_rest(sub, marker)

            def move() -> None:
                plant()
                os.rmdir(sub / "objects")  # the set makes it: the last piece
                (sub / "HEAD").write_text("ref: refs/heads/main\n")

            changes.append(Change(0, "sub/objects", None, Image("dir", 0o755)))
        blobs = _SecondWriter(store, move)
        assert git_found(sub, tmp_path) is None
        with pytest.raises(GitMetadata):
            merge_changes(ws, changes, blobs, atomic=True)  # type: ignore[arg-type]
        store.close()
    assert blobs.moved, "the second writer never moved: the test judged nothing"
    # Nothing of the refused set stays: the file written before the refusal is rolled back.
    assert (root / trigger).read_text() == "before, unique to this test\n"
    if head in ("file", "link"):
        assert not os.path.lexists(sub / "HEAD")
    elif head == "dir":
        assert not (sub / "objects").exists()
    if head == "chain":  # the second writer's repository is its own; the hook is not in it
        assert git_found(sub, tmp_path) == str(sub)
        assert not (sub / "hooks" / "pre-commit").exists()
    else:
        assert git_found(sub, tmp_path) is None, os.listdir(sub)
    assert not marker.exists()
