"""The six file tools inside a real Kernel: consequences, postures, results, wiring."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from workspace_helpers import SECRET, Tree, snapshot

from ringfence._embed import create_kernel
from ringfence.runtime import (
    Consequence,
    HeadlessDenyApprover,
    InvalidArguments,
    Kernel,
    MemorySink,
    Posture,
)
from ringfence.workspace import Workspace, register_file_tools


@pytest.fixture
def kernel_ws(tree: Tree):
    ws = Workspace(tree.roots())
    sink = MemorySink()
    kernel = Kernel(
        posture=Posture.ALLOW_REVERSIBLE, approver=HeadlessDenyApprover(), events_sink=sink
    )
    register_file_tools(kernel, ws)
    yield kernel, ws, sink
    ws.close()


def test_tools_are_registered_with_their_consequences(kernel_ws) -> None:
    kernel, _, _ = kernel_ws
    got = {s.name: s.consequence for s in kernel.tools()}
    assert got == {
        "read_file": Consequence.READ,
        "list_directory": Consequence.READ,
        "glob_files": Consequence.READ,
        "grep_files": Consequence.READ,
        "write_file": Consequence.REVERSIBLE,
        "edit_file": Consequence.REVERSIBLE,
    }
    assert not any(s.residual for s in kernel.tools())
    read = next(s for s in kernel.tools() if s.name == "read_file")
    assert "counting from 1" in read.input_schema["properties"]["offset"]["description"]


async def test_results_have_the_documented_shapes(kernel_ws, tree: Tree) -> None:
    kernel, _, _ = kernel_ws
    (tree.ws / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    assert await kernel.call("read_file", {"path": "hello.txt"}) == "hello\n"
    assert (
        await kernel.call("read_file", {"path": "lines.txt", "offset": 3, "limit": 2})
        == "line 3\nline 4\n"
    )
    assert await kernel.call("read_file", {"path": "lines.txt", "offset": 10}) == "line 10\n"
    assert await kernel.call("list_directory", {"path": "."}) == [
        {"name": "hello.txt", "type": "file"},
        {"name": "lines.txt", "type": "file"},
        {"name": "sub", "type": "directory"},
    ]
    assert await kernel.call("write_file", {"path": "n.txt", "content": "héllo"}) == {
        "path": "n.txt",
        "bytes": 6,
        "created": True,
    }
    assert await kernel.call("edit_file", {"path": "n.txt", "old": "é", "new": "e"}) == {
        "path": "n.txt",
        "bytes": 5,
        "replacements": 1,
    }
    assert await kernel.call("glob_files", {"pattern": "**/*.txt"}) == [
        "hello.txt",
        "lines.txt",
        "n.txt",
        "sub/inner.txt",
    ]
    assert await kernel.call("grep_files", {"pattern": "line 1\\d?$", "max_results": 5}) == [
        {"path": "lines.txt", "line": 1, "text": "line 1"},
        {"path": "lines.txt", "line": 10, "text": "line 10"},
    ]


async def test_binary_and_bad_ranges_are_invalid_arguments(kernel_ws, tree: Tree) -> None:
    kernel, _, _ = kernel_ws
    (tree.ws / "blob.bin").write_bytes(b"\x7fELF\x00\x01")
    (tree.ws / "latin1.txt").write_bytes("caf\u00e9\n".encode("latin-1"))
    out = await kernel.invoke("read_file", {"path": "blob.bin"})
    assert out.error.code == "invalid_arguments" and "binary" in out.error.message
    assert await kernel.call("read_file", {"path": "latin1.txt"}) == "caf\ufffd\n"
    out = await kernel.invoke("read_file", {"path": "hello.txt", "offset": 5})
    assert out.error.code == "invalid_arguments" and out.error.field == "offset"
    out = await kernel.invoke("read_file", {"path": "hello.txt", "offset": 0})
    assert out.error.code == "invalid_arguments"  # the schema says minimum 1
    out = await kernel.invoke("read_file", {"path": "hello.txt", "bogus": 1})
    assert out.error.code == "invalid_arguments" and out.error.field == "bogus"


async def test_unrestricted_posture_lifts_the_roots_for_the_session_only(
    kernel_ws, tree: Tree
) -> None:
    kernel, _, sink = kernel_ws
    secret = str(tree.outside / "secret")
    refused = await kernel.invoke("read_file", {"path": secret})
    assert refused.error.code == "outside_workspace"
    kernel.set_posture(Posture.UNRESTRICTED)
    assert await kernel.call("read_file", {"path": secret}) == SECRET.decode()
    notices = [e for e in sink.records() if e["kind"] == "notice"]
    assert notices and secret in notices[-1]["message"]
    # git metadata stays refused, even unrestricted
    (tree.outside / "repo" / ".git").mkdir(parents=True)
    out = await kernel.invoke(
        "write_file", {"path": str(tree.outside / "repo/.git/config"), "content": "x"}
    )
    assert out.error.code == "git_metadata"
    assert not (tree.outside / "repo" / ".git" / "config").exists()
    kernel.set_posture(Posture.ALLOW_REVERSIBLE)
    again = await kernel.invoke("read_file", {"path": secret})
    assert again.error.code == "outside_workspace"


async def test_writes_ask_first_under_the_ask_posture(tree: Tree) -> None:
    with Workspace(tree.roots()) as ws:
        kernel = Kernel(posture=Posture.ASK, approver=HeadlessDenyApprover())
        register_file_tools(kernel, ws)
        before = snapshot(tree.ws)
        out = await kernel.invoke("write_file", {"path": "x.txt", "content": "x"})
        assert out.error.code == "denied"
        assert snapshot(tree.ws) == before
        assert await kernel.call("read_file", {"path": "hello.txt"}) == "hello\n"


async def test_create_kernel_wires_the_workspace_and_closes_it(tree: Tree, monkeypatch) -> None:
    def root_fds() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                n += os.readlink(f"/proc/self/fd/{fd}") == str(tree.ws)
        return n

    before = root_fds()
    async with create_kernel(roots=[tree.ws], posture="allow-reversible") as kernel:
        assert root_fds() == before + 1
        assert await kernel.call("read_file", {"path": "hello.txt"}) == "hello\n"
    assert root_fds() == before

    # The variable is the command line's default: a library caller who passes no roots gets
    # the current directory, never roots the environment widened.
    monkeypatch.setenv("RINGFENCE_WORKSPACE_ROOTS", os.pathsep.join([str(tree.ws2), str(tree.ws)]))
    monkeypatch.chdir(tree.ws / "sub")
    async with create_kernel() as kernel:
        assert await kernel.call("read_file", {"path": "inner.txt"}) == "inner\n"


def test_create_kernel_refuses_a_missing_root(tree: Tree) -> None:
    with pytest.raises(InvalidArguments) as info:
        create_kernel(roots=[tree.base / "nope"])
    assert "nope" in info.value.message and info.value.field == "roots"


async def test_dry_run_stages_writes_without_touching_disk(tree: Tree, tmp_path: Path) -> None:
    before = snapshot(tree.ws)
    async with create_kernel(
        roots=[tree.ws], posture="allow-all", dry_run=True, plan_path=tmp_path / "plan.json"
    ) as kernel:
        out = await kernel.invoke("write_file", {"path": "staged.txt", "content": "x"})
        assert out.staged
        assert await kernel.call("read_file", {"path": "hello.txt"}) == "hello\n"
    assert snapshot(tree.ws) == before


def test_reads_are_bounded_and_never_hang(tree: Tree, monkeypatch) -> None:
    import ringfence.workspace._reader as impl

    monkeypatch.setattr(impl, "READ_MAX_BYTES", 100)
    (tree.ws / "big.txt").write_text("".join(f"{i:09d}\n" for i in range(30)))  # 300 bytes
    (tree.ws / "oneline.txt").write_text("x" * 150 + "\n")
    os.mkfifo(tree.ws / "fifo")
    with Workspace(tree.roots()) as ws:
        with pytest.raises(InvalidArguments) as info:
            ws.read_text("big.txt")
        assert "offset and limit" in info.value.message
        assert ws.read_text("big.txt", offset=29, limit=2) == "000000028\n000000029\n"
        with pytest.raises(InvalidArguments) as info:
            ws.read_text("big.txt", offset=1, limit=20)
        assert info.value.field == "limit"
        with pytest.raises(InvalidArguments):
            ws.read_text("oneline.txt", limit=1)
        with pytest.raises(InvalidArguments) as info:
            ws.read_text("fifo")  # O_NONBLOCK: refused, not blocked
        assert "not a regular file" in info.value.message


def test_every_exported_name_exists() -> None:
    import ringfence.workspace as pkg

    assert sorted(pkg.__all__) == sorted(set(pkg.__all__))
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None
