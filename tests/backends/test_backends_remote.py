"""The docker backend on a remote engine: the workspace shipped, change sets fetched back.

Real TLS ``dockerd`` processes on loopback (``engines_helpers``) with
``ship = "always"``: nothing of the host is mounted, the workspace travels
by ``put_archive`` into a per-session volume, and every command's writes come
back over the supervisor's own stream as a change set that the host merges.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from backends_helpers import DOCKER_OPTIONS, container_processes, docker_required
from engines_helpers import EngineProcess, can_start_engine, start_tls_engine, stop_engine
from test_backends_docker_changesets import capture, line, make, summary, tree

from ringfence.backends import SessionSpec, ShellResult, WarmPool
from ringfence.backends.docker._api import connect_docker
from ringfence.backends.docker._session import DockerSession, start_docker
from ringfence.backends.engines._engines import Engine
from ringfence.backends.engines._ship import rebuild_upper
from ringfence.backends.testing import check_backend
from ringfence.runtime import InvalidArguments, RingfenceError, Unavailable
from ringfence.workspace import Change, CheckpointStore, Workspace
from ringfence.workspace.changes._merge import merge_changes

pytestmark = pytest.mark.docker
IMAGE = "ringfence/busybox:latest"


def _skip_or_fail(reason: str) -> None:
    if docker_required():
        pytest.fail(f"RINGFENCE_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    reason = can_start_engine()
    if reason is not None:
        _skip_or_fail(reason)
    started: list[EngineProcess] = []
    try:
        for name in ("ship-a", "ship-b"):
            base = tmp_path_factory.mktemp(name)
            started.append(start_tls_engine(base, name=name, load_images=(IMAGE,)))
        yield started
    finally:
        for handle in started:
            stop_engine(handle)


def engine_table(engine: Engine, **kw: Any) -> dict[str, Any]:
    return {
        "name": engine.name,
        "base_url": engine.base_url,
        "tls_ca": str(engine.tls_ca),
        "tls_cert": str(engine.tls_cert),
        "tls_key": str(engine.tls_key),
        "ship": "always",
        **kw,
    }


def remote_options(*engines: Engine, **kw: Any) -> dict[str, Any]:
    return {**DOCKER_OPTIONS, "engines": [engine_table(e) for e in engines], **kw}


async def start_remote(ws: Path, *engines: Engine, **kw: Any) -> DockerSession:
    return await start_docker(
        SessionSpec(
            roots=(ws,),
            kill_grace=0.5,
            options=remote_options(*engines, **kw.pop("options", {})),
            change_sets=True,
            **kw,
        )
    )


async def sh(session: DockerSession, command: str, cwd: Path) -> ShellResult:
    return await session.run(command, cwd=cwd, env={}, timeout=20, output_cap=64 * 1024)


def host_binds(engine: Engine, container_id: str) -> list[dict[str, Any]]:
    client = connect_docker(engine.base_url, tls=engine.tls_config())
    try:
        mounts = client.api.inspect_container(container_id)["Mounts"]
    finally:
        client.close()
    return [m for m in mounts if m.get("Type") == "bind"]


async def changes_of(workspace: Path, result: ShellResult) -> list[Change]:
    with Workspace([workspace]) as ws:
        store = CheckpointStore(ws)
        try:
            return capture(ws, store, result)
        finally:
            store.close()


def merge(workspace: Path, result: ShellResult, *, atomic: bool = True) -> Any:
    with Workspace([workspace]) as ws:
        store = CheckpointStore(ws)
        try:
            return merge_changes(ws, capture(ws, store, result), store, atomic=atomic)
        finally:
            store.close()


async def test_conformance_on_a_tls_engine_with_nothing_of_the_host_mounted(
    engines: list[EngineProcess], workspace: Path
) -> None:
    engine = engines[0].engine
    seen: list[str] = []

    async def start(spec: SessionSpec) -> DockerSession:
        session = await start_docker(spec)
        assert session.container_id is not None
        assert host_binds(engine, session.container_id) == []  # the bind-mount path is off
        seen.append(session.container_id)
        return session

    await check_backend(
        start,
        workspace,
        processes=container_processes,
        options=remote_options(engine),
        change_sets=True,
    )
    assert len(seen) == 1


async def test_a_remote_command_gives_the_local_change_set_and_merges(
    docker_client: Any, engines: list[EngineProcess], tmp_path: Path
) -> None:
    files = {
        "keep.txt": "keep\n",
        "edit.txt": "old\n",
        "gone.txt": "gone\n",
        "old/x": "x\n",
        "old/sub/y": "y\n",
        "del/p": "p\n",
        "del/q/r": "r\n",
        "again/a": "a\n",
        "again/b": "b\n",
        "trick/old": "o\n",
    }
    command = (
        "printf 'new\\n' > edit.txt && echo made > new.txt && rm gone.txt && "
        "mv old renamed && rm -r del && mkdir -p fresh/deep && echo z > fresh/deep/z && "
        "rm -r again && mkdir again && echo a2 > again/a && chmod 600 keep.txt && "
        "ln -s renamed/x link && "
        # An opaque directory holding what a fixed probe name or a protocol line would be.
        "rm -r trick && mkdir trick && touch trick/.rf-s \"trick/$(printf 'x\\n0 s 0 ff')\""
    )
    results: dict[str, list[Change]] = {}
    trees = {}
    for kind in ("local", "remote"):
        ws = tmp_path / kind
        ws.mkdir()
        os.chown(ws, 1000, 1000)
        make(ws, files)
        before = tree(ws)
        if kind == "local":
            session = await start_docker(
                SessionSpec(roots=(ws,), options=DOCKER_OPTIONS, change_sets=True)
            )
        else:
            session = await start_remote(ws, engines[0].engine)
        try:
            r = await sh(session, command, ws)
            assert r.exit_code == 0, r
            assert tree(ws) == before  # nothing reached the real workspace yet
            results[kind] = await changes_of(ws, r)
            report = merge(ws, r)
            assert not report.refused
            trees[kind] = tree(ws)
            if kind == "remote":
                # The copy in the sandbox now matches the host: a second command sees it all.
                r2 = await sh(session, "cat edit.txt new.txt renamed/sub/y again/a; ls", ws)
                assert r2.stdout.splitlines()[:4] == ["new", "made", "y", "a2"], r2
                assert r2.stdout.splitlines()[4:] == sorted(
                    [
                        "again",
                        "edit.txt",
                        "fresh",
                        "keep.txt",
                        "link",
                        "new.txt",
                        "renamed",
                        "trick",
                    ]
                )
                assert (await sh(session, "true", ws)).uppers[0].path.is_dir()
        finally:
            await session.aclose()
    assert results["remote"] == results["local"]  # the same Change list, in the same order
    assert ("again", "dir", None) in summary(results["remote"])  # the opaque directory
    assert ("again/a", None, line("a2")) in summary(results["remote"])
    assert ("trick/old", line("o"), None) in summary(results["remote"])
    assert trees["remote"] == trees["local"]


async def test_refused_writes_never_reach_the_sandbox_copy(
    engines: list[EngineProcess], workspace: Path
) -> None:
    make(workspace, {".git/HEAD": "ref: refs/heads/main\n", "a.txt": "a\n"})
    session = await start_remote(workspace, engines[0].engine)
    try:
        r = await sh(session, "echo evil > .git/hooks-x && echo ok > fine.txt", workspace)
        assert r.exit_code == 0, r
        report = merge(workspace, r, atomic=False)
        assert [e["path"] for e in report.refused] == [".git/hooks-x"]
        assert not (workspace / ".git" / "hooks-x").exists()
        r2 = await sh(session, "cat fine.txt; ls -a .git", workspace)
        assert r2.stdout.splitlines()[0] == "ok"
        assert "hooks-x" not in r2.stdout and "HEAD" in r2.stdout
        # A file tool's write on the host between commands reaches the copy too.
        (workspace / "a.txt").write_text("changed on the host\n")
        (workspace / "a.txt").chmod(0o751)
        (workspace / "fine.txt").unlink()
        r3 = await sh(session, "cat a.txt; stat -c %a a.txt; ls fine.txt", workspace)
        assert r3.stdout == "changed on the host\n751\n" and r3.exit_code != 0, r3
    finally:
        await session.aclose()


async def test_ship_git_skip_keeps_git_directories_off_the_engine(
    engines: list[EngineProcess], workspace: Path
) -> None:
    make(workspace, {".git/HEAD": "ref: refs/heads/main\n", "a.txt": "a\n"})
    session = await start_remote(workspace, engines[0].engine, options={"ship_git": "skip"})
    try:
        r = await sh(session, "cat a.txt; ls -a", workspace)
        assert r.stdout.splitlines()[0] == "a" and ".git" not in r.stdout
    finally:
        await session.aclose()


async def test_remote_options_are_checked_with_their_field(
    engines: list[EngineProcess], workspace: Path
) -> None:
    engine = engines[0].engine
    cases = [
        ({"ship_git": "sometimes"}, True, "options.ship_git"),
        ({"base_url": engine.base_url}, True, "options.engines"),
        ({}, False, "options.engines"),  # without change sets: writes could never come back
    ]
    for extra, change_sets, field in cases:
        spec = SessionSpec(
            roots=(workspace,),
            options=remote_options(engine, **extra),
            change_sets=change_sets,
        )
        with pytest.raises(InvalidArguments) as info:
            await start_docker(spec)
        assert info.value.field == field, extra
    bad = {**remote_options(engine), "engines": [{**engine_table(engine), "tls_key": "/nope"}]}
    with pytest.raises(InvalidArguments) as info:
        await start_docker(SessionSpec(roots=(workspace,), options=bad, change_sets=True))
    assert info.value.field == "options.engines[0].tls_key"


async def test_a_pool_places_the_session_on_the_less_loaded_engine(
    engines: list[EngineProcess], workspace: Path
) -> None:
    a, b = engines[0].engine, engines[1].engine
    client = connect_docker(a.base_url, tls=a.tls_config())
    busy = [
        client.containers.run(IMAGE, ["sleep", "300"], detach=True, network_mode="none")
        for _ in range(2)
    ]
    try:
        session = await start_remote(workspace, a, b)
        try:
            assert session.metadata["engine"] == "ship-b"
            placement = {p["engine"]: p["running"] for p in session.metadata["placement"]}
            assert placement["ship-a"] >= 2 and placement["ship-b"] == 0
            r = await sh(session, "echo placed", workspace)
            assert r.stdout == "placed\n"
            # The script bridge rides an exec's own stream there (ringfence.bridge._remote).
            exec_id, stream = await session.exec_attached(["true"], user="1000:1000")
            while await stream.recv(4096):
                pass
            stream.close()
            assert (await session.exec_info(exec_id))["ExitCode"] == 0
        finally:
            await session.aclose()
    finally:
        for c in busy:
            c.remove(force=True)
        client.close()


async def test_an_engine_lost_mid_command_fails_the_session_naming_it(
    workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reason = can_start_engine()
    if reason is not None:
        _skip_or_fail(reason)
    handle = start_tls_engine(
        tmp_path_factory.mktemp("doomed"), name="doomed", load_images=(IMAGE,)
    )
    try:
        make(workspace, {"a.txt": "a\n"})
        before = tree(workspace)
        session = await start_remote(workspace, handle.engine)
        try:
            assert (await sh(session, "echo ok", workspace)).stdout == "ok\n"

            async def kill_soon() -> None:
                await trio.sleep(1.0)
                # The engine stops under the command (its containers with it), as in a restart.
                await trio.to_thread.run_sync(stop_engine, handle)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_soon)
                with pytest.raises(RingfenceError) as info:
                    await sh(session, "echo x > written.txt; sleep 30", workspace)
            assert info.value.code in ("unavailable", "tool_error")
            assert "engine doomed" in info.value.message, info.value.message
            assert "docker.sock" not in info.value.message
            with pytest.raises(Unavailable) as again:
                await sh(session, "true", workspace)
            assert "engine doomed" in again.value.message
            assert tree(workspace) == before  # nothing of the lost command arrived
        finally:
            with trio.move_on_after(20):
                await session.aclose()
    finally:
        stop_engine(handle)


def test_a_change_set_that_did_not_arrive_whole_writes_nothing(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("big")
        info.size = 4096
        tar.addfile(info, io.BytesIO(b"x" * 4096))
    whole = buf.getvalue()
    target = tmp_path / "u"
    for data, digest in (
        (whole[:1000], hashlib.sha256(whole).hexdigest()),  # cut short
        (whole[:1000], hashlib.sha256(whole[:1000]).hexdigest()),  # cut, digest of the cut
    ):
        target.mkdir()
        with pytest.raises(Unavailable) as info:
            rebuild_upper(data, digest, str(target), [], engine="e1")
        assert "e1" in info.value.message and "unchanged" in info.value.message
        assert not any(target.iterdir()) or info.value.message.startswith("the change set")
        for p in target.iterdir():
            p.unlink()
        target.rmdir()


def _tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """A tar of (name, kind, data or link target) members, kinds: file dir symlink chr13."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "chr13": tarfile.CHRTYPE,
            }[kind]
            if kind == "symlink":
                info.linkname = str(data)
            if kind == "chr13":
                info.devmajor, info.devminor = 1, 3
            tar.addfile(info)
    return buf.getvalue()


