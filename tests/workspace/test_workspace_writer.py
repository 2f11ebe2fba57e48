"""write_file replaces, never writes into; unwritable cases leave the original byte-identical."""

from __future__ import annotations

import os
import signal
import stat
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from workspace_helpers import SECRET, Tree, snapshot

from ringfence.runtime import InvalidArguments, NotFound, RingfenceError, Unwritable
from ringfence.workspace import Workspace

NOBODY = 65534


def leftovers(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.startswith(".ringfence-")]


def test_write_creates_and_replaces(ws: Workspace, tree: Tree) -> None:
    assert ws.write_text("new.txt", "one\n") == {"path": "new.txt", "bytes": 4, "created": True}
    assert ws.write_text("new.txt", "two\n")["created"] is False
    assert (tree.ws / "new.txt").read_text() == "two\n"
    assert ws.write_text("a/b/c.txt", "deep")["path"] == "a/b/c.txt"
    assert (tree.ws / "a" / "b" / "c.txt").read_text() == "deep"
    assert leftovers(tree.ws) == []


def test_new_files_get_the_umask_mode(ws: Workspace, tree: Tree) -> None:
    old = os.umask(0o027)
    try:
        ws.write_text("masked.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tree.ws / "masked.txt").stat().st_mode) == 0o640


def test_a_hard_link_is_replaced_not_written_through(ws: Workspace, tree: Tree) -> None:
    target = tree.ws / "shared.txt"
    target.write_text("original\n")
    os.link(target, tree.ws / "twin.txt")
    os.link(target, tree.outside / "outside-twin.txt")  # a hard link leading out of the root
    ws.write_text("shared.txt", "replaced\n")
    assert target.read_text() == "replaced\n"
    assert (tree.ws / "twin.txt").read_text() == "original\n"
    assert (tree.outside / "outside-twin.txt").read_text() == "original\n"
    assert target.stat().st_nlink == 1


@pytest.mark.parametrize("mode", [0o640, 0o755, 0o600, 0o2775, 0o4755, 0o1644])
def test_mode_is_kept(ws: Workspace, tree: Tree, mode: int) -> None:
    f = tree.ws / "m.txt"
    f.write_text("x")
    os.chmod(f, mode)
    ws.write_text("m.txt", "y")
    assert stat.S_IMODE(f.stat().st_mode) == mode
    assert f.read_text() == "y"


def test_owner_and_extended_attributes_are_kept(ws: Workspace, tree: Tree) -> None:
    f = tree.ws / "owned.txt"
    f.write_text("x")
    os.chown(f, 1234, 2345)
    os.chmod(f, 0o664)
    os.setxattr(f, "user.origin", b"kept")
    # A POSIX ACL granting uid 4321 read access (system.posix_acl_access, version 2).
    acl = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", tag, perm, ident)
        for tag, perm, ident in [(1, 6, 0xFFFFFFFF), (2, 4, 4321), (4, 4, 0xFFFFFFFF), (16, 4, 0xFFFFFFFF), (32, 4, 0xFFFFFFFF)]
    )  # fmt: skip
    try:
        os.setxattr(f, "system.posix_acl_access", acl)
        has_acl = True
    except OSError:
        has_acl = False
    ws.write_text("owned.txt", "y")
    st = f.stat()
    assert (st.st_uid, st.st_gid) == (1234, 2345)
    assert os.getxattr(f, "user.origin") == b"kept"
    if has_acl:
        assert os.getxattr(f, "system.posix_acl_access") == acl


def unwritable_case(ws: Workspace, tree: Tree, path: str, prepare: Callable[[], None]) -> None:
    prepare()
    before = snapshot(tree.ws)
    with pytest.raises(Unwritable) as info:
        ws.write_text(path, "new content\n")
    assert path.split("/")[-1] in info.value.message
    assert snapshot(tree.ws) == before  # byte-for-byte, same inode, no temp file left


