"""The docker backend against a real daemon: hardening asserted from inside the container."""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import docker
import pytest
import trio
from backends_helpers import DOCKER_OPTIONS, chown_like_workspace

from ringfence.backends import SessionSpec
from ringfence.backends.docker._session import (
    CONTAINER_LABEL,
    OWNER_SPACE_LABEL,
    DockerSession,
    owner_space,
    remove_stale_containers,
    start_docker,
)
from ringfence.runtime import InvalidArguments, Unavailable

pytestmark = pytest.mark.docker


async def start(ws: Path, **kw) -> DockerSession:
    options = {**DOCKER_OPTIONS, **kw.pop("options", {})}
    return await start_docker(SessionSpec(roots=(ws,), kill_grace=0.5, options=options, **kw))


async def sh(session: DockerSession, command: str, cwd: Path, **kw):
    kw.setdefault("timeout", 20)
    return await session.run(command, cwd=cwd, env={}, output_cap=64 * 1024, **kw)


async def test_hardening_from_inside(docker_client, workspace: Path, monkeypatch) -> None:
    secret = "AKIA" + secrets.token_hex(12)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("GITHUB_TOKEN", secret + "gh")
    session = await start(workspace)
    try:
        status = await sh(session, "cat /proc/self/status", workspace)
        fields = dict(line.split(":\t", 1) for line in status.stdout.splitlines() if ":\t" in line)
        for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
            assert int(fields[cap].strip(), 16) == 0, f"{cap} = {fields[cap]}"
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["Seccomp"].strip() == "2"  # the default seccomp filter applies

        net = await sh(session, "ls /sys/class/net; cat /proc/net/dev", workspace)
        assert net.stdout.split("\n", 1)[0] == "lo"
        interfaces = {line.split(":")[0].strip() for line in net.stdout.splitlines() if ":" in line}
        assert interfaces == {"lo"}, interfaces

        ro = await sh(session, "touch /etc/evil; echo x > /bin/evil; mkdir /evil", workspace)
        assert ro.exit_code != 0 and ro.stderr.count("Read-only file system") == 3, ro
        # /tmp is writable but not executable
        tmp = await sh(session, "cp /bin/busybox /tmp/bb && /tmp/bb true", workspace)
        assert tmp.exit_code == 126 and "Permission denied" in tmp.stderr, tmp

        ids = await sh(session, "id -u; id -g", workspace)
        owner = workspace.stat()
        assert ids.stdout.split() == [str(owner.st_uid), str(owner.st_gid)]  # never root
        assert owner.st_uid != 0

        env = await sh(session, "env; cat /proc/1/environ", workspace)
        assert secret not in env.stdout + env.stderr
        assert "AWS_SECRET_ACCESS_KEY" not in env.stdout and "GITHUB_TOKEN" not in env.stdout
        assert "Permission denied" in env.stderr  # the root main process is out of reach

        # The same, seen from outside.
        attrs = docker_client.api.inspect_container(session.container_id)
        host = attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True
        assert host["NetworkMode"] == "none" and host["Init"] is True
        assert host["PidsLimit"] == 64 and host["Memory"] == host["MemorySwap"] == 96 * 2**20
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert host["Privileged"] is False
        assert attrs["Config"]["Labels"][CONTAINER_LABEL] == "1"
        assert not any(secret in e for e in attrs["Config"]["Env"])
    finally:
        await session.aclose()


async def test_pids_limit_stops_a_fork_bomb(docker_client, workspace: Path) -> None:
    session = await start(workspace)
    try:
        bomb = await sh(
            session, "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", workspace
        )
        assert "can't fork" in bomb.stderr, bomb  # the limit was hit ...
        # ... and held. Whether the command's own shell got to `echo` depends on when its
        # next fork came (busybox ash exits on a failed fork), so only the session's health
        # after the bomb is asserted: nothing of it is left and the next command runs.
        assert bomb.stdout in ("", "survived\n"), bomb
        assert len(await session.top()) == 3, await session.top()  # init, sleep, supervisor
        # A control: the same number of processes, below the limit, is fine.
        ok = await sh(
            session, "i=0; while [ $i -lt 20 ]; do sleep 60 & i=$((i+1)); done; echo $i", workspace
        )
        assert ok.stdout == "20\n" and ok.exit_code == 0
        flood = await sh(
            session, "i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; echo $i", workspace
        )
        assert flood.exit_code != 0 and "can't fork" in flood.stderr, flood
        after = await sh(session, "echo alive", workspace)
        assert after.stdout == "alive\n" and not after.session_restarted
        assert len(await session.top()) == 3
    finally:
        await session.aclose()


async def test_memory_limit_stops_a_memory_hog(docker_client, workspace: Path) -> None:
    session = await start(workspace)
    try:
        small = await sh(
            session, "x=$(head -c 8000000 /dev/zero | tr '\\0' x); echo ${#x}", workspace
        )
        assert small.stdout == "8000000\n", small  # the control: 8 MB is fine
        hog = await sh(
            session, "x=$(head -c 400000000 /dev/zero | tr '\\0' x); echo ${#x}", workspace
        )
        assert hog.exit_code == 137 and hog.signal == 9 and hog.stdout == "", hog
        after = await sh(session, "echo alive", workspace)
        assert after.stdout == "alive\n" and not after.session_restarted
    finally:
        await session.aclose()


