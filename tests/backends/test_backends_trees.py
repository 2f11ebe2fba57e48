"""Emptying what a command wrote: deeper than Python's recursion limit, locked, with links out."""

from __future__ import annotations

import os
from pathlib import Path

from ringfence.backends._trees import empty_directory, remove_tree


def _deep(base: Path, levels: int) -> Path:
    # Made with descriptors: a path this deep is longer than PATH_MAX.
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
            f.write("x")
    finally:
        os.close(fd)
    return base


def test_a_tree_deeper_than_the_recursion_limit_with_locked_dirs_and_links_out_is_removed(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    tree = tmp_path / "upper"
    tree.mkdir()
    _deep(tree, 3000)
    (tree / "locked" / "inner").mkdir(parents=True)
    (tree / "locked" / "inner" / "f").write_text("f")
    os.chmod(tree / "locked" / "inner", 0)
    os.chmod(tree / "locked", 0o500)
    (tree / "link-out").symlink_to(outside)
    (tree / "locked-file").write_text("y")
    os.chmod(tree / "locked-file", 0)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        empty_directory(fd)
    finally:
        os.close(fd)
    assert os.listdir(tree) == []
    assert (outside / "keep.txt").read_text() == "keep\n"  # the link was removed, not followed
    remove_tree(tree)
    assert not tree.exists()
    remove_tree(tree)  # gone already: not an error
