"""Per-command overhead of the execution backends, for ``true``, interleaved in one run.

Baseline: a bare ``subprocess.run(["true"])``. Subjects: the confined local
backend's warm session (a session's ``run``, and ``run_shell`` through the
whole Gate), the unconfined host backend, the confined session's start, the docker
backend's warm session (without change sets, and with them: docker's default since issue 34,
each command on its overlay under its own seccomp filter; the session's ``run``, no merge:
``true`` writes nothing), ``run_shell`` through a default ``create_kernel`` (change sets on:
what an embedding host gets), and a ``docker run --rm`` of the same image with the same
hardening (one per round: it is slow). Goals: confined local within 2x of bare and a session
start within 50 ms (issue 19); the default kernel's ``run_shell`` within 3x (issue 33); docker
within 3x of bare, with and without change sets (issue 34), which is over 100x faster than
``docker run --rm``.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import trio

from ringfence import create_kernel
from ringfence.backends._host import start_host
from ringfence.backends._run_shell import register_shell_tool
from ringfence.backends._types import SessionSpec
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.backends.docker._images import IMAGES
from ringfence.runtime._errors import RingfenceError
from ringfence.runtime._kernel import Kernel
from ringfence.runtime.policy._decide import Posture
from ringfence.workspace._workspace import Workspace

from ._harness import Arm, Samples, interleave
from ._suite import Row, Scenario, Skip

LOCAL_GOAL = 2.0  # confined (issue 19): a warm sandboxed `true` within 2x a bare one
START_GOAL = 0.050
DOCKER_GOAL = 3.0
DOCKER_RUN_FACTOR = 100.0
# issue 33: an embedding host's `run_shell true` (create_kernel's defaults, change sets on)
EMBEDDED_GOAL = 3.0
DEFAULT_KERNEL = "run_shell via a default create_kernel"
NO_SETS_KERNEL = "run_shell via create_kernel(change_sets=False)"
RUNSC_GOAL = 0.010  # issue 19: docker + runsc warm `true` within 10 ms
IMAGE = "busybox"


async def _bare() -> None:
    # Blocking on purpose: the baseline is the plainest way to run a command.
    subprocess.run(["true"], check=True)


async def run_local(quick: bool) -> list[Row]:
    rounds, batch = (8, 40) if quick else (30, 100)
    with (
        tempfile.TemporaryDirectory() as tmp,
        tempfile.TemporaryDirectory() as tmp_default,
        tempfile.TemporaryDirectory() as tmp_no_sets,
    ):
        root = Path(tmp)
        session = await start_local(SessionSpec(roots=(root,)))
        host = await start_host(SessionSpec(roots=(root,)))
        try:
            async with (
                Kernel(posture=Posture.UNRESTRICTED) as kernel,
                create_kernel(roots=[tmp_default], posture="unrestricted") as default_kernel,
                create_kernel(
                    roots=[tmp_no_sets], posture="unrestricted", change_sets=False
                ) as no_sets_kernel,
            ):
                register_shell_tool(kernel, backend="local", workspace=Workspace([root]))

                async def confined() -> object:
                    return await session.run(
                        ["true"], cwd=root, env={}, timeout=30, output_cap=4096
                    )

                async def unconfined() -> object:
                    return await host.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

                async def gated() -> object:
                    return await kernel.call("run_shell", {"command": ["true"]})

                async def embedded() -> object:  # an embedding host's default: change sets on
                    return await default_kernel.call("run_shell", {"command": ["true"]})

                async def embedded_no_sets() -> object:  # the same kernel, change sets off
                    return await no_sets_kernel.call("run_shell", {"command": ["true"]})

                async def start() -> object:
                    fresh = await start_local(SessionSpec(roots=(root,)))
                    await fresh.aclose()
                    return fresh

                s = await interleave(
                    [
                        Arm("bare subprocess.run", _bare, batch),
                        Arm("local backend (confined, warm)", confined, batch),
                        Arm("host backend (unconfined)", unconfined, batch),
                        Arm("run_shell via Gate (local)", gated, batch),
                        Arm(DEFAULT_KERNEL, embedded, batch),
                        Arm(NO_SETS_KERNEL, embedded_no_sets, batch),
                        Arm("confined session start+close", start, 1),
                    ],
                    rounds=rounds,
                    warmup=1,
                )
                starts = [fresh.start_seconds for fresh in [await start() for _ in range(rounds)]]
        finally:
            await session.aclose()
            await host.aclose()
    bare, local, host_s, gated_s = (
        s["bare subprocess.run"],
        s["local backend (confined, warm)"],
        s["host backend (unconfined)"],
        s["run_shell via Gate (local)"],
    )
    start_s = Samples("confined session start (to ready)", starts)
    default_s = s[DEFAULT_KERNEL]
    return [
        Row(
            "backends-local",
            "local backend (confined) warm session, `true`",
            local,
            bare,
            f"within {LOCAL_GOAL:g}x bare subprocess",
            local.median / bare.median <= LOCAL_GOAL,
            {"overhead_s": local.median - bare.median},
        ),
        Row(
            "backends-local",
            "host backend (unconfined), `true`",
            host_s,
            bare,
            "informational (the old local backend)",
            None,
            {"overhead_s": host_s.median - bare.median},
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
        Row(
            "backends-local",
            "run_shell through a default create_kernel (change sets on), `true`",
            default_s,
            bare,
            f"within {EMBEDDED_GOAL:g}x bare subprocess",
            default_s.median / bare.median <= EMBEDDED_GOAL,
            {
                "overhead_s": default_s.median - bare.median,
                "change_sets_off_s": s[NO_SETS_KERNEL].median,
                "note": f"the same kernel with change_sets=False: {s[NO_SETS_KERNEL].median * 1e3:.2f}"
                " ms; the difference is the change set's capture and merge",
            },
        ),
        Row(
            "backends-local",
            "confined session start (bwrap + supervisor + layers, to ready)",
            start_s,
            None,
            f"<= {START_GOAL * 1000:.0f} ms",
            start_s.median <= START_GOAL,
            {"start+close_s": s["confined session start+close"].median},
        ),
    ]


async def run_docker(quick: bool) -> list[Row]:
    rounds, batch = (4, 30) if quick else (20, 80)
    from ringfence.backends.docker._api import connect_docker, map_docker_errors
    from ringfence.backends.docker._imagebuild import list_images
    from ringfence.backends.docker._session import start_docker

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
            try:
                layered = await start_docker(
                    SessionSpec(roots=(root,), options={"image": IMAGE}, change_sets=True)
                )
            except BaseException:
                await session.aclose()
                raise

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

            async def warm_layered() -> object:
                return await layered.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

            async def cold() -> object:
                return await trio.to_thread.run_sync(docker_run_rm)

            try:
                s = await interleave(
                    [
                        Arm("bare subprocess.run", _bare, batch),
                        Arm("docker backend (warm)", warm, batch),
                        Arm("docker backend, change sets (warm)", warm_layered, batch),
                        Arm("docker run --rm", cold, 1),
                    ],
                    rounds=rounds,
                    warmup=1,
                )
            finally:
                await session.aclose()
                await layered.aclose()
    finally:
        client.close()
    bare, warm_s, layered_s, cold_s = (
        s["bare subprocess.run"],
        s["docker backend (warm)"],
        s["docker backend, change sets (warm)"],
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
            "docker backend warm session with change sets (the default), `true`",
            layered_s,
            bare,
            f"within {DOCKER_GOAL:g}x bare subprocess",
            layered_s.median / bare.median <= DOCKER_GOAL,
            {"overhead_s": layered_s.median - bare.median},
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


async def run_runsc(quick: bool) -> list[Row]:
    """Warm `true` in a gVisor (runsc) session against the same in a runc session, interleaved."""
    rounds, batch = (4, 20) if quick else (12, 40)
    from ringfence.backends.docker._api import connect_docker
    from ringfence.backends.docker._session import start_docker

    try:
        client = await trio.to_thread.run_sync(connect_docker)
    except RingfenceError as exc:
        raise Skip(f"no Docker daemon: {exc.message}") from None
    try:
        runtimes = (await trio.to_thread.run_sync(client.info)).get("Runtimes") or {}
    finally:
        client.close()
    if "runsc" not in runtimes:
        raise Skip("the Docker daemon has no runsc runtime (gVisor): see .ci/run's daemon.json")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        sessions = {}
        try:
            for runtime in ("runc", "runsc"):
                options = {"image": IMAGE, **({"runtime": runtime} if runtime == "runsc" else {})}
                sessions[runtime] = await start_docker(SessionSpec(roots=(root,), options=options))

            def arm(runtime: str) -> Arm:
                async def one() -> object:
                    return await sessions[runtime].run(
                        ["true"], cwd=root, env={}, timeout=30, output_cap=4096
                    )

                return Arm(f"docker {runtime} (warm)", one, batch)

            loop = "i=0; while [ $i -lt 20 ]; do /bin/true; i=$((i+1)); done"

            async def floor() -> list[float]:
                # gVisor's own price of one fork+exec, measured inside the sandbox: the floor.
                t = time.perf_counter()
                await sessions["runsc"].run(loop, cwd=root, env={}, timeout=60, output_cap=4096)
                return [(time.perf_counter() - t) / 20]

            s = await interleave(
                [arm("runc"), arm("runsc"), Arm("runsc exec floor", floor, 1, self_timed=True)],
                rounds=rounds,
                warmup=1,
            )
        finally:
            for session in sessions.values():
                await session.aclose()
    runc, runsc, floor_s = s["docker runc (warm)"], s["docker runsc (warm)"], s["runsc exec floor"]
    return [
        Row(
            "backends-docker-runsc",
            "docker backend warm session under gVisor (runsc), `true`",
            runsc,
            runc,
            f"<= {RUNSC_GOAL * 1000:.0f} ms",
            runsc.median <= RUNSC_GOAL,
            {
                "note": "runsc from Debian (2022 build), ptrace platform (kvm hung in this VM); "
                f"gVisor's own fork+exec of /bin/true inside the sandbox: {floor_s.median * 1000:.1f} ms"
            },
        ),
        Row(
            "backends-docker-runsc",
            "gVisor's floor: one fork+exec of /bin/true inside the runsc sandbox (a loop of 20)",
            floor_s,
            None,
            "informational",
            None,
        ),
    ]


LOCAL = Scenario(
    "backends-local",
    "local backend (confined) per-command overhead and session start",
    f"within {LOCAL_GOAL:g}x bare subprocess; start <= {START_GOAL * 1000:.0f} ms; "
    f"a default create_kernel's run_shell within {EMBEDDED_GOAL:g}x",
    run_local,
)
DOCKER = Scenario(
    "backends-docker",
    "docker backend per-command overhead",
    f"within {DOCKER_GOAL:g}x bare; > {DOCKER_RUN_FACTOR:.0f}x faster than docker run --rm",
    run_docker,
)
RUNSC = Scenario(
    "backends-docker-runsc",
    "docker backend under gVisor (runsc): warm command against runc",
    f"warm `true` <= {RUNSC_GOAL * 1000:.0f} ms",
    run_runsc,
)
SCENARIOS = [LOCAL, DOCKER, RUNSC]