def test_a_hostile_change_set_tar_is_refused_whole_and_writes_nothing_outside(
    tmp_path: Path,
) -> None:

    if os.geteuid() != 0:
        pytest.skip("rebuilding a remote upper needs root (whiteouts)")
    outside = tmp_path / "outside"
    outside.mkdir()
    cases = {
        "dot-dot": _tar(("../escape", "file", b"x")),
        "absolute": _tar((f"{outside}/abs", "file", b"x")),
        "through a link": _tar(("a", "symlink", str(outside)), ("a/x", "file", b"x")),
        "a device": _tar(("null", "chr13", b"")),
        "a repeated name": _tar(("f", "file", b"1"), ("f", "file", b"2")),
    }
    for what, data in cases.items():
        target = tmp_path / f"u-{what.replace(' ', '-')}"
        target.mkdir()
        with pytest.raises(RingfenceError) as info:
            rebuild_upper(data, hashlib.sha256(data).hexdigest(), str(target), [], engine="e1")
        assert info.value.code == "tool_error", what
        assert list(outside.iterdir()) == [], what
        assert not (tmp_path / "escape").exists(), what
        assert not (target / "null").exists(), what


async def test_a_read_only_directory_still_syncs(
    engines: list[EngineProcess], workspace: Path
) -> None:
    # The container user cannot write into a 0555 directory: the shell's extraction fails
    # and the sync falls back to put_archive (root on the engine), never to a stale copy.
    make(workspace, {"ro/x": "one\n"})
    (workspace / "ro").chmod(0o555)
    session = await start_remote(workspace, engines[0].engine)
    try:
        assert (await sh(session, "cat ro/x", workspace)).stdout == "one\n"
        (workspace / "ro" / "x").write_text("two\n")
        r = await sh(session, "cat ro/x; stat -c %a ro", workspace)
        assert r.stdout == "two\n555\n", r
    finally:
        await session.aclose()
        (workspace / "ro").chmod(0o755)


