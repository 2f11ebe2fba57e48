"""Warm pools and leases (issue 34): a session claims a started container; nothing outlives its owner.

Real daemon, real containers: a :class:`WarmPool` keeps generic shipped containers
warm, a change-set session of the same shape claims one without an Engine API call,
its writes come back as the exact change set, the container is never handed out
again, and a killed owner's containers and volumes are gone within seconds
(``docker._container``'s lease), with no other ringfence process to sweep them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker.errors
import pytest
import trio
from backends_helpers import DOCKER_OPTIONS
from test_backends_docker_changesets import capture, make, summary

from ringfence.backends import SessionSpec
from ringfence.backends.docker._pool import WarmPool
from ringfence.backends.docker._session import start_docker
from ringfence.runtime import InvalidArguments
from ringfence.workspace import CheckpointStore, Workspace
from ringfence.workspace.changes._merge import merge_changes

pytestmark = pytest.mark.docker
OPTIONS = dict(DOCKER_OPTIONS)


def spec(ws: Path, **options: object) -> SessionSpec:
    return SessionSpec(
        roots=(ws,), kill_grace=0.5, options={**OPTIONS, **options}, change_sets=True
    )


def owned_by(client, pid: int) -> list:
    label = f"ringfence.owner={socket.gethostname()}:{pid}"
    return client.containers.list(all=True, filters={"label": label}, ignore_removed=True)


async def test_a_claimed_container_runs_the_session_and_is_never_handed_out_again(
    docker_client, workspace: Path
) -> None:
    make(workspace, {"edit.txt": "one\n", "gone.txt": "bye\n"})
    async with WarmPool(OPTIONS, size=1) as pool:
        await pool.wait_warm()
        warm_ids = {c.id for c in owned_by(docker_client, os.getpid())}
        session = await start_docker(spec(workspace))
        try:
            # How fast a claim is belongs to `ringfence bench docker-pool`, not to a test.
            assert session.container_id in warm_ids
            assert session.metadata["pool"]["claimed"] is True
            assert session.metadata["workspace"] == "shipped"
            r = await session.run(
                "cat edit.txt && echo two >> edit.txt && rm gone.txt && echo new > made.txt",
                cwd=workspace, env={}, timeout=20, output_cap=4096,
            )  # fmt: skip
            assert r.exit_code == 0 and r.stdout == "one\n", r
            with Workspace([workspace]) as ws:
                store = CheckpointStore(ws)
                try:
                    changes = capture(ws, store, r)
                    assert {c.path for c in changes} == {"edit.txt", "gone.txt", "made.txt"}
                    assert ("gone.txt", "file", None) in {
                        (p, b and b.split(":")[0], a) for p, b, a in summary(changes)
                    }
                    merge_changes(ws, changes, store)
                finally:
                    store.close()
            assert (workspace / "edit.txt").read_text() == "one\ntwo\n"
            assert not (workspace / "gone.txt").exists()
            claimed = session.container_id
        finally:
            await session.aclose()
        await pool.wait_warm()
        # The claimed container went with its session; the pool started a fresh one.
        now = {c.id for c in owned_by(docker_client, os.getpid())}
        assert claimed not in now and len(now) == 1
        stats = pool.stats()
        assert stats.claims == 1 and stats.misses == 0 and stats.failures == 0


async def test_concurrent_claims_take_each_container_once_and_misses_start_cold(
    docker_client, tmp_path: Path
) -> None:
    roots = []
    for i in range(4):
        root = tmp_path / f"ws{i}"
        root.mkdir(mode=0o755)
        (root / "id.txt").write_text(f"{i}\n")
        roots.append(root)
    sessions: list = [None] * 4
    async with WarmPool(OPTIONS, size=2) as pool:
        await pool.wait_warm()

        async def one(i: int) -> None:
            sessions[i] = await start_docker(spec(roots[i]))

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(one, i)
        try:
            ids = [s.container_id for s in sessions]
            assert len(set(ids)) == 4
            assert sorted(s.pooled for s in sessions) == [False, False, True, True]
            stats = pool.stats()
            assert stats.claims == 2 and stats.misses == 2
            for i, s in enumerate(sessions):  # each sees its own workspace only
                r = await s.run("cat id.txt", cwd=roots[i], env={}, timeout=20, output_cap=64)
                assert r.stdout == f"{i}\n", r
        finally:
            for s in sessions:
                await s.aclose()


async def test_another_shape_does_not_claim(docker_client, workspace: Path) -> None:
    async with WarmPool(OPTIONS, size=1) as pool:
        await pool.wait_warm()
        session = await start_docker(spec(workspace, memory="128m"))
        try:
            assert session.pooled is False and "pool" not in session.metadata
            assert session.metadata.get("workspace", "bind-mount") == "bind-mount"
        finally:
            await session.aclose()
        assert pool.stats().claims == 0


def test_bad_pool_options_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArguments) as info:
        WarmPool(OPTIONS, size=0)
    assert info.value.field == "size"
    with pytest.raises(InvalidArguments) as info:
        WarmPool({**OPTIONS, "memory": "lots"})
    assert info.value.field == "options.memory"


KILLED_HOST = """
import sys, trio
from pathlib import Path
from ringfence import create_kernel
from ringfence.backends.docker._pool import WarmPool
from ringfence.runtime import Posture

OPTIONS = {options!r}

async def main():
    async with WarmPool(OPTIONS, size=1) as pool:
        await pool.wait_warm()
        async with create_kernel(
            roots=[Path(sys.argv[1])], backend="docker", backend_options=OPTIONS,
            posture=Posture.ALLOW_REVERSIBLE,
        ) as kernel:
            await kernel.call("run_shell", {{"command": "echo hi > a.txt"}})
            await pool.wait_warm()
            print("ready", flush=True)
            await trio.sleep(600)

