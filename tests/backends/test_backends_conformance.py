"""The same conformance suite against every built-in backend, on real processes and a real daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DOCKER_OPTIONS, container_processes, host_processes

from ringfence.backends import start_docker, start_local
from ringfence.backends.testing import check_backend


async def test_local_backend_conforms(workspace: Path) -> None:
    await check_backend(start_local, workspace, processes=host_processes)


@pytest.mark.docker
async def test_docker_backend_conforms(docker_client, workspace: Path) -> None:
    await check_backend(
        start_docker, workspace, processes=container_processes, options=DOCKER_OPTIONS
    )