async def test_a_ship_cut_short_is_redone_from_empty(
    engines: list[EngineProcess], workspace: Path
) -> None:
    # A sync cancelled at several points on its way: the session starts a fresh shell and
    # the next sync empties the copy and ships everything, so nothing stale or half
    # written stays (a file deleted on the host meanwhile must be gone).
    make(workspace, {"a.txt": "a\n"})
    session = await start_remote(workspace, engines[0].engine)
    try:
        assert (await sh(session, "cat a.txt", workspace)).stdout == "a\n"
        cuts = 0
        for n, delay in enumerate((0.0005, 0.002, 0.005, 0.01, 0.03, 0.06)):
            big = os.urandom(900_000)
            (workspace / "big.bin").write_bytes(big)
            (workspace / f"gone{n}.txt").write_text("shipped, then deleted on the host\n")
            await sh(session, "true", workspace)
            (workspace / f"gone{n}.txt").unlink()
            big = os.urandom(900_000)
            (workspace / "big.bin").write_bytes(big)
            with trio.move_on_after(delay) as scope:
                await sh(session, "true", workspace)
            cuts += scope.cancelled_caught
            r = await sh(session, "ls -A; sha256sum big.bin", workspace)
            assert r.stdout.splitlines()[:-1] == ["a.txt", "big.bin"], (delay, r)
            assert r.stdout.split()[-2] == hashlib.sha256(big).hexdigest(), (delay, r)
        assert cuts, "no ship was caught mid-way"
    finally:
        await session.aclose()


