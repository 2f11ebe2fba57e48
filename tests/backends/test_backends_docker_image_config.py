"""A sandbox image's own configuration (``--docker-image``, ``options.image``) against the host.

An image is a file system and a configuration. The file system runs inside the container,
under its hardening; the configuration is read by the daemon, which acts on it as root
*outside* the container: an image's ``VOLUME`` below a path ringfence bind-mounts from
the host had the daemon make that directory on the host (a ``.git`` in the workspace,
outside any change set), and its ``ENTRYPOINT`` ran before ringfence's own main process,
as the container's root. These tests build such images through the daemon and use them
through the public API.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import trio
from backends_helpers import DOCKER_OPTIONS
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state as tree_state

from ringfence import create_kernel
from ringfence.backends import SessionSpec, start_session
from ringfence.runtime import ApprovalAnswer, Posture, ScriptedApprover, Unavailable

pytestmark = pytest.mark.docker


def _kernel(workspace: Path, image: str, change_sets: bool) -> Any:
    """A docker kernel on ``image`` whose commands run (approved when they would ask)."""
    return create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        approver=ScriptedApprover(lambda _r: ApprovalAnswer.once("test approves")),
        backend="docker",
        backend_options={**DOCKER_OPTIONS, "image": image},
        change_sets=change_sets,
    )


_BASE = "ringfence/busybox:latest"  # the test image (backends_helpers.TEST_IMAGE), built


def _build(client: Any, dockerfile: str, files: dict[str, bytes]) -> str:
    """An image of ``dockerfile`` (with ``files``, mode 0755) under a tag of its own: two
    workers never build or remove one tag."""
    tag = f"ringfence-test/image-config-{secrets.token_hex(6)}:latest"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (data, mode) in {
            "Dockerfile": (dockerfile.encode(), 0o644),
            **{n: (d, 0o755) for n, d in files.items()},
        }.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True)
    return tag


@pytest.fixture
def image_tags(docker_client: Any) -> Iterator[list[str]]:
    """Tags a test built; removed after it (with any container still using one)."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        for container in docker_client.containers.list(all=True, filters={"ancestor": tag}):
            container.remove(force=True, v=True)
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(tag, force=True)


def _own_containers(client: Any) -> set[str]:
    owner = f"ringfence.owner={socket.gethostname()}:{os.getpid()}"
    return {c.id for c in client.containers.list(all=True, filters={"label": owner})}


@pytest.mark.parametrize("change_sets", [False, True], ids=["bind-mounted", "change-sets"])
async def test_an_images_volume_is_refused_before_the_daemon_makes_it_on_the_host(
    docker_client: Any, workspace: Path, image_tags: list[str], change_sets: bool
) -> None:
    """``VOLUME /workspace/.git/hooks``: the daemon makes a volume's mount point in the
    container's file system, and below a bind mount that is the host's. Before, a session
    without change sets found ``.git/hooks`` and ``planted`` made in the workspace by root,
    in no change set (undo knew nothing of them), before its first command; with change sets
    the start failed with the daemon's mkdir error. Now the image is refused by name before
    any container exists; the workspace is as it was."""
    tag = _build(
        docker_client,
        f'FROM {_BASE}\nVOLUME ["/workspace/.git/hooks", "/workspace/planted", "/srv/data"]\n',
        {},
    )
    image_tags.append(tag)
    (workspace / "keep.txt").write_text("keep\n")
    before = tree_state(workspace)
    containers = _own_containers(docker_client)
    async with _kernel(workspace, tag, change_sets) as k:
        outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
        during = _own_containers(docker_client)
    assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
    assert outcome.error.field == "options.image", outcome.error
    assert "/workspace/.git/hooks" in outcome.error.message, outcome.error
    assert "VOLUME" in outcome.error.message, outcome.error
    assert tree_state(workspace) == before
    assert not (workspace / ".git").exists() and not (workspace / "planted").exists()
    assert during == containers
    assert docker_client.containers.list(all=True, filters={"ancestor": tag}) == []


# The image's entry point: as the container's root, before anything of ringfence's, it
# leaves a mark in the commands' /tmp and writes the host workspace where root may (a root-
# owned root bind-mounted without change sets), then runs what it was given.
_ENTRY = b"""#!/bin/sh
echo "entry point ran as $(id -u)" > /tmp/entry-mark 2>/dev/null
echo planted > /workspace/entry-wrote 2>/dev/null
exec "$@"
"""


@pytest.mark.parametrize("change_sets", [False, True], ids=["bind-mounted", "change-sets"])
async def test_an_images_entry_point_never_runs_before_or_beside_the_sandbox(
    docker_client: Any, tmp_path: Path, image_tags: list[str], change_sets: bool
) -> None:
    """An image's ``ENTRYPOINT`` was the container's main process, ringfence's own (the
    per-command filter's installer, the lease) only its arguments: it ran first, as the
    container's root, and wrote the host's root-owned workspace outside any command (and
    so outside the Gate and any change set) and the commands' ``/tmp``. Its
    ``HEALTHCHECK`` ran again every second beside the commands, as root. Now neither runs:
    the container's main process is ringfence's whatever the image says."""
    tag = _build(
        docker_client,
        f"FROM {_BASE}\nCOPY entry.sh /entry.sh\n"
        "HEALTHCHECK --interval=1s CMD echo health >> /tmp/health-mark || true\n"
        'ENTRYPOINT ["/entry.sh"]\n',
        {"entry.sh": _ENTRY},
    )
    image_tags.append(tag)
    workspace = tmp_path / "rootws"  # root's, as a checkout on CI: root may write it
    workspace.mkdir()
    (workspace / "keep.txt").write_text("keep\n")
    before = tree_state(workspace)
    async with _kernel(workspace, tag, change_sets) as k:
        first = await k.call("run_shell", {"command": "sleep 2.5; ls -a /tmp"})
        second = await k.call("run_shell", {"command": "cat keep.txt"})
    assert "entry-mark" not in first["stdout"], first
    assert "health-mark" not in first["stdout"], first
    assert second["stdout"] == "keep\n", second
    assert tree_state(workspace) == before
    assert not (workspace / "entry-wrote").exists()


