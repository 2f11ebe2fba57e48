"""A pool of Docker engines, simulated from costs measured in the same run (issue 17).

What it answers: as sessions spread over more engines, how many commands a
second does one kernel drive, how long does a session wait to start, and
where does the kernel itself (one process: the Gate and events on its trio
thread, the merge of each change set on a worker thread) become the bottleneck.

The per-operation costs are measured first, on this machine's engine:

* ``start``: a docker session's cold start (container create + start + its
  supervisor shell);
* ``claim``: a change-set session's start from a warm pool (issue 34);
* ``exec``: a warm command round trip (``true``);
* ``ship``: a 2,000-file workspace sent with ``put_archive``;
* ``fetch``: a small change set (10 files) brought back over the shipped
  session's own stream (a shipped command writing 10 files, less one writing
  nothing);
* ``kernel``: the kernel's own work per command: a call through the Gate and
  the merge of a 10-file change set through the guarded writer (wall time);
* ``kernel_cpu``: the same work's CPU time in the kernel's process: the part
  that is serial. The Gate runs on the kernel's trio thread and the merge on a
  worker thread (``trio.to_thread``), so one command's merge waiting (for its
  file-system threads, the disk) does not hold up another's Gate call; their Python holds one
  GIL, so CPU time is what a kernel cannot do twice at once (an upper bound:
  system calls run without the GIL).

Then a discrete-event model runs on trio's virtual clock (``MockClock``,
autojump): ``SESSIONS_PER_ENGINE`` sessions per engine arrive together (so
linear scaling is ``n`` times one engine's throughput); each is placed on
the engine with the fewest sessions, claims a warm container there (each
engine's pool keeps ``POOL`` warm, refilled by cold starts, one create at a
time per engine: the daemon serializes them) or starts cold, is shipped
(one transfer at a time per engine link), then runs ``K`` commands, each an
exec and its fetch (at most ``cpus`` at a time per engine) and the kernel's
work (its CPU one command at a time per kernel, its waits not). The rows report
commands per second, its fraction of linear, session-start latency (median,
p95) for each pool size, and the kernel's utilisation: when it nears 100 %,
more engines add nothing. A last row models ``KERNELS`` kernels (one per
core here) behind a router, sessions spread over them: the router is not
built; the row says what it would buy.

Non-claims: the model has no network latency between machines (engines are
measured on loopback), no engine failures, and treats every session alike.
"""

from __future__ import annotations

import io
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio
import trio.testing

from ._harness import Samples
from ._suite import Row, Scenario, Skip

SESSIONS_PER_ENGINE = 4
COMMANDS = 20
POOL_SIZES = (1, 2, 4, 8, 16, 32, 64)
ENGINE_CPUS = 2  # the engines are modelled on this machine class
POOL = 4  # warm containers per engine
KERNELS = 2  # the last row: one kernel per core of this machine, behind a router


@dataclass(frozen=True)
class Costs:
    """Seconds per operation (medians of the measurements)."""

    start: float
    claim: float
    exec: float
    ship: float
    fetch: float
    kernel: float
    kernel_cpu: float


@dataclass(frozen=True)
class PoolResult:
    engines: int
    kernels: int
    commands_per_second: float
    start_median: float
    start_p95: float
    kernel_utilisation: float
    start_latencies: tuple[float, ...]


async def simulate(
    costs: Costs, engines: int, sessions: int, commands: int, kernels: int = 1
) -> PoolResult:
    """The model above, on the virtual clock of the current trio run."""
    creates = [trio.CapacityLimiter(1) for _ in range(engines)]
    links = [trio.CapacityLimiter(1) for _ in range(engines)]
    cpus = [trio.CapacityLimiter(ENGINE_CPUS) for _ in range(engines)]
    warm = [POOL] * engines
    placed = [0] * engines
    kernel = [trio.CapacityLimiter(1) for _ in range(kernels)]
    kernel_busy = [0.0]
    starts: list[float] = []
    t0 = trio.current_time()

    async def refill(engine: int) -> None:
        async with creates[engine]:
            await trio.sleep(costs.start)
        warm[engine] += 1

    async def session(index: int, refills: trio.Nursery) -> None:
        engine = min(range(engines), key=lambda i: placed[i])
        placed[engine] += 1
        if warm[engine]:
            warm[engine] -= 1
            await trio.sleep(costs.claim)
            refills.start_soon(refill, engine)
        else:
            async with creates[engine]:
                await trio.sleep(costs.start)
        async with links[engine]:
            await trio.sleep(costs.ship)
        starts.append(trio.current_time() - t0)
        mine = kernel[index % kernels]
        for _ in range(commands):
            async with cpus[engine]:
                await trio.sleep(costs.exec + costs.fetch)
            async with mine:
                kernel_busy[0] += costs.kernel_cpu
                await trio.sleep(costs.kernel_cpu)
            await trio.sleep(max(0.0, costs.kernel - costs.kernel_cpu))  # the merge's waits

    async with trio.open_nursery() as refills:
        async with trio.open_nursery() as nursery:
            for i in range(sessions):
                nursery.start_soon(session, i, refills)
        makespan = trio.current_time() - t0
        refills.cancel_scope.cancel()
    ordered = sorted(starts)
    return PoolResult(
        engines=engines,
        kernels=kernels,
        commands_per_second=sessions * commands / makespan,
        start_median=statistics.median(ordered),
        start_p95=ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        kernel_utilisation=kernel_busy[0] / makespan / kernels,
        start_latencies=tuple(ordered),
    )