async def test_a_cancelled_commands_writes_never_join_the_next_change_set(
    engines: list[EngineProcess], workspace: Path
) -> None:
    session = await start_remote(workspace, engines[0].engine)
    try:
        with trio.CancelScope() as scope:

            def on_output(stream: str, text: str) -> None:
                if "written" in text:
                    scope.cancel()

            await session.run(
                "echo x > cancelled.txt; echo written; sleep 30",
                cwd=workspace,
                env={},
                timeout=20,
                output_cap=4096,
                on_output=on_output,
            )
        assert scope.cancelled_caught
        r = await sh(session, "echo y > next.txt; ls", workspace)
        assert r.stdout == "next.txt\n", r  # the cancelled write is not in the copy...
        assert [c.path for c in await changes_of(workspace, r)] == ["next.txt"]  # ...nor here
    finally:
        await session.aclose()


async def test_names_that_are_not_utf8_travel_both_ways(
    engines: list[EngineProcess], workspace: Path
) -> None:
    raw = os.fsdecode(b"caf\xe9.txt")  # Latin-1, not UTF-8
    (workspace / raw).write_text("old\n")
    (workspace / "日本.txt").write_text("jp\n")
    session = await start_remote(workspace, engines[0].engine)
    try:
        r = await sh(session, 'cat 日本.txt; for f in caf*; do echo new > "$f"; done', workspace)
        assert r.stdout == "jp\n", r
        changes = await changes_of(workspace, r)
        assert [(c.path, c.after and c.after.digest) for c in changes] == [
            (raw, hashlib.sha256(b"new\n").hexdigest())
        ]
    finally:
        await session.aclose()