async def test_networked_sessions_cannot_reach_each_others_containers(
    docker_client: Any, tmp_path: Path
) -> None:
    """A session given the network (``SessionSpec.network``, ``WarmPool(network=True)``)
    gets the network, not the other sessions: before, every networked container was on
    Docker's default bridge, where containers talk to each other, so one session's command
    connected to a server another session's command ran (and to any other container
    there). Now networked sessions share a bridge with inter-container communication off:
    B's listener never hears from A, while A still has its network (a default route)."""
    sessions = []
    try:
        for name in ("a", "b"):
            ws = tmp_path / name
            ws.mkdir()
            spec = SessionSpec(roots=(ws,), network=True, options=DOCKER_OPTIONS, change_sets=True)
            sessions.append(await start_session("docker", spec))
        a, b = sessions

        async def sh(session: Any, command: str) -> Any:
            return await session.run(
                command, cwd=tmp_path / ("a" if session is a else "b"), env={},
                timeout=40, output_cap=65536,
            )  # fmt: skip

        where = await sh(b, "hostname -i")
        address = where.stdout.split()[0]
        heard: dict[str, Any] = {}

        async def listen() -> None:
            heard["b"] = await sh(b, "nc -l -p 5555 > /tmp/got & sleep 12; cat /tmp/got; echo end")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            await trio.sleep(4)  # B's listener is up (its command takes 12 s)
            sent = await sh(a, f"echo from-a | nc -w 3 {address} 5555; echo status=$?")
        route = await sh(a, "ip route | grep default")
    finally:
        for session in sessions:
            await session.aclose()
    assert heard["b"].stdout == "end\n", (heard, sent)
    assert "from-a" not in heard["b"].stdout
    assert "default" in route.stdout, route  # A still has a network


async def test_a_network_of_that_name_where_containers_talk_is_not_joined(
    docker_client: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone with access to the engine can make the networked sessions' network first,
    with inter-container communication on: it is inspected each time and not joined; the
    session is unavailable naming it, before any container exists. (Under a name of this
    test's own: two workers never share it.)"""
    from ringfence.backends.docker import _network

    name = f"ringfence-test-net-{secrets.token_hex(4)}"
    monkeypatch.setattr(_network, "ISOLATED_NETWORK", name)
    made = docker_client.networks.create(name, driver="bridge")  # ICC on: Docker's default
    try:
        before = _own_containers(docker_client)
        spec = SessionSpec(
            roots=(workspace,), network=True, options=DOCKER_OPTIONS, change_sets=True
        )
        with pytest.raises(Unavailable) as info:
            await start_session("docker", spec)
        assert name in info.value.message and "inter-container" in info.value.message
        assert _own_containers(docker_client) == before
    finally:
        made.remove()


async def test_a_replacement_container_is_made_from_the_image_checked_not_the_tag_now(
    docker_client: Any, workspace: Path, image_tags: list[str]
) -> None:
    """The image is checked when the session starts; a container made later (a command
    killed its supervisor: a new container takes the old one's place) came from the tag,
    which by then may name another image: one declaring ``VOLUME /workspace/planted``, whose
    directory the daemon made in the workspace. Every container of the session is now made
    from the image checked, by its id."""
    clean = _build(docker_client, f"FROM {_BASE}\nLABEL ringfence.test=clean\n", {})
    planted = _build(docker_client, f'FROM {_BASE}\nVOLUME ["/workspace/planted"]\n', {})
    image_tags += [clean, planted]
    (workspace / "keep.txt").write_text("keep\n")
    before = tree_state(workspace)
    async with _kernel(workspace, clean, change_sets=False) as k:
        first = await k.call("run_shell", {"command": "cat keep.txt"})
        repository, _, tag = clean.rpartition(":")
        docker_client.images.get(planted).tag(repository, tag)  # the tag names it now
        await k.invoke("run_shell", {"command": "kill -9 $PPID; sleep 5"})
        after = await k.call("run_shell", {"command": "ls -a"})
    assert first["stdout"] == "keep\n", first
    assert "planted" not in after["stdout"], after
    assert tree_state(workspace) == before


def test_the_command_lines_network_reaches_a_docker_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ringfence call run_shell --backend docker --network`` was refused whole ("unknown
    docker backend option(s) ['network']"): the command line passed it as an option of the
    container's, where docker's session spec carries it. Now the command has a network (a
    route besides the loopback's); without the flag it has none."""
    import json

    from ringfence.cli._main import main

    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", DOCKER_OPTIONS["image"])
    ws = tmp_path / "ws"
    ws.mkdir()
    routes: dict[str, Any] = {}
    for flag in ("--network", None):
        argv = ["call", "run_shell", "--args", json.dumps({"command": "cat /proc/net/route"}),
                "--workspace", str(ws), "--backend", "docker", "--approve", "yes", "--json"]  # fmt: skip
        code = main([*argv, flag] if flag else argv)
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["ok"], out
        routes[flag or "none"] = out["result"]["stdout"].splitlines()[1:]
    assert routes["--network"], routes  # a route: the isolated bridge
    assert routes["none"] == [], routes  # network none: the header alone
