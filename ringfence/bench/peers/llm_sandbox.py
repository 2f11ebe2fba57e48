"""Peer: llm-sandbox's Docker sessions against the docker backend, on the same local image.

Both start a container from ``ringfence/debian`` on this machine's daemon
and run shell commands in it; measured interleaved, session by session:

* **cold session**: from nothing to a session that can run a command;
* **warm command**: ``true`` in a started session (per command);
* **100 commands**: ``true`` a hundred times, one after another;
* **close**: from "close" to the container gone.

llm-sandbox runs each command with a Docker ``exec`` (a round trip through
the daemon per command); the docker backend keeps one supervisor shell per
session on an attached stream. Neither number includes an image pull (the
image is local). llm-sandbox is pinned in the ``peers`` extra
(``pip install -e '.[peers]'``).
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from .._harness import Samples
from .._suite import Row, Scenario, Skip

IMAGE = "ringfence/debian:latest"
WARM_GOAL = 1.0  # at least as fast as llm-sandbox per command


def _llm_session() -> Any:
    from llm_sandbox import SandboxSession

    return SandboxSession(
        lang="python", image=IMAGE, keep_template=True, verbose=False, skip_environment_setup=True
    )


def _llm_round(commands: int) -> dict[str, list[float]]:
    """One llm-sandbox session: open, warm commands, close (blocking)."""
    laps: dict[str, list[float]] = {"open": [], "warm": [], "hundred": [], "close": []}
    t = time.perf_counter()
    session = _llm_session()
    session.open()
    laps["open"].append(time.perf_counter() - t)
    try:
        session.execute_command("true")  # first exec warms the client
        for _ in range(commands):
            t = time.perf_counter()
            result = session.execute_command("true")
            laps["warm"].append(time.perf_counter() - t)
            if result.exit_code != 0:
                raise RuntimeError(f"llm-sandbox: `true` exited {result.exit_code}")
        t = time.perf_counter()
        for _ in range(100):
            session.execute_command("true")
        laps["hundred"].append(time.perf_counter() - t)
    finally:
        t = time.perf_counter()
        session.close()
        laps["close"].append(time.perf_counter() - t)
    return laps


async def _ringfence_round(root: Path, commands: int) -> dict[str, list[float]]:
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.docker._session import start_docker

    laps: dict[str, list[float]] = {"open": [], "warm": [], "hundred": [], "close": []}
    spec = SessionSpec(roots=(root,), options={"image": "debian"})
    t = time.perf_counter()
    session = await start_docker(spec)
    laps["open"].append(time.perf_counter() - t)
    try:
        await session.run("true", cwd=root, env={}, timeout=10, output_cap=4096)
        for _ in range(commands):
            t = time.perf_counter()
            result = await session.run("true", cwd=root, env={}, timeout=10, output_cap=4096)
            laps["warm"].append(time.perf_counter() - t)
            if result.exit_code != 0:
                raise RuntimeError(f"docker backend: `true` exited {result.exit_code}")
        t = time.perf_counter()
        for _ in range(100):
            await session.run("true", cwd=root, env={}, timeout=10, output_cap=4096)
        laps["hundred"].append(time.perf_counter() - t)
    finally:
        t = time.perf_counter()
        await session.aclose()
        laps["close"].append(time.perf_counter() - t)
    return laps


def _check() -> None:
    if importlib.util.find_spec("llm_sandbox") is None:
        raise Skip("llm-sandbox is not installed: pip install -e '.[peers]'")
    from ringfence.backends.docker._api import connect_docker
    from ringfence.runtime._errors import RingfenceError

    try:
        client = connect_docker()
    except RingfenceError as exc:
        raise Skip(f"no Docker daemon: {exc.message}") from None
    try:
        client.images.get(IMAGE)
    except Exception:  # docker.errors.ImageNotFound, without importing docker here
        raise Skip(f"{IMAGE} is not built: ringfence images build debian") from None
    finally:
        client.close()


async def run(quick: bool) -> list[Row]:
    _check()
    rounds, commands = (2, 10) if quick else (4, 30)
    ours: dict[str, list[float]] = {"open": [], "warm": [], "hundred": [], "close": []}
    theirs: dict[str, list[float]] = {"open": [], "warm": [], "hundred": [], "close": []}
    with tempfile.TemporaryDirectory(prefix="ringfence-peer-llm-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        for i in range(rounds):
            order = ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")
            for who in order:
                if who == "ours":
                    laps = await _ringfence_round(root, commands)
                    target = ours
                else:
                    laps = await trio.to_thread.run_sync(_llm_round, commands)
                    target = theirs
                for key, values in laps.items():
                    target[key].extend(values)
    labels = {
        "open": "cold session (start to ready)",
        "warm": "warm command `true`",
        "hundred": "100 commands `true`, one after another",
        "close": "close a session",
    }
    rows = []
    for key, label in labels.items():
        subject, baseline = (
            Samples("docker backend", ours[key]),
            Samples("llm-sandbox", theirs[key]),
        )
        goal_met = subject.median <= baseline.median * WARM_GOAL if key == "warm" else None
        rows.append(
            Row(
                "peer-llm-sandbox",
                f"{label} on {IMAGE}",
                subject,
                baseline,
                "<= 1x llm-sandbox" if key == "warm" else "informational",
                goal_met,
                {"speedup": baseline.median / subject.median},
            )
        )
    return rows


SCENARIO = Scenario(
    "peer-llm-sandbox",
    "llm-sandbox vs the docker backend: cold session, warm command, 100 commands, close",
    "warm command at least as fast as llm-sandbox",
    run,
)