async def test_undo_of_a_remote_change_set_restores_the_host_and_the_copy(
    engines: list[EngineProcess], workspace: Path
) -> None:
    import time

    from ringfence.workspace import ChangeSet, undo

    make(workspace, {"edit.txt": "old\n", "old/x": "x\n", "gone.txt": "gone\n"})
    before = tree(workspace)
    session = await start_remote(workspace, engines[0].engine)
    try:
        r = await sh(
            session, "echo new > edit.txt; mv old renamed; rm gone.txt; echo n > n.txt", workspace
        )
        with Workspace([workspace]) as ws:
            store = CheckpointStore(ws)
            try:
                report = merge_changes(ws, capture(ws, store, r), store)
                store.save(ChangeSet(store.new_id(), time.time(), "run_shell", report.applied))
                assert tree(workspace) != before
                undo(store, last=1)
            finally:
                store.close()
        assert tree(workspace) == before  # byte for byte, modes too
        r2 = await sh(session, "cat edit.txt old/x gone.txt; ls", workspace)
        assert r2.stdout == "old\nx\ngone\nedit.txt\ngone.txt\nold\n", r2
    finally:
        await session.aclose()


async def test_a_tls_engine_that_shares_our_files_bind_mounts_them(
    engines: list[EngineProcess], workspace: Path
) -> None:
    # ship = "never": the operator says the engine sees this machine's paths (here it
    # does: loopback). The supervisor's stream is still our own TLS connection.
    engine = engines[0].engine
    options = {**DOCKER_OPTIONS, "engines": [engine_table(engine, ship="never")]}
    session = await start_docker(SessionSpec(roots=(workspace,), options=options))
    try:
        assert session.metadata["workspace"] == "bind-mount" and session.metadata["tls"]
        r = await sh(session, "echo direct > f.txt; cat f.txt", workspace)
        assert r.stdout == "direct\n" and not r.uppers
        assert (workspace / "f.txt").read_text() == "direct\n"
    finally:
        await session.aclose()


async def test_a_fetch_cut_short_loses_nothing_and_leaks_nothing(
    engines: list[EngineProcess], workspace: Path
) -> None:
    # The caller gives up while the change set is on its way back (after the command's
    # end marker): no partial set reaches it, the workspace is unchanged, and the next
    # command's change set holds only its own writes.
    before = tree(workspace)
    session = await start_remote(workspace, engines[0].engine, options={"memory": "256m"})
    try:
        caught = False
        for delay in (0.0, 0.005, 0.02):
            with trio.CancelScope() as scope:

                def on_output(
                    stream: str, text: str, scope: trio.CancelScope = scope, delay: float = delay
                ) -> None:
                    if "done" in text:
                        scope.deadline = trio.current_time() + delay

                await session.run(
                    "head -c 8000000 /dev/urandom > big.bin; echo done",
                    cwd=workspace,
                    env={},
                    timeout=30,
                    output_cap=4096,
                    on_output=on_output,
                )
            caught |= scope.cancelled_caught
            assert tree(workspace) == before
            r = await sh(session, "echo mine > mine.txt; ls", workspace)
            assert r.stdout == "mine.txt\n", r
            assert [c.path for c in await changes_of(workspace, r)] == ["mine.txt"]
        assert caught, "no fetch was caught mid-way"
    finally:
        await session.aclose()