async def test_git_directory_is_read_only_inside(docker_client, workspace: Path) -> None:
    git = workspace / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n\tbare = false\n")
    (workspace / "src").mkdir()
    chown_like_workspace(workspace, git, git / "hooks", git / "config", workspace / "src")
    session = await start(workspace, readonly_paths=(git,))
    try:
        attack = await sh(
            session,
            "echo '[core] hooksPath=/tmp' >> /workspace/.git/config; "
            "echo evil > /workspace/.git/hooks/pre-commit; "
            "rm -rf /workspace/.git; mv /workspace/.git /workspace/g2; "
            "echo ok > /workspace/src/x",
            workspace,
        )
        assert attack.stderr.count("Read-only file system") >= 2, attack
        assert (git / "config").read_text() == "[core]\n\tbare = false\n"
        assert not (git / "hooks" / "pre-commit").exists()
        assert not (workspace / "g2").exists() and git.is_dir()
        assert (workspace / "src" / "x").read_text() == "ok\n"
    finally:
        await session.aclose()


async def test_session_restarts_when_the_supervisor_or_container_dies(
    docker_client, workspace: Path
) -> None:
    session = await start(workspace)
    try:
        lost = await sh(session, "kill -9 $PPID; sleep 5", workspace)
        assert lost.session_restarted and lost.exit_code is None and lost.status == "lost"
        again = await sh(session, "echo back", workspace)
        assert again.stdout == "back\n" and not again.session_restarted
        first_container = session.container_id
        docker_client.containers.get(first_container).kill()
        replaced = await sh(session, "echo new container", workspace)
        assert replaced.stdout == "new container\n" and replaced.session_restarted
        assert session.container_id != first_container
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(first_container)
    finally:
        await session.aclose()


async def test_close_removes_the_container_and_labels_find_it(docker_client, workspace: Path):
    session = await start(workspace)
    found = docker_client.containers.list(
        filters={"label": f"{CONTAINER_LABEL}.session={session.session_id}"}
    )
    assert [c.id for c in found] == [session.container_id]
    cid = session.container_id
    await session.aclose()
    await session.aclose()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(cid)
    with pytest.raises(trio.ClosedResourceError):
        await sh(session, "true", workspace)


def ours(client) -> set[str]:
    """Containers this test process owns (other processes on the machine may own others)."""
    owner = f"{CONTAINER_LABEL}.owner={socket.gethostname()}:{os.getpid()}"
    return {c.id for c in client.containers.list(all=True, filters={"label": owner})}


async def test_cancelled_start_leaves_no_container(docker_client, workspace: Path) -> None:
    before = ours(docker_client)
    # Cancel at successive points of start-up: every one must clean up after itself.
    for delay in (0.0, 0.05, 0.15, 0.3):
        with trio.move_on_after(delay):
            session = await start(workspace)
            await session.aclose()
    assert ours(docker_client) <= before


async def test_stale_containers_of_dead_owners_are_removed(docker_client) -> None:
    dead_pid = 2**22 + 12345  # above pid_max on this kind of machine: never alive
    stale = docker_client.containers.create(
        "ringfence/busybox:latest",
        ["true"],
        labels={
            CONTAINER_LABEL: "1",
            f"{CONTAINER_LABEL}.owner": f"{socket.gethostname()}:{dead_pid}",
            OWNER_SPACE_LABEL: owner_space(),
        },
    )
    live = docker_client.containers.create(
        "ringfence/busybox:latest",
        ["true"],
        labels={
            CONTAINER_LABEL: "1",
            f"{CONTAINER_LABEL}.owner": f"{socket.gethostname()}:{os.getpid()}",
        },
    )
    try:
        # Not a count: another test's session start (another worker) may remove it first.
        remove_stale_containers(docker_client)
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(stale.id)
        docker_client.containers.get(live.id)  # its owner is alive: kept
    finally:
        live.remove(force=True)


async def test_unreachable_daemon_is_unavailable_and_runs_nothing(workspace: Path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{workspace}/no-daemon.sock")
    marker = workspace / "ran-on-host"
    with pytest.raises(Unavailable) as info:
        session = await start(workspace)
        await sh(session, f"touch {marker}", workspace)
    message = info.value.message
    assert "not reachable" in message and "DOCKER_HOST" in message and "dockerd" in message
    assert not marker.exists()


async def test_missing_image_is_unavailable_with_the_command_to_run(docker_client, workspace):
    with pytest.raises(Unavailable) as info:
        await start(workspace, options={"image": "ringfence-test/absent:never"})
    assert "ringfence-test/absent:never" in info.value.message
    assert "docker build -t ringfence-test/absent:never" in info.value.message
    from ringfence.backends.docker._api import image_missing

    assert "`ringfence images build debian`" in image_missing("ringfence/debian:latest").message


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"options": {"user": "0:0"}}, "options.user"),
        ({"options": {"user": "root"}}, "options.user"),
        ({"options": {"pids": 2}}, "options.pids"),
        ({"options": {"memory": "lots"}}, "options.memory"),
        ({"options": {"userns_mode": "host"}}, "options"),
        ({"readonly_paths": (Path("/etc"),)}, "readonly_paths"),
    ],
)
async def test_bad_options_are_refused_before_anything_starts(workspace, kw, field) -> None:
    with pytest.raises(InvalidArguments) as info:
        await start(workspace, **kw)
    assert info.value.field == field


async def test_cwd_outside_the_mounted_roots_is_refused(docker_client, workspace, tmp_path):
    session = await start(workspace)
    try:
        with pytest.raises(InvalidArguments) as info:
            await sh(session, "true", tmp_path)
        assert info.value.field == "cwd"
    finally:
        await session.aclose()
