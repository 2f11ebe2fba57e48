"""The confined Workspace, its one way out (``with_host_root``), and the roots' lifetime."""

from __future__ import annotations

import inspect
import os
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from workspace_helpers import SECRET, Tree

from ringfence.runtime import OutsideWorkspace, RingfenceError, ToolError
from ringfence.workspace import Workspace


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_workspace_method_takes_a_flag_to_leave_the_roots() -> None:
    # The escape hatch is a view: the only spelling is with_host_root(...). resolve_dir keeps
    # its old keyword for run_shell until that caller moves to the view.
    for name, member in inspect.getmembers(Workspace, inspect.isfunction):
        if name.startswith("_") or name == "resolve_dir":
            continue
        assert "unrestricted" not in inspect.signature(member).parameters, name
        assert "notices" not in inspect.signature(member).parameters, name


def test_the_view_reaches_the_host_and_says_where_only_for_calls_that_succeed(
    ws: Workspace, tree: Tree
) -> None:
    heard: list[str] = []
    view = ws.with_host_root(heard.append)
    outside = str(tree.outside / "secret")
    assert view.read_text(outside) == SECRET.decode()
    assert heard == [outside]
    assert view.list_dir(str(tree.outside)) == [{"name": "secret", "type": "file"}]
    assert view.resolve_dir(str(tree.outside)) == tree.outside
    assert heard == [outside, str(tree.outside), str(tree.outside)]
    heard.clear()
    assert view.read_text("hello.txt") == "hello\n"  # inside the roots: nothing to say
    with pytest.raises(RingfenceError):
        view.read_text(str(tree.outside))  # a directory: the call fails, so no notice
    assert heard == []
    with pytest.raises(OutsideWorkspace):
        ws.read_text(outside)  # the workspace itself stays confined
    with pytest.raises(OutsideWorkspace):
        ws.resolve_dir(str(tree.outside))  # no flag opens it: only the view


def test_closing_the_workspace_closes_its_views(tree: Tree) -> None:
    before = _open_fds()
    w = Workspace(tree.roots())
    view = w.with_host_root([].append)
    assert view.read_text(str(tree.outside / "secret")) == SECRET.decode()  # opens "/" too
    w.close()
    with pytest.raises(ToolError, match="closed"):
        view.read_text("hello.txt")
    assert _open_fds() == before


def test_close_during_a_refused_enter_releases_the_roots(tree: Tree) -> None:
    """close() between a refused operation's announce and its retreat leaks nothing.

    The reader is paused (a trace hook) right after its first step into the
    resolver's ``__enter__``, close() runs then, and the reader resumes. With
    the old list-based count the refused reader left without closing and the
    root descriptors stayed open for the life of the process.
    """
    before = _open_fds()
    w = Workspace(tree.roots())
    paused, closed = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_name != "__enter__" or not code.co_filename.endswith("_resolver.py"):
            return None
        lines = [0]

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                lines[0] += 1
                if lines[0] == 2 and not paused.is_set():
                    paused.set()
                    closed.wait(0.2)  # bounded: a close() that waits for us must not hang
            return local

        return local

    def reader() -> None:
        sys.settrace(tracer)
        try:
            outcome.append(w.read_text("hello.txt"))
        except RingfenceError as exc:
            outcome.append(exc.code)
        finally:
            sys.settrace(None)

    t = threading.Thread(target=reader)
    t.start()
    assert paused.wait(5)
    closer = threading.Thread(target=w.close)
    closer.start()
    closer.join(5)
    closed.set()
    t.join(5)
    assert outcome in (["hello\n"], ["tool_error"])
    assert _open_fds() == before
    with pytest.raises(ToolError, match="closed"):
        w.read_text("hello.txt")


def test_many_readers_and_a_close_leak_no_descriptor(tree: Tree) -> None:
    before = _open_fds()
    for _ in range(20):
        w = Workspace(tree.roots())
        go = threading.Event()

        def reader(w: Workspace = w, go: threading.Event = go) -> None:
            go.wait()
            for _ in range(50):
                try:
                    w.read_text("hello.txt")
                except ToolError:
                    return

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        go.set()
        w.close()
        for t in threads:
            t.join()
    assert _open_fds() == before


def test_roots_and_paths_are_plain(tree: Tree) -> None:
    with Workspace([Path(tree.ws)]) as w:
        view = w.with_host_root([].append)
        assert view.roots == w.roots == [tree.ws]
        assert "with_host_root" in repr(view)