_AS_NOBODY = r"""
import hashlib, io, json, os, sys, tarfile
from ringfence.backends.engines._ship import rebuild_upper
from ringfence.workspace.changes._upper import changes_from_upper

lower, upper = sys.argv[1], sys.argv[2]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tar:
    for name, kind in (("gone.txt", "wh"), ("d", "dir"), ("d/new", "file")):
        info = tarfile.TarInfo(name)
        if kind == "wh":
            info.type, info.devmajor, info.devminor, info.mode = tarfile.CHRTYPE, 0, 0, 0
        elif kind == "dir":
            info.type, info.mode = tarfile.DIRTYPE, 0o755
        else:
            info.size, info.mode = 2, 0o644
        tar.addfile(info, io.BytesIO(b"n\n") if kind == "file" else None)
data = buf.getvalue()
rebuild_upper(data, hashlib.sha256(data).hexdigest(), upper, ["d"], engine="e1")


class Blobs:
    def put(self, data):
        return hashlib.sha256(data).hexdigest()

    def put_fd(self, fd):
        data = os.read(fd, 1 << 20)
        return hashlib.sha256(data).hexdigest(), len(data)

    def __getattr__(self, name):
        raise AttributeError(name)


u, l = os.open(upper, os.O_RDONLY | os.O_DIRECTORY), os.open(lower, os.O_RDONLY | os.O_DIRECTORY)
print(json.dumps([[c.path, c.before and c.before.kind, c.after and c.after.kind]
                  for c in changes_from_upper(u, l, 0, Blobs())]))
"""


def test_a_change_set_is_rebuilt_without_root() -> None:
    # Whiteouts (character devices 0:0) need no privilege on Linux 5.8+, the opaque mark
    # is a user xattr: a kernel not running as root reads a remote change set too.
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid for the check")
    tmp_path = Path(tempfile.mkdtemp(prefix="rf-nobody-"))  # pytest's own is root's, 0700
    try:
        _rebuild_as_nobody(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def _rebuild_as_nobody(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "d").mkdir(parents=True)
    (lower / "d" / "old").write_text("o\n")
    (lower / "gone.txt").write_text("g\n")
    upper.mkdir()
    for p in (tmp_path, lower, lower / "d", lower / "d" / "old", lower / "gone.txt", upper):
        os.chown(p, 65534, 65534)
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
         _AS_NOBODY, str(lower), str(upper)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        ["d/old", "file", None],  # the opaque directory replaced the lower one...
        ["d", "dir", None],
        ["d", None, "dir"],
        ["d/new", None, "file"],
        ["gone.txt", "file", None],  # ...and the whiteout deleted gone.txt
    ]


async def test_run_shell_on_a_remote_engine_merges_through_the_gate(
    engines: list[EngineProcess], workspace: Path, tmp_path: Path
) -> None:
    """Through the public kernel: writes merge, git metadata is refused, events name the engine."""
    import json

    from ringfence import create_kernel
    from ringfence.runtime import Posture

    make(workspace, {".git/config": "[core]\n", "a.txt": "old\n"})
    before = tree(workspace)
    events = tmp_path / "events.jsonl"
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options=remote_options(engines[0].engine),
        change_sets=True,
        events_path=events,
    ) as k:
        ok = await k.call("run_shell", {"command": "echo new > a.txt"})
        refused = await k.invoke(
            "run_shell", {"command": "echo '[core] fsmonitor = evil' >> .git/config"}
        )
        seen = await k.call("run_shell", {"command": "cat a.txt .git/config"})
    assert ok["changes"]["files"] == 1 and (workspace / "a.txt").read_text() == "new\n"
    assert refused.error is not None and refused.error.code == "git_metadata"
    assert tree(workspace)[".git/config"] == before[".git/config"]  # nothing on the host
    assert seen["stdout"] == "new\n[core]\n"  # ...nor in the sandbox's copy
    started = [json.loads(x) for x in events.read_text().splitlines() if "backend_started" in x]
    sandbox = started[0]["sandbox"]
    assert sandbox["engine"] == engines[0].engine.name and sandbox["workspace"] == "shipped"
    assert sandbox["tls"] is True and [p["engine"] for p in sandbox["placement"]] == ["ship-a"]


