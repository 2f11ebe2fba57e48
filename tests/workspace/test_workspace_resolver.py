"""The resolver against the public path-escape attacks, through every operation.

Each attack asserts the refusal *and* that nothing happened on disk: the
outside and sibling trees are snapshotted before and compared after.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from workspace_helpers import SECRET, Tree, fd_target, snapshot, under

from ringfence.runtime import (
    InvalidArguments,
    NotFound,
    OutsideWorkspace,
    RingfenceError,
)
from ringfence.workspace import Workspace
from ringfence.workspace._resolver import MAX_SYMLINKS, openat2, openat2_available


def attempt_everything(ws: Workspace, path: str) -> dict[str, str]:
    """Run every operation on ``path``; the error code each one ended with (or 'ok')."""
    ops = {
        "open": lambda: os.close(ws.open_fd(path)),
        "read": lambda: ws.read_text(path),
        "list": lambda: ws.list_dir(path),
        "write": lambda: ws.write_text(path, "PWNED\n"),
        "edit": lambda: ws.edit_text(path, "OUTSIDE", "PWNED"),
        "write_below": lambda: ws.write_text(path.rstrip("/") + "/planted", "PWNED\n"),
        "glob": lambda: ws.glob("*", path),
        "grep": lambda: ws.grep("OUTSIDE", path),
        "resolve_dir": lambda: ws.resolve_dir(path),
    }
    codes = {}
    for name, fn in ops.items():
        try:
            fn()
            codes[name] = "ok"
        except RingfenceError as exc:
            codes[name] = exc.code
    return codes


def assert_refused_everywhere(ws: Workspace, tree: Tree, path: str, code: str) -> None:
    before = (snapshot(tree.outside), snapshot(tree.sibling))
    codes = attempt_everything(ws, path)
    assert set(codes.values()) == {code}, codes
    assert (snapshot(tree.outside), snapshot(tree.sibling)) == before
    assert (tree.outside / "secret").read_bytes() == SECRET


# -- CVE-2025-53110: a sibling that shares the root's name as a prefix ---------------------


def test_sibling_prefix_absolute_is_outside(ws: Workspace, tree: Tree) -> None:
    assert str(tree.sibling).startswith(str(tree.ws))  # the string-prefix trap is real
    assert_refused_everywhere(ws, tree, str(tree.sibling / "secret"), "outside_workspace")
    assert_refused_everywhere(ws, tree, str(tree.sibling), "outside_workspace")


def test_sibling_prefix_relative_climb_is_outside(ws: Workspace, tree: Tree) -> None:
    assert_refused_everywhere(ws, tree, "../ws_sensitive_credentials/secret", "outside_workspace")


def test_sibling_prefix_through_a_symlink_is_outside(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "creds").symlink_to(tree.sibling)
    assert_refused_everywhere(ws, tree, "creds/secret", "outside_workspace")


# -- CVE-2025-53109: a symlink inside the root to a file outside -----------------------


def test_symlink_to_etc_passwd_is_not_read(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "passwd").symlink_to("/etc/passwd")
    for op in (lambda: ws.read_text("passwd"), lambda: ws.open_fd("passwd")):
        with pytest.raises(OutsideWorkspace) as info:
            op()
        assert "passwd" in info.value.message


@pytest.mark.parametrize(
    "target_kind",
    ["absolute", "relative", "chain", "dangling", "proc_root", "proc_fd"],
)
def test_symlink_out_of_the_root_is_refused_for_every_operation(
    ws: Workspace, tree: Tree, target_kind: str
) -> None:
    secret = tree.outside / "secret"
    link = tree.ws / "link"
    if target_kind == "absolute":
        link.symlink_to(secret)
    elif target_kind == "relative":
        link.symlink_to("../outside/secret")
    elif target_kind == "chain":
        (tree.ws / "hop2").symlink_to("../outside/secret")
        (tree.ws / "hop1").symlink_to("hop2")
        link.symlink_to("hop1")
    elif target_kind == "dangling":
        link.symlink_to(tree.outside / "does-not-exist-yet")
    elif target_kind == "proc_root":
        link.symlink_to(f"/proc/self/root{secret}")
    else:
        fd = os.open(secret, os.O_RDONLY)
        link.symlink_to(f"/proc/self/fd/{fd}")
    try:
        assert_refused_everywhere(ws, tree, "link", "outside_workspace")
        assert not (tree.outside / "does-not-exist-yet").exists()
    finally:
        if target_kind == "proc_fd":
            os.close(fd)


def test_directory_symlink_out_of_the_root_is_refused(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "escape").symlink_to(tree.outside)
    assert_refused_everywhere(ws, tree, "escape", "outside_workspace")
    assert_refused_everywhere(ws, tree, "escape/secret", "outside_workspace")
    assert not (tree.outside / "planted").exists()


@pytest.mark.parametrize(
    "spelling",
    [
        "../outside/secret",
        "sub/../../outside/secret",
        "./sub/./../../outside/secret",
        "sub/../..",
        "..",
        "{ws}/../outside/secret",
        "{ws}/sub/../../outside/secret",
        "{outside}/secret",
        "/proc/self/root{outside}/secret",
        "/proc/self/cwd/secret",
        "/etc/passwd",
        "//etc/passwd",
        "//{ws}/hello.txt",
        "///{outside}/secret",
    ],
)
def test_climbs_and_spellings_that_leave_the_roots(
    ws: Workspace, tree: Tree, spelling: str
) -> None:
    path = spelling.format(ws=tree.ws, outside=tree.outside)
    assert_refused_everywhere(ws, tree, path, "outside_workspace")


def test_nul_bytes_are_invalid_arguments(ws: Workspace, tree: Tree) -> None:
    assert_refused_everywhere(ws, tree, "hello.txt\x00/../../outside/secret", "invalid_arguments")


def test_empty_path_is_invalid(ws: Workspace) -> None:
    with pytest.raises(InvalidArguments) as info:
        ws.read_text("")
    assert info.value.field == "path"


# -- what stays allowed ----------------------------------------------------------------


def test_links_inside_and_between_roots_are_followed(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "rel").symlink_to("sub/inner.txt")
    (tree.ws / "abs").symlink_to(tree.ws / "hello.txt")  # openat2 BENEATH refuses this one
    (tree.ws / "other_root").symlink_to("../ws2")  # climbs out of ws and into ws2
    (tree.ws / "other_abs").symlink_to(tree.ws2 / "two.txt")
    (tree.ws / "dirlink").symlink_to("sub")
    assert ws.read_text("rel") == "inner\n"
    assert ws.read_text("abs") == "hello\n"
    assert ws.read_text("other_root/two.txt") == "two\n"
    assert ws.read_text("other_abs") == "two\n"
    assert ws.read_text("dirlink/../hello.txt") == "hello\n"
    assert ws.read_text("sub/../hello.txt") == "hello\n"
    assert ws.read_text(str(tree.ws / "sub" / "inner.txt")) == "inner\n"
    assert ws.read_text(str(tree.ws2 / "two.txt")) == "two\n"
    assert ws.read_text("../ws2/two.txt") == "two\n"
    assert ws.read_text("sub//inner.txt") == "inner\n"
    fd = ws.open_fd("other_root/two.txt")
    try:
        assert fd_target(fd) == tree.ws2 / "two.txt"
    finally:
        os.close(fd)


def test_a_root_spelled_through_a_symlink_accepts_both_spellings(tree: Tree) -> None:
    alias = tree.base / "alias"
    alias.symlink_to(tree.ws)
    with Workspace([alias]) as w:
        assert w.roots == [tree.ws]
        assert w.read_text(str(alias / "hello.txt")) == "hello\n"
        assert w.read_text(str(tree.ws / "hello.txt")) == "hello\n"
        with pytest.raises(OutsideWorkspace):
            w.read_text(str(tree.base / "aliasx" / "hello.txt"))


def test_symlink_loops_end_with_an_error(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "loop_a").symlink_to("loop_b")
    (tree.ws / "loop_b").symlink_to("loop_a")
    with pytest.raises(InvalidArguments) as info:
        ws.read_text("loop_a")
    assert "symbolic links" in info.value.message
    # A long but finite chain inside the root still resolves.
    (tree.ws / "c0").symlink_to("hello.txt")
    for i in range(1, MAX_SYMLINKS):
        (tree.ws / f"c{i}").symlink_to(f"c{i - 1}")
    assert ws.read_text(f"c{MAX_SYMLINKS - 1}") == "hello\n"


def test_not_found_and_not_a_directory(ws: Workspace) -> None:
    with pytest.raises(NotFound):
        ws.read_text("missing.txt")
    with pytest.raises(NotFound):
        ws.read_text("hello.txt/child")
    with pytest.raises(InvalidArguments):
        ws.read_text("sub")
    with pytest.raises(NotFound):
        ws.list_dir("missing")


def test_resolve_dir(ws: Workspace, tree: Tree) -> None:
    assert ws.resolve_dir(".") == tree.ws
    assert ws.resolve_dir("sub") == tree.ws / "sub"
    assert ws.resolve_dir(str(tree.ws2)) == tree.ws2
    (tree.ws / "dl").symlink_to("sub")
    assert ws.resolve_dir("dl") == tree.ws / "sub"
    with pytest.raises(InvalidArguments):
        ws.resolve_dir("hello.txt")
    with pytest.raises(NotFound):
        ws.resolve_dir("nope")
    with pytest.raises(OutsideWorkspace):
        ws.resolve_dir(str(tree.outside))
    assert ws.with_host_root([].append).resolve_dir(str(tree.outside)) == tree.outside


def test_roots_must_exist_and_be_directories(tree: Tree) -> None:
    with pytest.raises(InvalidArguments) as info:
        Workspace([tree.base / "missing"])
    assert "missing" in info.value.message and info.value.field == "roots"
    with pytest.raises(InvalidArguments) as info:
        Workspace([tree.ws / "hello.txt"])
    assert "not a directory" in info.value.message
    with pytest.raises(InvalidArguments):
        Workspace([])


def test_close_releases_the_root_descriptors(tree: Tree) -> None:
    def open_root_fds() -> int:
        return sum(
            1
            for fd in os.listdir("/proc/self/fd")
            if _safe_readlink(f"/proc/self/fd/{fd}") in (str(tree.ws), str(tree.ws2))
        )

    before = open_root_fds()
    w = Workspace(tree.roots())
    assert open_root_fds() == before + 2
    w.close()
    w.close()  # idempotent
    assert open_root_fds() == before
    with pytest.raises(RingfenceError):
        w.read_text("hello.txt")


def _safe_readlink(p: str) -> str:
    try:
        return os.readlink(p)
    except OSError:
        return ""


def test_opened_descriptors_lie_under_a_root(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "x").symlink_to(tree.ws2)
    for path in ["hello.txt", "sub/inner.txt", "x/two.txt", str(tree.ws2 / "two.txt"), "."]:
        fd = ws.open_fd(path)
        try:
            assert under(fd_target(fd), tree.roots())
        finally:
            os.close(fd)


@pytest.mark.skipif(not openat2_available(), reason="the kernel has no openat2")
def test_openat2_is_used_and_refuses_what_the_notes_say(tree: Tree) -> None:
    fd = os.open(tree.ws, os.O_PATH | os.O_DIRECTORY)
    try:
        (tree.ws / "abs").symlink_to(tree.ws / "hello.txt")
        beneath = 0x08 | 0x02
        os.close(openat2(fd, b"hello.txt", os.O_RDONLY, beneath))
        for bad in (b"../outside/secret", b"abs", str(tree.ws / "hello.txt").encode()):
            with pytest.raises(OSError) as info:
                openat2(fd, bad, os.O_RDONLY, beneath)
            assert info.value.errno == 18  # EXDEV: the walk takes a second look
    finally:
        os.close(fd)


def test_walk_alone_gives_the_same_answers_as_openat2(tree: Tree) -> None:
    (tree.ws / "abs").symlink_to(tree.ws / "hello.txt")
    (tree.ws / "out").symlink_to(tree.outside / "secret")
    (tree.ws / "cross").symlink_to("../ws2/two.txt")
    fast, slow = Workspace(tree.roots()), Workspace(tree.roots())
    slow.use_openat2 = False
    try:
        for path in [
            "hello.txt",
            "abs",
            "out",
            "cross",
            "../outside/secret",
            "sub",
            "nope",
            "sub/.",
        ]:
            answers = []
            for w in (fast, slow):
                try:
                    fd = w.open_fd(path)
                except RingfenceError as exc:
                    answers.append(exc.code)
                else:
                    st = os.fstat(fd)
                    os.close(fd)
                    answers.append((st.st_dev, st.st_ino))
            assert answers[0] == answers[1], (path, answers)
    finally:
        fast.close()
        slow.close()


def test_unrestricted_reaches_outside_but_only_for_that_call(ws: Workspace, tree: Tree) -> None:
    notices: list[str] = []
    path = str(tree.outside / "secret")
    assert ws.with_host_root(notices.append).read_text(path) == SECRET.decode()
    assert notices == [path]
    (tree.ws / "out").symlink_to(tree.outside / "secret")
    assert ws.with_host_root(notices.append).read_text("out") == SECRET.decode()
    with pytest.raises(OutsideWorkspace):
        ws.read_text(path)
    with pytest.raises(OutsideWorkspace):
        ws.read_text("out")


def test_relative_paths_in_a_second_root_are_shown_absolute(ws: Workspace, tree: Tree) -> None:
    result = ws.write_text(str(tree.ws2 / "new.txt"), "x")
    assert result["path"] == str(tree.ws2 / "new.txt")
    assert ws.write_text("new.txt", "y")["path"] == "new.txt"


def test_path_objects_are_accepted_for_roots(tree: Tree) -> None:
    with Workspace([str(tree.ws), Path(tree.ws2)]) as w:
        assert w.roots == tree.roots()


def test_close_while_operations_are_in_flight(tree: Tree) -> None:
    import threading

    for _ in range(20):
        w = Workspace(tree.roots())
        unexpected: list[BaseException] = []

        def reader(w: Workspace = w, unexpected: list[BaseException] = unexpected) -> None:
            for _ in range(100):
                try:
                    assert w.read_text("hello.txt") == "hello\n"
                except RingfenceError as exc:
                    if "closed" not in exc.message:
                        unexpected.append(exc)
                except BaseException as exc:  # a reused descriptor would show up here
                    unexpected.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        w.close()
        for t in threads:
            t.join()
        assert unexpected == []
        assert all(r.fd == -1 for r in w._resolver.roots)  # released by the last one out


def test_enosys_is_remembered_and_the_walk_takes_over(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes
    import errno

    calls = []

    def no_openat2(*args: object) -> int:  # what a kernel without openat2 answers
        calls.append(args)
        ctypes.set_errno(errno.ENOSYS)
        return -1

    monkeypatch.setattr(openat2, "_fn", no_openat2)
    monkeypatch.setattr(openat2, "available", None)
    (tree.ws / "abs").symlink_to(tree.ws / "hello.txt")
    (tree.ws / "out").symlink_to(tree.outside / "secret")
    with Workspace(tree.roots()) as w:
        assert w.read_text("hello.txt") == "hello\n"
        assert openat2.available is False
        seen = len(calls)
        assert w.read_text("abs") == "hello\n"
        assert w.read_text("sub/../sub/inner.txt") == "inner\n"
        with pytest.raises(OutsideWorkspace):
            w.read_text("out")
        assert w.grep("inner") == [{"path": "sub/inner.txt", "line": 1, "text": "inner"}]
        assert len(calls) == seen  # never asked again
