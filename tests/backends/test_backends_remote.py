"""The docker backend on a remote engine: the workspace shipped, change sets fetched back.

Real TLS ``dockerd`` processes on loopback (``engines_helpers``) with
``ship = "always"``: nothing of the host is mounted, the workspace travels
by ``put_archive`` into a per-session volume, and every command's writes come
back over the supervisor's own stream as a change set that the host merges.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backends_helpers import DOCKER_OPTIONS, docker_required
from engines_helpers import EngineProcess, can_start_engine, start_tls_engine, stop_engine
from test_backends_docker_changesets import capture, make, summary

from ringfence.backends import DockerSession, SessionSpec, ShellResult, start_docker
from ringfence.backends._dockerapi import connect_docker
from ringfence.backends._engines import Engine
from ringfence.workspace import CheckpointStore, Workspace

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


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("RINGFENCE_HOME", str(h))
    return h


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


async def test_a_remote_session_ships_runs_and_names_its_engine(
    engines: list[EngineProcess], workspace: Path
) -> None:
    engine = engines[0].engine
    make(workspace, {"a.txt": "from the host\n", "sub/b.txt": "b\n"})
    session = await start_remote(workspace, engine)
    try:
        assert session.metadata["engine"] == engine.name
        assert session.metadata["workspace"] == "shipped"
        assert session.container_id is not None
        assert host_binds(engine, session.container_id) == []
        r = await sh(session, "cat a.txt sub/b.txt; echo new > c.txt", workspace)
        assert r.exit_code == 0 and r.stdout == "from the host\nb\n", r
        ws = Workspace([workspace])
        store = CheckpointStore(ws)
        changes = capture(ws, store, r)
        assert summary(changes) == {("c.txt", None, "file:" + _sha("new\n"))}
    finally:
        await session.aclose()


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
