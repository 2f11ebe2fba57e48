"""Small reads and listings run on the trio thread; large ones, searches and writes hop.

The hop is observed by a spy around ``trio.to_thread.run_sync`` (it still runs
the real worker). The inline path is checked for the same confinement as the
worker path: a link out of the root, ``..`` and a FIFO are refused alike, and
nothing outside is read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from workspace_helpers import SECRET, Tree

from ringfence.runtime import HeadlessDenyApprover, Kernel, MemorySink, Posture
from ringfence.workspace import Workspace, register_file_tools
from ringfence.workspace._file_tools import LIST_INLINE_MAX_DIR_BYTES, READ_INLINE_MAX_BYTES


@pytest.fixture
def kernel(tree: Tree) -> Iterator[Kernel]:
    ws = Workspace(tree.roots())
    k = Kernel(
        posture=Posture.ALLOW_REVERSIBLE, approver=HeadlessDenyApprover(), events_sink=MemorySink()
    )
    register_file_tools(k, ws)
    yield k
    ws.close()


async def test_small_reads_and_listings_do_not_hop(kernel: Kernel, hops: list[str]) -> None:
    assert await kernel.call("read_file", {"path": "hello.txt"}) == "hello\n"
    listed = await kernel.call("list_directory", {"path": "sub"})
    assert listed == [{"name": "inner.txt", "type": "file"}]
    assert hops == []


async def test_large_reads_listings_searches_and_writes_hop(
    kernel: Kernel, tree: Tree, hops: list[str]
) -> None:
    big = "x" * 99 + "\n"
    (tree.ws / "big.txt").write_text(big * (READ_INLINE_MAX_BYTES // len(big) + 1))
    many = tree.ws / "many"
    many.mkdir()
    for i in range(400):  # a directory well over one block
        (many / f"entry-{i:04d}-with-a-longer-name").touch()
    assert os.stat(many).st_size > LIST_INLINE_MAX_DIR_BYTES
    await kernel.call("read_file", {"path": "big.txt"})  # (the result is capped by the kernel)
    assert len(await kernel.call("list_directory", {"path": "many"})) == 400
    assert len(hops) == 2
    await kernel.call("glob_files", {"pattern": "*.txt"})
    await kernel.call("grep_files", {"pattern": "hello"})
    await kernel.call("write_file", {"path": "new.txt", "content": "n"})  # fsyncs: hops
    await kernel.call("edit_file", {"path": "new.txt", "old": "n", "new": "m"})
    assert len(hops) == 6


async def test_the_inline_path_refuses_escapes_like_the_worker(
    kernel: Kernel, tree: Tree, hops: list[str]
) -> None:
    (tree.ws / "out").symlink_to(tree.outside / "secret")
    (tree.ws / "outdir").symlink_to(tree.outside)
    os.mkfifo(tree.ws / "fifo")
    cases = {
        ("read_file", "out"): "outside_workspace",
        ("read_file", "../outside/secret"): "outside_workspace",
        ("read_file", str(tree.outside / "secret")): "outside_workspace",
        ("list_directory", "outdir"): "outside_workspace",
        ("list_directory", "../outside"): "outside_workspace",
        ("read_file", "missing.txt"): "not_found",
        ("read_file", "fifo"): "invalid_arguments",
        ("read_file", "sub"): "invalid_arguments",
        ("list_directory", "hello.txt"): "not_found",  # as before: not a directory
    }
    for (tool, path), code in cases.items():
        with trio.fail_after(5):  # the FIFO never hangs the trio thread
            outcome = await kernel.invoke(tool, {"path": path})
        assert outcome.error is not None, (tool, path)
        assert outcome.error.code == code, (tool, path, outcome.error)
        assert SECRET.decode(errors="replace") not in str(outcome.error.message)
    assert hops == []


def test_the_thresholds_are_written_down() -> None:
    from ringfence.workspace import _file_tools as _tools

    readme = Path(__file__).parents[2] / "benchmarks" / "README.md"
    assert "256 KiB" in (_tools.__doc__ or "") and "4 KiB" in (_tools.__doc__ or "")
    assert "thread hop" in readme.read_text()