trio.run(main)
"""


def test_a_killed_kernel_leaves_no_container_and_no_volume(docker_client, workspace: Path) -> None:
    """SIGKILL a kernel holding a claimed container (shipped: its volume) and a warm one:
    both containers and their volumes are gone within seconds, no sweep needed."""
    script = workspace.parent / "host.py"
    script.write_text(KILLED_HOST.format(options=OPTIONS))
    host = subprocess.Popen(
        [sys.executable, str(script), str(workspace)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None and host.stdout.readline() == "ready\n"
        assert (workspace / "a.txt").read_text() == "hi\n"
        containers = owned_by(docker_client, host.pid)
        assert len(containers) == 2, containers
        volumes = {
            m["Name"]
            for c in containers
            for m in docker_client.api.inspect_container(c.id)["Mounts"]
            if m["Type"] == "volume"
        }
        assert len(volumes) == 2
        host.send_signal(signal.SIGKILL)
        host.wait(10)
        deadline = time.monotonic() + 10
        while owned_by(docker_client, host.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert owned_by(docker_client, host.pid) == []
        left = {v.name for v in docker_client.volumes.list()} & volumes
        assert left == set()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()
        for c in owned_by(docker_client, host.pid):
            c.remove(force=True, v=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a view as a killed session would leave it")
async def test_a_killed_sessions_directories_and_views_go_at_the_next_session(
    docker_client, workspace: Path, ringfence_home: Path
) -> None:
    """A leased container leaves with its killed owner, so nothing names its change-set
    directories again: the next docker session on this host removes them (an id-mapped view
    still mounted is unmounted first), once past the grace a starting session needs."""
    from ringfence.backends.docker._session import ORPHAN_GRACE_SECONDS

    base = ringfence_home / "docker-uppers"
    old, young, alive = base / "0123456789ab", base / "ba9876543210", base / "aaaaaaaaaaaa"
    shown = workspace.parent / "shown"
    shown.mkdir()
    (shown / "keep.txt").write_text("the workspace a view showed\n")
    for top in (old, young, alive):
        (top / "c" / "0" / "u").mkdir(parents=True)
        (top / "l0").mkdir()
    (alive / "owner").write_text(str(os.getpid()))  # a live process's session, between containers
    subprocess.run(["mount", "--bind", "-o", "ro", str(shown), str(old / "l0")], check=True)
    try:
        past = time.time() - ORPHAN_GRACE_SECONDS - 60
        os.utime(old, (past, past))
        os.utime(alive, (past, past))
        session = await start_docker(spec(workspace))
        await session.aclose()
        assert not old.exists()
        assert young.is_dir()  # too young to be an orphan: it may be a session starting
        assert alive.is_dir()  # its owner runs: its container may be starting again
        assert (shown / "keep.txt").read_text() == "the workspace a view showed\n"
    finally:
        subprocess.run(["umount", "-l", str(old / "l0")], check=False, capture_output=True)


KILLED_POOL = """
import trio
from ringfence.backends.docker._pool import WarmPool

async def main():
    async with WarmPool({options!r}, size=1) as pool:
        await pool.wait_warm()
        print("ready", flush=True)
        await trio.sleep(600)

trio.run(main)
"""


async def test_a_killed_pools_directory_goes_when_the_next_pool_opens(
    docker_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool's process SIGKILLed closes nothing: its containers go with their leases, but
    its directory (``$TMPDIR/ringfence-pool-*``) stayed for good, one per killed pool. Now
    the pool claims it for its life, and the next pool to open removes one nobody holds
    (never a live pool's)."""
    import tempfile

    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    env = {**os.environ, "TMPDIR": str(base)}
    host = subprocess.Popen(
        [sys.executable, "-c", KILLED_POOL.format(options=OPTIONS)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert host.stdout is not None and host.stdout.readline() == "ready\n"
        (dead,) = base.glob("ringfence-pool-*")
        host.send_signal(signal.SIGKILL)
        host.wait(10)
        assert dead.is_dir()  # the killed pool removed nothing
        async with WarmPool(OPTIONS, size=1):
            (live,) = base.glob("ringfence-pool-*")
            assert live != dead and not dead.exists()
            async with WarmPool(OPTIONS, size=1):  # a second pool leaves the live one's alone
                assert live.is_dir() and len(list(base.glob("ringfence-pool-*"))) == 2
        assert list(base.glob("ringfence-pool-*")) == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()
        for c in owned_by(docker_client, host.pid):  # the lease removes them: at most racing it
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True, v=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's directory")
async def test_a_pools_sweep_leaves_another_users_directory_alone(
    docker_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep of killed pools' directories runs in the temporary directory, which other
    users write too. A directory another user made there, named like a pool's and with an
    unheld mark, is theirs: a root pool removing it would delete their files, and while it
    did, they could put a link in its place (``remove_tree`` chmods by path). Only this
    user's directories are swept."""
    import tempfile

    from ringfence.backends._trees import ALIVE

    base = tmp_path / "tmp"
    base.mkdir()
    base.chmod(0o1777)  # a shared temporary directory
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    planted = base / "ringfence-pool-planted"
    planted.mkdir()
    (planted / ALIVE).write_text("")
    (planted / "theirs.txt").write_text("another user's file\n")
    for path in (planted, planted / ALIVE, planted / "theirs.txt"):
        os.chown(path, 1000, 1000)
    async with WarmPool(OPTIONS, size=1):
        pass
    assert (planted / "theirs.txt").read_text() == "another user's file\n"
    assert [p.name for p in base.iterdir()] == [planted.name]
