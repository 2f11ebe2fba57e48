"""Fixtures for the backends tests: a real Docker daemon and the busybox test image.

Docker tests skip with the reason when the daemon is unreachable, unless
``RINGFENCE_REQUIRE_DOCKER=1`` (CI), which turns that into a failure. The
busybox image is built here when it is missing, so a fresh machine where
``.ci/run`` just started dockerd works.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import psutil
import pytest

from ringfence.backends import BackendSession
from ringfence.backends.docker._api import connect_docker
from ringfence.backends.docker._imagebuild import ensure_image
from ringfence.backends.docker._session import DockerSession
from ringfence.runtime import Unavailable

TEST_IMAGE = "busybox"
WORKSPACE_UID = 1000
# Small limits keep the hardening tests fast.
DOCKER_OPTIONS = {"image": TEST_IMAGE, "memory": "96m", "pids": 64, "cpus": 1.0}


def docker_required() -> bool:
    return os.environ.get("RINGFENCE_REQUIRE_DOCKER") == "1"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = connect_docker()
    except Unavailable as exc:
        if docker_required():
            pytest.fail(f"RINGFENCE_REQUIRE_DOCKER=1 but Docker is unavailable: {exc}")
        pytest.skip(f"Docker is unavailable: {exc}")
    try:
        ensure_image(client, TEST_IMAGE)
    except Unavailable as exc:
        if docker_required():
            pytest.fail(f"RINGFENCE_REQUIRE_DOCKER=1 but the test image cannot be built: {exc}")
        pytest.skip(f"the busybox test image cannot be built: {exc}")
    yield client
    client.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace owned by an unprivileged uid, as a developer's checkout would be."""
    ws = tmp_path / "ws"
    ws.mkdir()
    if os.geteuid() == 0:  # as a developer, the directory is already the developer's
        os.chown(ws, WORKSPACE_UID, WORKSPACE_UID)
    return ws


def chown_like_workspace(workspace: Path, *paths: Path) -> None:
    st = workspace.stat()
    for path in paths:
        if os.geteuid() == 0:
            os.chown(path, st.st_uid, st.st_gid)


async def host_processes(_session: BackendSession) -> list[str]:
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline")
        if cmdline:
            out.append(" ".join(cmdline))
    return out


async def container_processes(session: BackendSession) -> list[str]:
    assert isinstance(session, DockerSession)
    return await session.top()


def git_env(tmp_path: Path) -> dict[str, str]:
    """The person's git environment: their own (empty) global configuration under
    ``tmp_path/githome``, no system one, any owner's repository trusted."""
    home = tmp_path / "githome"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }


def persons_git(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The person's git (:func:`git_env`), run as their next command would be."""
    return subprocess.run(
        ["git", *args], cwd=cwd, env=git_env(tmp_path), capture_output=True, text=True, timeout=60
    )


def own_all_like_workspace(workspace: Path) -> None:
    """Everything under the workspace to its owner (as a developer's checkout is); as root."""
    if os.geteuid() != 0:
        return
    st = workspace.stat()
    for dirpath, dirnames, filenames in os.walk(workspace):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), st.st_uid, st.st_gid)
