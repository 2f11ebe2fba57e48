"""Per-command overhead of the execution backends, for ``true``, interleaved in one run.

Baseline: a bare ``subprocess.run(["true"])``. Subjects: the local backend
(a session's ``run``, and ``run_shell`` through the whole Gate), the docker
backend's warm session, and ``docker run --rm`` of the same image with the
same hardening (few iterations: it is slow). Goals (issue 4): local within
1.5x of bare; docker within 3x of bare, which is over 100x faster than
``docker run --rm``.

Run ``python -m benchmarks.backends`` (or ``ringfence bench backends-local
backends-docker`` once the scenarios are listed in ``benchmarks/scenarios.py``).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from ringfence.backends import SessionSpec, register_shell_tool, start_docker, start_local
from ringfence.runtime import Kernel, Posture, RingfenceError

from ._harness import Samples
from ._suite import Row, Scenario, Skip, SuiteResult, render_table

LOCAL_GOAL = 1.5
DOCKER_GOAL = 3.0
DOCKER_RUN_FACTOR = 100.0
IMAGE = "busybox"


def _bare() -> None:
    subprocess.run(["true"], check=True)


class _Dir:
    """The smallest workspace run_shell needs: one root, no git directories."""

    def __init__(self, root: Path) -> None:
        self.roots = [root]

    def resolve_dir(self, path: str | Path, *, unrestricted: bool = False) -> Path:
        return (self.roots[0] / path).resolve()

    def git_directories(self) -> list[Path]:
        return []


def _workspace(root: Path):
    try:
        from ringfence.workspace import Workspace
    except ImportError:  # the workspace package lands separately
        return _Dir(root)
    return Workspace([root])


async def _interleave(
    subjects: list[tuple[str, Callable[[], Awaitable[object]], int]], rounds: int
) -> dict[str, Samples]:
    """Each round runs one batch of every subject, rotating the order; per-op seconds."""
    samples = {name: Samples(name) for name, _, _ in subjects}
    for i in range(rounds):
        order = subjects[i % len(subjects) :] + subjects[: i % len(subjects)]
        for name, fn, batch in order:
            start = time.perf_counter()
            for _ in range(batch):
                await fn()
            samples[name].per_op.append((time.perf_counter() - start) / batch)
    return samples


async def _sync(fn: Callable[[], object]) -> object:
    return fn()


async def run_local(quick: bool) -> list[Row]:
    rounds, batch = (8, 40) if quick else (30, 100)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session = await start_local(SessionSpec(roots=(root,)))
        async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
            register_shell_tool(kernel, backend="local", workspace=_workspace(root))

            async def backend() -> object:
                return await session.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

            async def gated() -> object:
                return await kernel.call("run_shell", {"command": ["true"]})

            s = await _interleave(
                [
                    ("bare subprocess.run", lambda: _sync(_bare), batch),
                    ("local backend", backend, batch),
                    ("run_shell via Gate (local)", gated, batch),
                ],
                rounds,
            )
        await session.aclose()
    bare = s["bare subprocess.run"]
    local = s["local backend"]
    gated_s = s["run_shell via Gate (local)"]
    return [
        Row(
            "backends-local",
            "local backend, `true`",
            local,
            bare,
            f"within {LOCAL_GOAL}x of bare",
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
    rounds, batch, cold = (6, 30, 1) if quick else (12, 80, 1)
    from ringfence.backends import connect_docker, ensure_image

    try:
        client = await trio.to_thread.run_sync(connect_docker)
        await trio.to_thread.run_sync(ensure_image, client, IMAGE)
    except RingfenceError as exc:
        raise Skip(exc.message) from None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # commands run as 65534 when root owns the workspace
        session = await start_docker(SessionSpec(roots=(root,), options={"image": IMAGE}))
        reference = "ringfence/busybox:latest"

        def docker_run_rm() -> None:
            # The same image and hardening, one container per command.
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

        async def cold_run() -> object:
            return await trio.to_thread.run_sync(docker_run_rm)

        try:
            s = await _interleave(
                [
                    ("bare subprocess.run", lambda: _sync(_bare), batch),
                    ("docker backend (warm)", warm, batch),
                    ("docker run --rm", cold_run, cold),
                ],
                rounds,
            )
        finally:
            await session.aclose()
            client.close()
    bare, warm_s, cold_s = (
        s["bare subprocess.run"],
        s["docker backend (warm)"],
        s["docker run --rm"],
    )
    return [
        Row(
            "backends-docker",
            "docker backend warm session, `true`",
            warm_s,
            bare,
            f"within {DOCKER_GOAL}x of bare",
            warm_s.median / bare.median <= DOCKER_GOAL,
            {"overhead_s": warm_s.median - bare.median},
        ),
        Row(
            "backends-docker",
            "`docker run --rm` (same image and hardening), `true`",
            cold_s,
            warm_s,
            f"warm session over {DOCKER_RUN_FACTOR:.0f}x faster",
            cold_s.median / warm_s.median >= DOCKER_RUN_FACTOR,
            {"warm_speedup": cold_s.median / warm_s.median},
        ),
    ]


LOCAL = Scenario(
    "backends-local", "local backend per-command overhead", f"≤ {LOCAL_GOAL}x bare", run_local
)
DOCKER = Scenario(
    "backends-docker",
    "docker backend per-command overhead",
    f"≤ {DOCKER_GOAL}x bare; ≥ {DOCKER_RUN_FACTOR:.0f}x faster than docker run --rm",
    run_docker,
)
SCENARIOS = [LOCAL, DOCKER]


async def _main(quick: bool) -> SuiteResult:
    from ._suite import run_suite

    return await run_suite(SCENARIOS, quick=quick, progress=print)


def main() -> None:
    import sys

    result = trio.run(_main, "--quick" in sys.argv)
    print(render_table(result))


if __name__ == "__main__":
    main()
