"""The same conformance suite against every built-in backend, on real processes and a real daemon."""

from __future__ import annotations

from pathlib import Path

import docker.errors
import pytest
from backends_helpers import DOCKER_OPTIONS, container_processes, host_processes

from ringfence.backends import start_docker, start_host, start_local
from ringfence.backends.testing import check_backend


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
    workspace: Path, monkeypatch
) -> None:
    """sandbox=best-effort where bubblewrap is missing: the same contract, a subreaper's tree."""
    monkeypatch.setenv("RINGFENCE_BWRAP", str(workspace.parent / "no-bwrap"))
    await check_backend(
        start_local, workspace, processes=host_processes, options={"sandbox": "best-effort"}
    )
