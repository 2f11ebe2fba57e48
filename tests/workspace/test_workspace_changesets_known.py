"""A shell command's merge reuses what its capture read, and only while it still holds.

The capture hashes every before-image it stores; the merge's conflict check
then takes a file's image from the capture while the file's identity
(device, inode, size, mtime, ctime) is the one the capture saw, and reads it
again otherwise. A file changed between the two is still a conflict. The
replaced files' last descriptors are closed off the merge's path, none left open.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ringfence.runtime import ToolError
from ringfence.workspace import Change, CheckpointStore, Workspace
from ringfence.workspace.changes._merge import MergeReport, merge_changes
from ringfence.workspace.changes._model import Image
from ringfence.workspace.changes._upper import UpperFiles, changes_from_upper

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@pytest.fixture
def layers(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A workspace root (the lower layer) and an upper directory that replaces its files."""
    lower, upper = tmp_path / "ws", tmp_path / "upper"
    lower.mkdir()
    upper.mkdir()
    for i in range(100):
        (lower / f"f{i}.txt").write_text(f"old {i:03}\n")
        (upper / f"f{i}.txt").write_text(f"new {i:03}\n")
    yield lower, upper


@contextmanager
def captured(
    lower: Path, upper: Path
) -> Iterator[tuple[Workspace, CheckpointStore, list[Change], UpperFiles]]:
    """What ``run_shell``'s capture does: read, pack, note the renamable files and identities;
    then the workspace, its store, the changes and the sources a merge takes."""
    with Workspace([lower]) as ws:
        store = CheckpointStore(ws)
        upper_fd, lower_fd = os.open(upper, _DIR), os.open(lower, _DIR)
        try:
            pack = store.pack()
            sources: dict = {}
            trees: dict = {}
            known: dict = {}
            changes = changes_from_upper(
                upper_fd, lower_fd, 0, store, pack=pack, sources=sources, trees=trees, known=known
            )
            pack.commit()
            yield ws, store, changes, UpperFiles({0: (upper_fd, sources, trees)}, known)
        finally:
            os.close(upper_fd)
            os.close(lower_fd)
            store.close()


def merge(
    ws: Workspace, store: CheckpointStore, changes: list[Change], sources: UpperFiles
) -> MergeReport:
    return merge_changes(ws, changes, store, atomic=False, durable=False, sources=sources)


def test_the_capture_hands_the_merge_every_before_image_it_hashed(
    layers: tuple[Path, Path], ringfence_home: Path
) -> None:
    with captured(*layers) as (ws, store, changes, sources):
        assert len(sources.known) == 100
        # While the identity holds the merge takes the capture's image, both to judge the
        # conflict and as the image it found. A stand-in under a real identity shows it:
        # read again, the file would not match the stand-in and be a conflict.
        key = (0, "f7.txt")
        identity, image = sources.known[key]
        stand_in = Image("file", image.mode, store.put(b"stand-in\n"), 9)
        sources.known[key] = (identity, stand_in)
        i = next(i for i, c in enumerate(changes) if c.path == "f7.txt")
        changes[i] = changes[i]._replace(before=stand_in)
        report = merge(ws, store, changes, sources)
    found = {c.path: c.before for c in report.applied}
    assert found["f7.txt"] == stand_in
    assert found["f8.txt"] == next(c.before for c in changes if c.path == "f8.txt")
    assert (layers[0] / "f7.txt").read_text() == "new 007\n"


def test_a_file_changed_between_capture_and_merge_is_a_conflict(
    layers: tuple[Path, Path], ringfence_home: Path
) -> None:
    lower, upper = layers
    with captured(lower, upper) as (ws, store, changes, sources):
        # Another program rewrites one file in place: same inode, same size.
        with open(lower / "f42.txt", "r+b") as f:
            f.write(b"OLD")
        with pytest.raises(ToolError) as caught:
            merge(ws, store, changes, sources)
    assert caught.value.details["conflicts"] == ["f42.txt"]
    assert (lower / "f42.txt").read_text() == "OLD 042\n"  # its write is kept
    assert (lower / "f1.txt").read_text() == "old 001\n"  # and nothing was merged
    assert (upper / "f1.txt").read_text() == "new 001\n"


def _open_inodes() -> set[tuple[int, int]]:
    """The (device, inode) of every file this process holds open."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor among them)
        held.add((st.st_dev, st.st_ino))
    return held


def test_no_replaced_file_s_descriptor_stays_open_after_a_merge(
    layers: tuple[Path, Path], ringfence_home: Path
) -> None:
    """100 replaced files: more than one batch of descriptors handed to the closer, and a
    last partial batch the merge's end hands over. The replaced inodes are freed."""
    lower, upper = layers
    replaced = {(st.st_dev, st.st_ino) for st in (p.stat() for p in lower.iterdir())}
    with captured(lower, upper) as (ws, store, changes, sources):
        merge(ws, store, changes, sources)
    deadline = time.monotonic() + 10
    while (left := _open_inodes() & replaced) and time.monotonic() < deadline:
        time.sleep(0.01)  # the closer thread works off its queue
    assert not left, f"{len(left)} replaced files are still held open after the merge"
    assert (lower / "f99.txt").read_text() == "new 099\n"


def _open_descriptors() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_a_new_tree_s_read_closes_its_own_descriptors_and_no_other(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """The read closes a new directory's files together (one ``close_range`` for a run of
    numbers): a descriptor someone else holds between them stays open, none of its own is
    left. Holes below make the read's numbers interleave with the foreign ones."""
    lower, upper = tmp_path / "ws", tmp_path / "upper"
    lower.mkdir()
    (upper / "new" / "lib").mkdir(parents=True)
    for i in range(300):  # past one batch of descriptors
        (upper / "new" / "lib" / f"m{i}.js").write_text(f"{i}\n")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]
    foreign = held[1::2]  # every other one stays open: the read fills the holes between
    for fd in held[::2]:
        os.close(fd)
    try:
        before = _open_descriptors()
        with captured(lower, upper) as (_, _, changes, _):
            assert len(changes) == 302
        assert _open_descriptors() == before
        for fd in foreign:
            os.fstat(fd)  # still open
    finally:
        for fd in foreign:
            os.close(fd)


def test_an_unfit_new_directory_s_files_can_still_be_renamed_one_by_one(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """A new directory fit to move whole is a tree (its files need no rename of their own);
    one that is not (a FIFO in it) names each of its files for the merge to rename."""
    lower, upper = tmp_path / "ws", tmp_path / "upper"
    lower.mkdir()
    (upper / "fit").mkdir(parents=True)
    (upper / "unfit").mkdir()
    for name in ("fit", "unfit"):
        for i in range(3):
            (upper / name / f"f{i}").write_text(f"{name} {i}\n")
    os.mkfifo(upper / "unfit" / "pipe")
    with captured(lower, upper) as (_, _, _, files):
        assert files.tree(Change(0, "fit", None, Image("dir", 0o755))) is not None
        assert files.tree(Change(0, "unfit", None, Image("dir", 0o755))) is None
        for i in range(3):
            after = Image("file", 0o644, None, len(f"unfit {i}\n"))
            taken = files.take(Change(0, f"unfit/f{i}", None, after), after)
            assert taken is not None
            os.close(taken[2])