def test_read_only_file_is_unwritable(ws: Workspace, tree: Tree) -> None:
    f = tree.ws / "ro.txt"
    unwritable_case(ws, tree, "ro.txt", lambda: (f.write_text("keep\n"), os.chmod(f, 0o444)))
    assert f.read_text() == "keep\n"
    assert ws.read_text("ro.txt") == "keep\n"  # reading still works
    with pytest.raises(Unwritable):
        ws.edit_text("ro.txt", "keep", "lose")
    assert f.read_text() == "keep\n"


def test_directory_that_denies_creating_files_is_unwritable(ws: Workspace, tree: Tree) -> None:
    d = tree.ws / "locked"

    def prepare() -> None:
        d.mkdir()
        (d / "existing.txt").write_text("keep\n")
        os.chmod(d, 0o555)

    try:
        unwritable_case(ws, tree, "locked/existing.txt", prepare)
        with pytest.raises(Unwritable):
            ws.write_text("locked/new.txt", "x")
        with pytest.raises(Unwritable):
            ws.write_text("locked/newdir/new.txt", "x")
        assert sorted(p.name for p in d.iterdir()) == ["existing.txt"]
    finally:
        os.chmod(d, 0o755)


def test_immutable_file_is_unwritable(ws: Workspace, tree: Tree) -> None:
    f = tree.ws / "immutable.txt"
    f.write_text("keep\n")
    if subprocess.run(["chattr", "+i", str(f)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        before = snapshot(tree.ws)
        with pytest.raises(Unwritable):
            ws.write_text("immutable.txt", "lost\n")
        assert snapshot(tree.ws) == before
    finally:
        subprocess.run(["chattr", "-i", str(f)], check=True)


def test_special_files_and_directories_are_not_written(ws: Workspace, tree: Tree) -> None:
    os.mkfifo(tree.ws / "fifo")
    with pytest.raises(Unwritable):
        ws.write_text("fifo", "x")
    with pytest.raises(InvalidArguments):
        ws.write_text("sub", "x")
    with pytest.raises(InvalidArguments):
        ws.write_text("sub/", "x")
    assert stat.S_ISFIFO((tree.ws / "fifo").lstat().st_mode)


def test_failed_write_removes_the_directories_it_created(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "ro").mkdir()
    (tree.ws / "ro" / "f").write_text("keep")
    os.chmod(tree.ws / "ro" / "f", 0o444)
    before = snapshot(tree.ws)
    with pytest.raises(Unwritable):
        ws.write_text("made1/made2/../../ro/f", "x")
    assert snapshot(tree.ws) == before


def test_write_through_an_inside_symlink_replaces_the_target(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "alias").symlink_to("sub/inner.txt")
    (tree.ws / "dangling").symlink_to("sub/later.txt")
    ws.write_text("alias", "changed\n")
    ws.write_text("dangling", "created\n")
    assert (tree.ws / "alias").is_symlink()
    assert (tree.ws / "sub" / "inner.txt").read_text() == "changed\n"
    assert (tree.ws / "sub" / "later.txt").read_text() == "created\n"


def test_edit_file(ws: Workspace, tree: Tree) -> None:
    f = tree.ws / "code.py"
    f.write_text("a = 1\nb = 2\nb = 2\n")
    os.chmod(f, 0o751)
    assert ws.edit_text("code.py", "a = 1", "a = 10") == {
        "path": "code.py",
        "bytes": 19,
        "replacements": 1,
    }
    assert f.read_text() == "a = 10\nb = 2\nb = 2\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o751
    with pytest.raises(InvalidArguments) as info:
        ws.edit_text("code.py", "b = 2", "b = 3")
    assert info.value.field == "old" and "2 times" in info.value.message
    with pytest.raises(InvalidArguments) as info:
        ws.edit_text("code.py", "zzz", "y")
    assert info.value.field == "old" and "not found" in info.value.message
    with pytest.raises(NotFound):
        ws.edit_text("missing.py", "a", "b")
    assert f.read_text() == "a = 10\nb = 2\nb = 2\n"


def test_edit_refuses_binary_and_non_utf8(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "bin").write_bytes(b"abc\x00def")
    (tree.ws / "latin1").write_bytes("caf\u00e9".encode("latin-1"))
    for name in ("bin", "latin1"):
        before = (tree.ws / name).read_bytes()
        with pytest.raises(InvalidArguments):
            ws.edit_text(name, "a", "b")
        assert (tree.ws / name).read_bytes() == before


def test_outside_targets_are_untouched_by_writes(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "out").symlink_to(tree.outside / "secret")
    (tree.ws / "outdir").symlink_to(tree.outside)
    before = snapshot(tree.outside)
    for path in ("out", "outdir/secret", "outdir/new", str(tree.outside / "new"), "../outside/x"):
        with pytest.raises(RingfenceError) as info:
            ws.write_text(path, "PWNED")
        assert info.value.code == "outside_workspace"
    assert snapshot(tree.outside) == before
    assert (tree.outside / "secret").read_bytes() == SECRET


# -- in real child processes --------------------------------------------------------------


def run_in_child(fn: Callable[[], str]) -> str:
    """Fork; run ``fn`` in the child; return what it reported (or how it died)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        try:
            msg = fn()
        except RingfenceError as exc:
            msg = exc.code
        except BaseException as exc:
            msg = f"crash:{type(exc).__name__}:{exc}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal:{os.WTERMSIG(status)}"
    return out


def as_nobody(fn: Callable[[], str]) -> Callable[[], str]:
    def wrapped() -> str:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        return fn()

    return wrapped


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another user")
def test_unprivileged_writer_cannot_keep_another_users_owner(ws: Workspace, tree: Tree) -> None:
    os.chmod(tree.ws, 0o777)
    shared = tree.ws / "shared.txt"
    shared.write_text("root's\n")
    os.chmod(shared, 0o666)  # the bits allow writing, but a replacement would change the owner
    readonly = tree.ws / "readonly.txt"
    readonly.write_text("root's\n")
    os.chmod(readonly, 0o644)
    (tree.ws / "closed").mkdir(mode=0o755)
    mine = tree.ws / "mine.txt"
    mine.write_text("nobody's\n")
    os.chown(mine, NOBODY, NOBODY)
    os.chmod(mine, 0o640)
    before = snapshot(tree.ws)

    assert run_in_child(as_nobody(lambda: str(ws.write_text("shared.txt", "x")))) == "unwritable"
    assert run_in_child(as_nobody(lambda: str(ws.write_text("readonly.txt", "x")))) == "unwritable"
    assert (
        run_in_child(as_nobody(lambda: str(ws.write_text("closed/new.txt", "x")))) == "unwritable"
    )
    assert snapshot(tree.ws) == before
    ok = run_in_child(as_nobody(lambda: str(ws.write_text("mine.txt", "changed\n")["bytes"])))
    assert ok == "8"
    st = mine.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), mine.read_text()) == (NOBODY, 0o640, "changed\n")


def test_a_crash_mid_write_never_leaves_a_truncated_target(ws: Workspace, tree: Tree) -> None:
    target = tree.ws / "precious.txt"
    target.write_bytes(b"precious " * 10000)
    original = target.read_bytes()

    def die_at_fsync() -> str:
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[assignment]
        ws.write_text("precious.txt", "half" * 100000)
        return "survived"

    assert run_in_child(die_at_fsync) == f"signal:{signal.SIGKILL}"
    assert target.read_bytes() == original
    # The temp file may be left behind; it never replaced the target.
    assert all(
        p.name.startswith(".ringfence-")
        for p in tree.ws.iterdir()
        if p.name not in {"precious.txt", "hello.txt", "sub"}
    )
