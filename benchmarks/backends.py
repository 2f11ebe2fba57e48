"""Per-command overhead of the execution backends, for ``true``, interleaved in one run.

Baseline: a bare ``subprocess.run(["true"])``. Subjects: the local backend
(a session's ``run``, and ``run_shell`` through the whole Gate), the docker
backend's warm session, and a ``docker run --rm`` of the same image with the
same hardening (one per round: it is slow). Goals (issue 4): local within
1.5x of bare; docker within 3x of bare, which is over 100x faster than
``docker run --rm``.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import trio

from ringfence.backends import IMAGES, SessionSpec, register_shell_tool, start_local
from ringfence.runtime import Kernel, Posture, RingfenceError
from ringfence.workspace import Workspace

from ._harness import Arm, interleave
from ._suite import Row, Scenario, Skip

LOCAL_GOAL = 1.5
DOCKER_GOAL = 3.0
DOCKER_RUN_FACTOR = 100.0
IMAGE = "busybox"


async def _bare() -> None:
    # Blocking on purpose: the baseline is the plainest way to run a command.
    subprocess.run(["true"], check=True)


async def run_local(quick: bool) -> list[Row]:
    rounds, batch = (8, 40) if quick else (30, 100)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session = await start_local(SessionSpec(roots=(root,)))
        try:
            async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
                register_shell_tool(kernel, backend="local", workspace=Workspace([root]))

                async def backend() -> object:
                    return await session.run(
                        ["true"], cwd=root, env={}, timeout=30, output_cap=4096
                    )

                async def gated() -> object:
                    return await kernel.call("run_shell", {"command": ["true"]})

                s = await interleave(
                    [
                        Arm("bare subprocess.run", _bare, batch),
                        Arm("local backend", backend, batch),
                        Arm("run_shell via Gate (local)", gated, batch),
                    ],
                    rounds=rounds,
                    warmup=1,
                )
        finally:
            await session.aclose()
    bare, local, gated_s = (
        s["bare subprocess.run"],
        s["local backend"],
        s["run_shell via Gate (local)"],
    )
    return [
        Row(
            "backends-local",
            "local backend session, `true`",
            local,
            bare,
            f"within {LOCAL_GOAL:g}x bare subprocess",
            local.median / bare.median <= LOCAL_GOAL,
            {"overhead_s": local.median - bare.median},
        ),
        Row(
            "backends-local",
            "run_shell through the Gate (local), `true`",
            gated_s,
            bare,
            "informational (Gate + backend)",
            None,
            {"overhead_s": gated_s.median - bare.median},
        ),
    ]


async def run_docker(quick: bool) -> list[Row]:
    rounds, batch = (4, 30) if quick else (20, 80)
    from ringfence.backends import connect_docker, list_images, map_docker_errors, start_docker

    try:
        client = await trio.to_thread.run_sync(connect_docker)
    except RingfenceError as exc:
        raise Skip(f"no Docker daemon: {exc.message}") from None
    try:
        reference = IMAGES[IMAGE].reference
        present = await trio.to_thread.run_sync(list_images, client)
        if not any(i.reference == reference and i.present for i in present):
            raise Skip(f"image {reference} is missing: ringfence images build {IMAGE}")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            root.chmod(0o755)  # commands run as 65534 when root owns the workspace
            session = await start_docker(SessionSpec(roots=(root,), options={"image": IMAGE}))

            def docker_run_rm() -> None:
                # The same image and hardening as the session's container, one container per
                # command, through the Engine API (no docker CLI start-up in the way).
                with map_docker_errors():
                    client.containers.run(
                        reference,
                        ["true"],
                        remove=True,
                        user="65534:65534",
                        init=True,
                        cap_drop=["ALL"],
                        security_opt=["no-new-privileges:true"],
                        read_only=True,
                        network_mode="none",
                        mem_limit="512m",
                        pids_limit=256,
                    )

            async def warm() -> object:
                return await session.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

            async def cold() -> object:
                return await trio.to_thread.run_sync(docker_run_rm)

            try:
                s = await interleave(
                    [
                        Arm("bare subprocess.run", _bare, batch),
                        Arm("docker backend (warm)", warm, batch),
                        Arm("docker run --rm", cold, 1),
                    ],
                    rounds=rounds,
                    warmup=1,
                )
            finally:
                await session.aclose()
    finally:
        client.close()
    bare, warm_s, cold_s = (
        s["bare subprocess.run"],
        s["docker backend (warm)"],
        s["docker run --rm"],
    )
    speedup = cold_s.median / warm_s.median
    cold_notes: dict[str, object] = {"warm_speedup": speedup}
    if quick:
        cold_notes["note"] = f"quick mode: {rounds} docker run --rm (full run: 20)"
    return [
        Row(
            "backends-docker",
            "docker backend warm session, `true`",
            warm_s,
            bare,
            f"within {DOCKER_GOAL:g}x bare subprocess",
            warm_s.median / bare.median <= DOCKER_GOAL,
            {"overhead_s": warm_s.median - bare.median},
        ),
        Row(
            "backends-docker",
            "`docker run --rm` (same image, hardening), `true`",
            cold_s,
            warm_s,
            f"warm session > {DOCKER_RUN_FACTOR:.0f}x faster",
            speedup > DOCKER_RUN_FACTOR,
            cold_notes,
        ),
    ]


LOCAL = Scenario(
    "backends-local",
    "local backend per-command overhead",
    f"within {LOCAL_GOAL:g}x bare subprocess",
    run_local,
)
DOCKER = Scenario(
    "backends-docker",
    "docker backend per-command overhead",
    f"within {DOCKER_GOAL:g}x bare; > {DOCKER_RUN_FACTOR:.0f}x faster than docker run --rm",
    run_docker,
)
SCENARIOS = [LOCAL, DOCKER]