async def test_persist_shell_state_carries_over_on_a_remote_engine(
    engines: list[EngineProcess], workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    session = await start_remote(
        workspace, engines[0].engine, options={"persist_shell_state": True}
    )
    try:
        await session.run(
            "cd sub; export KEPT=yes", cwd=workspace, env={}, timeout=20, output_cap=4096,
            follow_shell=True,
        )  # fmt: skip
        r = await session.run(
            'pwd; echo "$KEPT"', cwd=workspace, env={}, timeout=20, output_cap=4096,
            follow_shell=True,
        )  # fmt: skip
        assert r.stdout == "/workspace/sub\nyes\n", r
    finally:
        await session.aclose()


async def test_a_warm_pool_on_a_tls_engine_is_claimed_then_shipped(
    engines: list[EngineProcess], tmp_path: Path
) -> None:
    """A pool for a remote engine: the claim takes a warm container there without an Engine API
    call, the first command ships the roots (nothing of the host mounted), its writes come
    back as the exact change set, and the container is never handed out again."""
    engine = engines[0].engine
    ws = tmp_path / "ws"
    make(ws, {"a.txt": "a\n"})
    options = remote_options(engine)
    spec = SessionSpec(roots=(ws,), kill_grace=0.5, options=options, change_sets=True)
    async with WarmPool(options, size=1) as pool:
        await pool.wait_warm()
        session = await start_docker(spec)
        try:
            # How fast a claim is belongs to `ringfence bench docker-pool`, not to a test.
            assert session.metadata["pool"]["claimed"] is True
            assert session.container_id is not None
            assert host_binds(engine, session.container_id) == []
            r = await sh(session, "cat a.txt && echo b > b.txt", ws)
            assert r.exit_code == 0 and r.stdout == "a\n", r
            assert [c.path for c in await changes_of(ws, r)] == ["b.txt"]
            first = session.container_id
        finally:
            await session.aclose()
        await pool.wait_warm()
        again = await start_docker(spec)
        try:
            assert again.container_id != first and again.metadata["pool"]["claimed"] is True
        finally:
            await again.aclose()
        assert pool.stats().claims == 2 and pool.stats().misses == 0


async def test_a_chmod_of_the_root_on_a_remote_engine_is_refused_by_name_not_dropped(
    engines: list[EngineProcess], workspace: Path
) -> None:
    """As on the local engine (``test_a_chmod_of_the_root_itself_is_refused_by_name_not_dropped``):
    a command's ``chmod .`` changed only the shipped overlay's upper directory, which the
    fetch skipped when it held no entry and rebuilt without its own mode: the change was
    dropped without a word. Now it is fetched, refused at the merge and named, the rest
    merged, and the next command sees the root's own mode (and a mode the host gave it
    meanwhile, not reported as the command's)."""
    from ringfence import create_kernel
    from ringfence.runtime import Posture

    workspace.chmod(0o755)
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options=remote_options(engines[0].engine),
        change_sets=True,
    ) as k:
        first = await k.call("run_shell", {"command": "stat -c %a ."})
        alone = await k.invoke("run_shell", {"command": "chmod 700 ."})
        mixed = await k.invoke("run_shell", {"command": "chmod 777 . && echo x > f"})
        after = await k.call("run_shell", {"command": "stat -c %a ."})
        kept = stat.S_IMODE(workspace.stat().st_mode)
        workspace.chmod(0o750)  # the host's own chmod between commands: seen, not reported
        host = await k.call("run_shell", {"command": "stat -c %a ."})
    assert first["stdout"] == "755\n" and first["changes"] is None, first
    for outcome, mode in ((alone, "0700"), (mixed, "0777")):
        assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
        (refused,) = outcome.error.details["changes"]["refused"]
        assert refused["path"] == "." and f"0755 to {mode}" in refused["message"], refused
    assert (workspace / "f").read_text() == "x\n"  # the rest was merged
    assert kept == 0o755
    assert after["stdout"] == "755\n" and after["changes"] is None, after
    assert host["stdout"] == "750\n" and host["changes"] is None, host
