"""An empty ``run_tool_script`` on the docker backend, warm, against the same on the local backend.

Both are a kernel's ``invoke("run_tool_script")`` of ``result = 1`` (Gate, listener,
handshake, the runner's sandbox, compile, result), back to back after a first run:
on docker the runner runs in the session's container (``ringfence/debian``), started
ahead of need by the launcher (``bridge._docker``: a spare ``docker exec``'d runner
waiting on its stdin); locally, with the tool's spare runner. Goal (issue 34): the
docker run within 30 ms.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from ._harness import Arm, interleave
from ._suite import Row, Scenario, Skip

GOAL = 0.030
SETTLE = 0.3  # untimed, before each round: the spare runners finish starting


async def run(quick: bool) -> list[Row]:
    import os

    from ringfence import create_kernel
    from ringfence.backends.docker._api import connect_docker
    from ringfence.runtime._approval import ApprovalAnswer, ScriptedApprover
    from ringfence.runtime._errors import RingfenceError
    from ringfence.runtime.policy._decide import Posture

    if os.geteuid() != 0:
        raise Skip("run_tool_script on docker hands the bridge socket to a container uid: root")
    try:
        client = await trio.to_thread.run_sync(connect_docker)
    except RingfenceError as exc:
        raise Skip(f"no Docker daemon: {exc.message}") from None
    try:
        client.images.get("ringfence/debian:latest")
    except Exception:
        raise Skip("ringfence/debian is not built: ringfence images build debian") from None
    finally:
        client.close()
    rounds = 6 if quick else 20
    approver = ScriptedApprover(lambda _r: ApprovalAnswer.once())
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-dscript-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        async with (
            create_kernel(
                roots=[root], backend="docker", approver=approver, posture=Posture.ALLOW_ALL,
                backend_options={"image": "debian", "memory": "256m", "pids": 128},
            ) as docker_kernel,
            create_kernel(roots=[root], approver=approver, posture=Posture.ALLOW_ALL) as local,
        ):  # fmt: skip
            args = {"script": "result = 1", "timeout_seconds": 30}

            async def on_docker() -> None:
                (await docker_kernel.invoke("run_tool_script", args)).unwrap()

            async def on_local() -> None:
                (await local.invoke("run_tool_script", args)).unwrap()

            await on_docker()  # the session's start, the python check, the first spare
            await on_local()
            samples = await interleave(
                [Arm("docker backend", on_docker), Arm("local backend", on_local)],
                rounds=rounds,
                pause=SETTLE,
            )
    ours, local_s = samples["docker backend"], samples["local backend"]
    return [
        Row(
            "docker-scripts",
            "empty run_tool_script on docker (debian), warm",
            ours,
            local_s,
            f"<= {GOAL * 1000:.0f} ms",
            ours.median <= GOAL,
            {},
        )
    ]


SCENARIO = Scenario(
    "docker-scripts",
    "empty run_tool_script on the docker backend, warm, vs the local backend",
    f"<= {GOAL * 1000:.0f} ms",
    run,
)
SCENARIOS = [SCENARIO]
