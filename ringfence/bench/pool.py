"""A docker session's cold start with a warm pool, against ``docker run --rm`` and llm-sandbox.

What is timed, interleaved round by round on ``ringfence/debian``: from nothing to the
first ``true`` done.

* **warm pool**: ``start_docker`` of a change-set session while a :class:`WarmPool` of
  its shape is open and warm (the claim), then the first ``true`` (which ships the
  one-file workspace, runs under the overlay and the command's own seccomp filter, and
  fetches its empty change set). The pool's refill runs in the background meanwhile,
  as it would; each round starts with the pool warm again (untimed).
* **cold session**: the same without a pool (create, start, attach, overlay probe).
* **docker run --rm**: one hardened container running ``true`` through the Engine API.
* **llm-sandbox**: its ``SandboxSession`` opened, then one ``execute_command("true")``
  (only when the ``peers`` extra is installed).

Each arm starts from the same state: the pool warm and settled, nothing else open
(closing what an arm opened is not timed). The arms' order rotates every round.

Goal (issue 34): warm pool cold start + first ``true`` within 30 ms.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import trio

from ._harness import Arm, Samples, interleave
from ._suite import Row, Scenario, Skip

IMAGE = "debian"
REFERENCE = "ringfence/debian:latest"
GOAL = 0.030
OPTIONS = {"image": IMAGE, "memory": "256m", "pids": 128}


def _check(client: object) -> None:
    try:
        client.images.get(REFERENCE)  # type: ignore[attr-defined]
    except Exception:  # docker.errors.ImageNotFound, without importing docker here
        raise Skip(f"{REFERENCE} is not built: ringfence images build debian") from None


async def run(quick: bool) -> list[Row]:
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.docker._api import connect_docker, map_docker_errors
    from ringfence.backends.docker._options import DockerOptions
    from ringfence.backends.docker._pool import WarmPool
    from ringfence.backends.docker._session import start_cold, start_docker
    from ringfence.runtime._errors import RingfenceError

    try:
        client = await trio.to_thread.run_sync(connect_docker)
    except RingfenceError as exc:
        raise Skip(f"no Docker daemon: {exc.message}") from None
    rounds = 4 if quick else 12
    peer = importlib.util.find_spec("llm_sandbox") is not None
    try:
        _check(client)
        with tempfile.TemporaryDirectory(prefix="ringfence-bench-pool-") as tmp:
            base = Path(tmp)
            base.chmod(0o755)
            counter = iter(range(10**6))

            def fresh_root() -> Path:
                root = base / f"ws{next(counter)}"
                root.mkdir(mode=0o755)
                (root / "README").write_text("a workspace\n")
                return root

            async def session_and_true(pooled: bool) -> None:
                root = fresh_root()
                spec = SessionSpec(roots=(root,), options=OPTIONS, change_sets=True, spool_dir=base)
                if pooled:
                    session = await start_docker(spec)
                else:  # the pool is open: this arm must not claim from it
                    opts = DockerOptions.from_mapping(OPTIONS)
                    session = await start_cold(spec, opts, None)
                try:
                    result = await session.run(["true"], cwd=root, env={}, timeout=30,
                                               output_cap=4096)  # fmt: skip
                    if result.exit_code != 0:
                        raise RuntimeError(f"`true` exited {result.exit_code}: {result.stderr}")
                finally:
                    laps.append(session)

            laps: list[object] = []  # sessions closed after the timed part, untimed

            def docker_run_rm() -> None:
                with map_docker_errors():
                    client.containers.run(
                        REFERENCE, ["true"], remove=True, user="65534:65534", init=True,
                        cap_drop=["ALL"], security_opt=["no-new-privileges:true"],
                        read_only=True, network_mode="none", mem_limit="256m", pids_limit=128,
                    )  # fmt: skip

            def llm_sandbox_first() -> None:
                from llm_sandbox import SandboxSession

                session = SandboxSession(lang="python", image=REFERENCE, keep_template=True,
                                         verbose=False, skip_environment_setup=True)  # fmt: skip
                session.open()
                try:
                    session.execute_command("true")
                finally:
                    llm_open.append(session)

            llm_open: list[object] = []

            async def cold() -> None:
                await session_and_true(False)

            async def run_rm() -> None:
                await trio.to_thread.run_sync(docker_run_rm)

            async def llm() -> None:
                await trio.to_thread.run_sync(llm_sandbox_first)

            samples: dict[str, Samples] = {}
            async with WarmPool(OPTIONS, size=2) as pool:

                async def pooled() -> None:
                    await session_and_true(True)

                arms = [
                    Arm("warm pool: claim + first `true`", pooled),
                    Arm("cold session + first `true`", cold),
                    Arm("docker run --rm `true`", run_rm),
                ]
                if peer:
                    arms.append(Arm("llm-sandbox open + first `true`", llm))
                for order in range(rounds):
                    for i in range(len(arms)):
                        arm = arms[(order + i) % len(arms)]
                        # Every arm starts from the same state: the pool warm, its refill's
                        # container start (after the last claim) settled, nothing left open.
                        await pool.wait_warm()
                        await trio.sleep(0.3)
                        part = await interleave([arm], rounds=1)
                        samples.setdefault(arm.name, Samples(arm.name)).per_op.extend(
                            part[arm.name].per_op
                        )
                        for session in laps:
                            await session.aclose()  # type: ignore[attr-defined]
                        laps.clear()
                        for opened in llm_open:
                            await trio.to_thread.run_sync(opened.close)  # type: ignore[attr-defined]
                        llm_open.clear()
                stats = pool.stats()
    finally:
        client.close()
    warm = samples["warm pool: claim + first `true`"]
    notes: dict[str, object] = {"pool": stats.as_json()}
    rows = [
        Row(
            "docker-pool",
            "warm pool: cold session + first `true` (debian, change sets, shipped)",
            warm,
            samples["docker run --rm `true`"],
            f"<= {GOAL * 1000:.0f} ms",
            warm.median <= GOAL,
            notes,
        ),
        Row(
            "docker-pool",
            "cold session without a pool + first `true`",
            samples["cold session + first `true`"],
            warm,
            "informational",
            None,
            {},
        ),
    ]
    if peer:
        rows.append(
            Row(
                "docker-pool",
                "llm-sandbox: open + first `true`",
                samples["llm-sandbox open + first `true`"],
                warm,
                "informational",
                None,
                {},
            )
        )
    return rows


SCENARIO = Scenario(
    "docker-pool",
    "docker session cold start with a warm pool vs docker run --rm and llm-sandbox",
    f"warm pool: start + first `true` <= {GOAL * 1000:.0f} ms",
    run,
)
SCENARIOS = [SCENARIO]
