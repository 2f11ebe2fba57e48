"""The same conformance suite against every built-in backend, on real processes and a real daemon."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import docker.errors
import pytest
from backends_helpers import DOCKER_OPTIONS, container_processes, host_processes

from ringfence.backends import SessionSpec
from ringfence.backends._host import start_host
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.backends.docker._session import start_docker
from ringfence.backends.testing import check_backend, find_processes


async def test_local_backend_conforms(workspace: Path) -> None:
    """The confined local backend (bubblewrap, Landlock, seccomp; strict)."""
    await check_backend(start_local, workspace, processes=host_processes)


async def test_host_backend_conforms(workspace: Path) -> None:
    """The unconfined host backend keeps the same contract."""
    await check_backend(start_host, workspace, processes=host_processes)


@pytest.mark.docker
async def test_docker_backend_conforms(docker_client, workspace: Path) -> None:
    await check_backend(
        start_docker, workspace, processes=container_processes, options=DOCKER_OPTIONS
    )


@pytest.mark.docker
async def test_docker_backend_conforms_on_the_debian_image(docker_client, workspace: Path) -> None:
    """The same suite on the debootstrap image (dash, util-linux setsid), when it was built.

    That image is built only on demand (`ringfence images build debian`, minutes), so this
    test skips without it, even in CI.
    """
    try:
        docker_client.images.get("ringfence/debian:latest")
    except docker.errors.ImageNotFound:
        pytest.skip("ringfence/debian is not built here (`ringfence images build debian`)")
    await check_backend(
        start_docker,
        workspace,
        processes=container_processes,
        options={**DOCKER_OPTIONS, "image": "debian"},
    )


async def test_local_backend_conforms_without_namespaces_at_best_effort(
    workspace: Path, no_bwrap: Path
) -> None:
    """sandbox=best-effort where bubblewrap is missing: the same contract, a subreaper's tree."""
    await check_backend(
        start_local, workspace, processes=host_processes, options={"sandbox": "best-effort"}
    )


@pytest.mark.docker
async def test_docker_backend_conforms_on_gvisor(docker_client, workspace: Path) -> None:
    """The same suite with ``runtime="runsc"`` (gVisor's application kernel), when registered.

    ``.ci/run`` installs Debian's runsc and registers it with the daemon, and
    sets ``RINGFENCE_REQUIRE_RUNSC=1`` so that a missing runtime fails there.
    """
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        if os.environ.get("RINGFENCE_REQUIRE_RUNSC") == "1":
            pytest.fail("RINGFENCE_REQUIRE_RUNSC=1 but runsc is not registered with the daemon")
        pytest.skip("runsc is not registered with the Docker daemon (.ci/run registers it)")
    # gVisor's ptrace platform needs more pids than a warm shell under runc (a low limit
    # killed the long-lived shell).
    await check_backend(
        start_docker,
        workspace,
        processes=container_processes,
        options={**DOCKER_OPTIONS, "runtime": "runsc", "pids": 512},
    )


@pytest.mark.docker
async def test_a_runtime_the_daemon_lacks_is_unavailable(docker_client, workspace: Path) -> None:
    from ringfence.runtime import Unavailable

    owner = {"label": f"ringfence.owner={socket.gethostname()}:{os.getpid()}"}
    before = {c.id for c in docker_client.containers.list(all=True, filters=owner)}
    with pytest.raises(Unavailable) as info:
        await start_docker(
            SessionSpec(roots=(workspace,), options={**DOCKER_OPTIONS, "runtime": "no-such-rt"})
        )
    assert "no-such-rt" in info.value.message and "runsc" in info.value.message
    # nothing was made
    assert {c.id for c in docker_client.containers.list(all=True, filters=owner)} == before


async def test_leftovers_are_whole_words_of_a_real_command_line() -> None:
    """``sleep 21474`` finds a live ``sleep 21474`` and not a ``sleep 2147483647``."""
    procs = [subprocess.Popen(["sleep", n]) for n in ("21474", "2147483647")]
    try:
        lines = await host_processes(None)  # type: ignore[arg-type] (the host probe: no session)
        assert find_processes(lines, "sleep 21474") == ["sleep 21474"]
        assert find_processes(lines, "sleep 2147483647") == ["sleep 2147483647"]
        assert find_processes(lines, "sleep 2147", "sleep 214748364") == []
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.docker
async def test_background_check_is_not_fooled_by_the_container_s_own_sleep(
    docker_client, workspace: Path
) -> None:
    """The container's main process was ``sleep 2147483647``; a run whose tag made the marker
    ``sleep 21474`` failed as 'background jobs outlived the command' (a full run here, once).
    It is now ``cat`` holding the lease (``docker._container``); the tag still may not fool it."""
    from ringfence.backends.testing import _Ctx, background_jobs_die_with_the_command

    session = await start_docker(
        SessionSpec(roots=(workspace,), kill_grace=0.5, options=dict(DOCKER_OPTIONS))
    )
    try:
        assert any(p.split()[-1:] == ["cat"] for p in await container_processes(session))
        ctx = _Ctx(session, workspace, container_processes)
        ctx.tag = 21473  # the marker is `sleep {tag + 1}`
        await background_jobs_die_with_the_command(ctx)
    finally:
        await session.aclose()