def run_model(
    costs: Costs, sizes: tuple[int, ...], per_engine: int, commands: int, kernels: int = 1
) -> list[PoolResult]:
    """Every pool size, each in its own trio run on a virtual clock (blocking, milliseconds)."""

    def one(n: int) -> PoolResult:
        clock = trio.testing.MockClock(autojump_threshold=0)
        return trio.run(simulate, costs, n, n * per_engine, commands, kernels, clock=clock)

    return [one(n) for n in sizes]


# -- measuring the costs --------------------------------------------------------------------------


def _median_of(fn: Callable[[], object], n: int) -> float:
    laps = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        laps.append(time.perf_counter() - t)
    return statistics.median(laps)


def _tree_tar(files: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(files):
            data = (f"file {i}\n" * 8).encode()
            info = tarfile.TarInfo(f"ws/d{i % 40}/f{i}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def measure_costs(quick: bool) -> Costs:
    """The five costs on this machine's engine; Skip when there is none."""
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.docker._session import start_docker
    from ringfence.runtime._errors import RingfenceError

    rounds = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the container's user must be able to enter it
        spec = SessionSpec(roots=(root,), options={"image": "busybox"})
        start_laps: list[float] = []
        session = None
        try:
            for i in range(2 if quick else 4):
                t = time.perf_counter()
                try:
                    fresh = await start_docker(spec)
                except RingfenceError as exc:
                    raise Skip(f"no docker engine to measure: {exc.message}") from None
                start_laps.append(time.perf_counter() - t)
                if i == 0:
                    session = fresh
                else:
                    await fresh.aclose()
            assert session is not None
            exec_laps = []
            for _ in range(20 if quick else 60):
                t = time.perf_counter()
                await session.run("true", cwd=root, env={}, timeout=10, output_cap=4096)
                exec_laps.append(time.perf_counter() - t)
        finally:
            if session is not None:
                await session.aclose()
        claim_s, fetch_s = await _claim_and_fetch(root, quick)
        ship_s = await trio.to_thread.run_sync(_ship_cost, rounds)
        kernel_s, kernel_cpu_s = await _kernel_cost(root, quick)
    return Costs(
        start=statistics.median(start_laps),
        claim=claim_s,
        exec=statistics.median(exec_laps),
        ship=ship_s,
        fetch=fetch_s,
        kernel=kernel_s,
        kernel_cpu=kernel_cpu_s,
    )


async def _claim_and_fetch(root: Path, quick: bool) -> tuple[float, float]:
    """A warm pool's claim, and a 10-file change set's fetch over a shipped session's stream."""
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.docker._pool import WarmPool
    from ringfence.backends.docker._session import start_docker

    shipped = root / "shipped"
    shipped.mkdir(mode=0o755)
    options = {"image": "busybox"}
    spec = SessionSpec(roots=(shipped,), options=options, change_sets=True, spool_dir=root)
    claims, plain, writing = [], [], []
    async with WarmPool(options, size=1) as pool:
        for _ in range(2 if quick else 4):
            await pool.wait_warm()
            t = time.perf_counter()
            session = await start_docker(spec)
            claims.append(time.perf_counter() - t)
            try:
                for _ in range(5 if quick else 15):
                    for laps, command in (
                        (plain, "true"),
                        (writing, "for i in 0 1 2 3 4 5 6 7 8 9; do echo x > m$i.txt; done"),
                    ):
                        t = time.perf_counter()
                        await session.run(command, cwd=shipped, env={}, timeout=10,
                                          output_cap=4096)  # fmt: skip
                        laps.append(time.perf_counter() - t)
            finally:
                await session.aclose()
    fetch = statistics.median(writing) - statistics.median(plain)
    return statistics.median(claims), max(fetch, 0.0)


def _ship_cost(rounds: int) -> float:
    """``put_archive`` of 2,000 files into a scratch container.

    A scratch container because the Engine refuses archives into a container
    whose root file system is read-only (as the sandbox's is), tmpfs or not:
    a shipped workspace lives on a volume.
    """
    from ringfence.backends.docker._api import connect_docker

    client = connect_docker()
    container = client.containers.run(
        "ringfence/busybox:latest", ["sleep", "600"], detach=True, network_mode="none"
    )
    try:
        tree = _tree_tar(2000)

        def ship() -> None:
            container.put_archive("/tmp", tree)

        return _median_of(ship, rounds)
    finally:
        container.remove(force=True)
        client.close()


async def _kernel_cost(root: Path, quick: bool) -> tuple[float, float]:
    """A Gate call plus the merge of a 10-file change set, per command: wall and CPU."""
    from ringfence import create_kernel
    from ringfence.workspace._workspace import Workspace
    from ringfence.workspace.changes._merge import merge_changes
    from ringfence.workspace.changes._model import Change, Image
    from ringfence.workspace.changes._store import CheckpointStore

    ws_root = root / "kernel"
    ws_root.mkdir()
    (ws_root / "m0.txt").write_text("round -\n")  # every round reads a file that exists
    laps = []
    cpu = []
    async with create_kernel(roots=[ws_root], posture="allow-reversible") as kernel:
        with Workspace([ws_root]) as ws:
            store = CheckpointStore(ws)
            try:
                for n in range(5 if quick else 15):
                    data = f"round {n}\n".encode()
                    image = Image("file", 0o644, store.put(data), len(data))
                    changes = [Change(0, f"m{i}.txt", None, image) for i in range(10)]
                    t, c = time.perf_counter(), time.process_time()
                    out = await kernel.invoke("read_file", {"path": "m0.txt"})
                    assert out.error is None, out.error
                    merge_changes(ws, changes, store, force=True)
                    laps.append(time.perf_counter() - t)
                    cpu.append(time.process_time() - c)
            finally:
                store.close()
    return statistics.median(laps), statistics.median(cpu)


async def _pool(quick: bool) -> list[Row]:
    costs = await measure_costs(quick)
    per_engine, commands = (2, 10) if quick else (SESSIONS_PER_ENGINE, COMMANDS)
    results = await trio.to_thread.run_sync(run_model, costs, POOL_SIZES, per_engine, commands)
    results += await trio.to_thread.run_sync(
        run_model, costs, POOL_SIZES[-1:], per_engine, commands, KERNELS
    )
    one = results[0].commands_per_second
    measured = {k: round(v * 1000, 3) for k, v in vars(costs).items()}
    rows = []
    costs_note = ", ".join(f"{k} {v:g} ms" for k, v in measured.items())
    for i, r in enumerate(results):
        rows.append(
            Row(
                "engine-pool",
                f"{r.engines * per_engine} sessions x {commands} commands on {r.engines} "
                f"engine(s){f', {r.kernels} kernels (router not built)' if r.kernels > 1 else ''}: "
                f"{r.commands_per_second:.0f} commands/s "
                f"({r.commands_per_second / (one * r.engines):.2f}x linear), "
                f"kernel {r.kernel_utilisation:.0%} busy",
                Samples(f"session start on {r.engines}", list(r.start_latencies)),
                None,
                "informational (model)",
                None,
                notes={
                    "sweep": True,
                    "series": "session start (median, s)"
                    + (f", {r.kernels} kernels" if r.kernels > 1 else ""),
                    "x": r.engines,
                    "panel": "engines in the pool",
                    "commands_per_second": r.commands_per_second,
                    "linear_fraction": r.commands_per_second / (one * r.engines),
                    "kernels": r.kernels,
                    "start_p95_s": r.start_p95,
                    "kernel_utilisation": r.kernel_utilisation,
                    "measured_costs_ms": measured,
                    **(
                        {
                            "note": f"a model (ringfence/bench/engines.py) on costs measured now: {costs_note}"
                        }
                        if i == 0
                        else {}
                    ),
                },
            )
        )
    return rows


SCENARIOS = [
    Scenario(
        "engine-pool",
        "a pool of engines, simulated from measured costs: throughput and session start",
        "informational: where the kernel becomes the bottleneck",
        _pool,
    ),
]
