"""run_tool_script costs, measured against their baselines in one interleaved run.

1. **startup** (``bridge-startup``): an empty script through
   ``kernel.invoke("run_tool_script")`` (Gate, approval, listener, handshake,
   sandbox, compile, result) vs a bare ``python -I -c pass``: with the tool's
   warm runners ready, back to back, and cold (no warm runner). Goals (issue
   33): warm within 0.5x, cold within 2x. ``python -I -S -c pass`` is noted:
   the runner skips ``site``.
2. **call_tool** (``bridge-call-tool``): round trips on a no-op read tool from
   inside a script (timed in the script around each call) vs the same call
   made directly through the Gate (``kernel.invoke``). Goal: at least 5,000
   calls/s with p99 under 1 ms.
3. **code mode** (``code-mode``, issue 33), each against smolagents'
   ``LocalPythonExecutor`` doing the same work through a Python function (no
   process boundary, no Gate) and the same calls made directly through the
   Gate, interleaved in the same run: sequential no-op calls from one script
   (per call within 3x smolagents; at least 10,000 calls/s; beside them the
   floor, a bare round trip to a Python child over a Unix socket, so a row
   says where a call's time goes), 50 ``parallel``
   ``read_file`` calls in one script (at least 20,000 calls/s), 8 scripts of
   200 calls at once from the warm pool (at least 10,000 calls/s in all).
   smolagents is the ``peers`` extra; without it those rows keep only the Gate
   baseline and say so.
4. **scaling sweep** (``sweep-calls``, ``sweep-concurrency``): 1, 10, 100,
   1000 ``call_tool`` calls in one script, and 1 to 8 scripts running at once
   under the same kernel (trio nursery), each against the same calls made
   directly through the Gate.
"""

from __future__ import annotations

import socket as stdsocket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from ringfence.bridge._config import ScriptConfig
from ringfence.bridge._host import run_script
from ringfence.bridge._tool import SCRIPT_TOOL, register_script_tool
from ringfence.runtime._approval import ApprovalAnswer, ScriptedApprover
from ringfence.runtime._calls import CallContext
from ringfence.runtime._events import FileSink
from ringfence.runtime._kernel import Kernel
from ringfence.runtime._tools import Consequence, ToolSpec

from ._harness import Arm, Samples, interleave
from ._suite import Row, Scenario, Skip

STARTUP_RATIO_GOAL = 2.5  # issue 5's goal for every start, kept for the back-to-back row
COLD_RATIO_GOAL = 2.0  # issue 33: an empty script, cold, within 2x python -I -c pass
WARM_RATIO_GOAL = 0.5  # issue 33: from a warm runner, within 0.5x
CALLS_PER_SECOND_GOAL = 5000
P99_GOAL_SECONDS = 1e-3
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False}
# Untimed: lets the warm pool refill (it waits for launches to pause, then starts the
# interpreters) before a round.
SPARE_SETTLE_SECONDS = 0.8

# Times each call with datetime (the only clock a restricted script has); µs resolution.
TIMED_CALLS_SCRIPT = """
import datetime
now = datetime.datetime.now
laps = []
for i in range({n}):
    t0 = now()
    call_tool("noop", x="hello")
    laps.append((now() - t0).total_seconds())
result = laps
"""
CALLS_SCRIPT = """
for i in range({n}):
    call_tool("noop", x="hello")
"""


async def _noop(args: dict, ctx: CallContext) -> str:
    return "ok"


@asynccontextmanager
async def script_kernel(
    config: ScriptConfig | None = None, tools: list[ToolSpec] | None = None
) -> AsyncIterator[Kernel]:
    """A kernel with ``noop`` (and ``tools``) and ``run_tool_script``; every script approved once.

    Raises Skip when the script sandbox cannot start on this host (a layer
    such as Landlock or seccomp is missing): the probe run says which.
    """
    with tempfile.TemporaryDirectory() as tmp:
        kernel = Kernel(
            approver=ScriptedApprover(lambda r: ApprovalAnswer.once("bench")),
            events_sink=FileSink(Path(tmp) / "events.jsonl"),
        )
        kernel.register(
            ToolSpec("noop", "does nothing", SCHEMA, _noop, consequence=Consequence.READ)
        )
        for spec in tools or ():
            kernel.register(spec)
        register_script_tool(kernel, config=config)
        async with kernel:
            # The probe also warms the page cache and starts the warm runners.
            probe = await kernel.invoke(SCRIPT_TOOL, {"script": "pass"})
            if probe.error is not None and probe.error.code == "unavailable":
                raise Skip(f"run_tool_script cannot run here: {probe.error.message}")
            if probe.error is not None:
                raise RuntimeError(f"an empty script failed: {probe.error.message}")
            yield kernel


async def run_ok(kernel: Kernel, source: str) -> Any:
    """Run a script through the Gate; its value, or RuntimeError naming the failure."""
    outcome = await kernel.invoke(SCRIPT_TOOL, {"script": source})
    if not outcome.ok:
        raise RuntimeError(
            f"benchmark script failed: {outcome.error.code}: {outcome.error.message}"
        )
    return outcome.value


async def direct_calls(kernel: Kernel, n: int) -> list[float]:
    """``n`` no-op calls through the Gate; the seconds each took."""
    laps = []
    for _ in range(n):
        t0 = time.perf_counter()
        outcome = await kernel.invoke("noop", {"x": "hello"})
        laps.append(time.perf_counter() - t0)
        if not outcome.ok:
            raise RuntimeError(f"noop failed: {outcome.error.message}")
    return laps


def _bare(*flags: str) -> object:
    return subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)


async def _bare_isolated() -> None:
    _bare("-I")  # blocking on purpose: the baseline is the plainest start


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


async def startup(quick: bool) -> list[Row]:
    """Empty scripts end to end vs bare python, interleaved run by run.

    Three ways a run can start: a warm runner is ready (the usual case
    between a model's turns; an idle gap before each round lets the pool
    refill, not timed), runs back to back (the pool refills only once
    launches pause, so these take the runners left and then start fresh
    ones), and cold (no warm runner, as for a session's first script).
    """
    rounds = 6 if quick else 30
    no_site = min(_time(lambda: _bare("-I", "-S")) for _ in range(5))
    rows = []
    async with script_kernel() as kernel:

        async def via_tool() -> None:
            await run_ok(kernel, "pass")

        async def cold() -> None:
            result = await run_script(kernel, "pass", timeout=30, trace_id="bench")
            if result.status != "ok":
                raise RuntimeError(f"empty script failed: {result.error}")

        for label, subject, gap, goal in (
            ("warm runner ready", via_tool, SPARE_SETTLE_SECONDS, WARM_RATIO_GOAL),
            ("back to back", via_tool, 0.0, STARTUP_RATIO_GOAL),
            ("cold start", cold, 0.0, COLD_RATIO_GOAL),
        ):
            name = f"empty script, {label}"
            s = await interleave(
                [Arm("python -I -c pass", _bare_isolated), Arm(name, subject)],
                rounds=rounds,
                pause=gap,
            )
            base, subj = s["python -I -c pass"], s[name]
            ratio = subj.median / base.median
            rows.append(
                Row(
                    "bridge-startup",
                    f"empty run_tool_script, {label}",
                    subj,
                    base,
                    f"within {goal:g}x python -I -c pass",
                    ratio <= goal,
                    {"python_-I_-S_-c_pass_s": no_site},
                )
            )
    return rows


async def round_trips(quick: bool) -> list[Row]:
    rounds, n = (4, 500) if quick else (10, 2000)
    script_rates: list[float] = []
    async with script_kernel() as kernel:
        source = TIMED_CALLS_SCRIPT.format(n=n)

        async def direct_batch() -> list[float]:
            return await direct_calls(kernel, n)

        async def script_batch() -> list[float]:
            laps = (await run_ok(kernel, source))["result"]
            script_rates.append(len(laps) / sum(laps))
            return laps

        s = await interleave(
            [
                Arm("direct through the Gate", direct_batch, self_timed=True),
                Arm("call_tool from a script", script_batch, self_timed=True),
            ],
            rounds=rounds,
            warmup=1,
        )
    direct, script = s["direct through the Gate"], s["call_tool from a script"]
    rate = script.ops_per_second
    return [
        Row(
            "bridge-call-tool",
            "call_tool round trip, no-op read tool",
            script,
            direct,
            f">= {CALLS_PER_SECOND_GOAL:,}/s, p99 < 1 ms",
            rate >= CALLS_PER_SECOND_GOAL and script.p99 < P99_GOAL_SECONDS,
            {
                "script_calls_per_second": round(rate),
                "script_calls_per_second_sustained": round(min(script_rates)),
                "direct_calls_per_second": round(direct.ops_per_second),
                "bridge_overhead_s": script.median - direct.median,
                "note": f"{round(rate):,} call_tool/s from a script (median lap); "
                f"{round(direct.ops_per_second):,}/s direct through the Gate",
            },
        )
    ]


SWEEP_CALLS = (1, 10, 100, 1000)
SWEEP_CONCURRENCY = (1, 2, 4, 8)
CALLS_PER_CONCURRENT_SCRIPT = 100
DIRECT = "same calls direct through the Gate"


def _sweep_row(
    scenario: str, label: str, panel: str, x: int, subject: Samples, baseline: Samples, **notes: Any
) -> Row:
    return Row(
        scenario,
        label,
        subject,
        baseline,
        "informational (scaling)",
        None,
        {"sweep": True, "panel": panel, "series": "run_tool_script", "x": x, **notes},
    )


async def sweep_calls(quick: bool) -> list[Row]:
    """Wall time of one script making N calls vs the N calls made directly, per N."""
    rounds = 3 if quick else 10
    rows = []
    async with script_kernel() as kernel:
        for n in SWEEP_CALLS:
            source = CALLS_SCRIPT.format(n=n)

            async def script(source: str = source) -> None:
                await run_ok(kernel, source)

            async def direct(n: int = n) -> None:
                await direct_calls(kernel, n)

            subject = f"script making {n} calls"
            s = await interleave(
                [Arm(DIRECT, direct), Arm(subject, script)],
                rounds=rounds,
                pause=SPARE_SETTLE_SECONDS,  # each script starts from a warm runner
            )
            rows.append(
                _sweep_row(
                    "sweep-calls",
                    f"one script making {n} call_tool call{'s' if n > 1 else ''}, per run",
                    "calls per script",
                    n,
                    Samples("run_tool_script", s[subject].per_op),
                    Samples(DIRECT, s[DIRECT].per_op),
                    calls_per_second=n / s[subject].median,
                    **(
                        {
                            "note": "sweeps: wall time per run, each run starting from a warm "
                            "runner; baseline = the same calls made directly through the Gate"
                        }
                        if n == SWEEP_CALLS[0]
                        else {}
                    ),
                )
            )
    return rows


async def sweep_concurrency(quick: bool) -> list[Row]:
    """Wall time of k scripts at once (one nursery, one kernel) vs k direct callers at once."""
    rounds = 3 if quick else 8
    m = CALLS_PER_CONCURRENT_SCRIPT
    source = CALLS_SCRIPT.format(n=m)
    rows = []
    async with script_kernel() as kernel:
        for k in SWEEP_CONCURRENCY:

            async def scripts(k: int = k) -> None:
                async with trio.open_nursery() as nursery:
                    for _ in range(k):
                        nursery.start_soon(run_ok, kernel, source)

            async def direct(k: int = k) -> None:
                async with trio.open_nursery() as nursery:
                    for _ in range(k):
                        nursery.start_soon(direct_calls, kernel, m)

            subject = f"{k} scripts at once"
            s = await interleave(
                [Arm(DIRECT, direct), Arm(subject, scripts)],
                rounds=rounds,
                pause=SPARE_SETTLE_SECONDS,
            )
            rows.append(
                _sweep_row(
                    "sweep-concurrency",
                    f"{k} script{'s' if k > 1 else ''} at once x {m} calls, until all finish",
                    "concurrent scripts",
                    k,
                    Samples("run_tool_script", s[subject].per_op),
                    Samples(DIRECT, s[DIRECT].per_op),
                    calls_per_second=k * m / s[subject].median,
                    **(
                        {
                            "note": "warm runners: one per core by default; of k scripts "
                            "started together, those past the pool start a fresh interpreter"
                        }
                        if k == SWEEP_CONCURRENCY[-1]
                        else {}
                    ),
                )
            )
    return rows


STARTUP = Scenario(
    "bridge-startup",
    "empty run_tool_script vs python -I -c pass",
    f"warm within {WARM_RATIO_GOAL:g}x, cold within {COLD_RATIO_GOAL:g}x python -I -c pass",
    startup,
)
CALL_TOOL = Scenario(
    "bridge-call-tool",
    "call_tool round trips from a script vs direct through the Gate",
    f">= {CALLS_PER_SECOND_GOAL:,} calls/s, p99 < 1 ms",
    round_trips,
)
SWEEP_CALLS_SCENARIO = Scenario(
    "sweep-calls",
    "scaling: 1-1000 call_tool calls per script",
    "informational",
    sweep_calls,
)
SWEEP_CONCURRENCY_SCENARIO = Scenario(
    "sweep-concurrency",
    f"scaling: 1-8 concurrent scripts, {CALLS_PER_CONCURRENT_SCRIPT} calls each",
    "informational",
    sweep_concurrency,
)
SCENARIOS = [STARTUP, CALL_TOOL, SWEEP_CALLS_SCENARIO, SWEEP_CONCURRENCY_SCENARIO]


# -- code mode (issue 33): the typed API, parallel calls and the warm pool, against smolagents --

SEQUENTIAL_GOAL = 3.0  # per call from one script: within 3x smolagents' unisolated call
SEQUENTIAL_RATE_GOAL = 10_000  # no-op calls/s from one script
PARALLEL_RATE_GOAL = 20_000  # parallel read_file calls/s in one script
CONCURRENT_RATE_GOAL = 10_000  # calls/s in total, 8 scripts at once
PARALLEL_CALLS = 50
CONCURRENT_SCRIPTS = 8
CONCURRENT_CALLS = 200
PEER = "smolagents LocalPythonExecutor"
GATE = "same calls direct through the Gate"

# Timed inside the script: the calls alone, not the script's start.
SEQUENTIAL_SCRIPT = """
import time
t0 = time.perf_counter()
for i in range({n}):
    tools.noop(x="hello")
result = (time.perf_counter() - t0) / {n}
"""
PEER_SEQUENTIAL = """
for i in range({n}):
    noop(x="hello")
"""
PARALLEL_SCRIPT = """
import time
paths = ["f%d.txt" % i for i in range({n})]
t0 = time.perf_counter()
texts = parallel(tools.read_file(path=p) for p in paths)
result = [(time.perf_counter() - t0) / {n}, sum(len(t) for t in texts)]
"""
PEER_PARALLEL = """
total = 0
for i in range({n}):
    total += len(read_file(path="f%d.txt" % i))
total
"""
CONCURRENT_SCRIPT = """
for i in range({n}):
    tools.noop(x="hello")
"""


# The floor under any call that crosses a process boundary: a Python child echoing what it
# reads on a Unix socket, the host end driven by trio as the bridge's is. No codec, no Gate.
ECHO_CHILD = """
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
while d := s.recv(65536):
    s.sendall(d)
"""
# About the sizes of a no-op call's frame and of its reply.
CALL_BYTES = b"c" * 140
REPLY_BYTES = b"r" * 220


class EchoPeer:
    """A ``python -I -S`` child that echoes on one end of a socket pair; the round-trip floor."""

    def __init__(self) -> None:
        host, child = stdsocket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", ECHO_CHILD, str(child.fileno())],
                pass_fds=[child.fileno()],
            )
        finally:
            child.close()
        host.setblocking(False)
        self.sock = host

    async def round_trips(self, n: int) -> list[float]:
        """``n`` round trips of a call-sized frame out and back; the mean seconds of one."""
        sock = self.sock
        t0 = time.perf_counter()
        for _ in range(n):
            sock.send(CALL_BYTES)
            got = 0
            while got < len(CALL_BYTES):
                try:
                    got += len(sock.recv(65536))
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(sock)
        return [(time.perf_counter() - t0) / n]

    def close(self) -> None:
        self.sock.close()
        self.proc.wait(timeout=10)


def _peer(root: Path) -> Callable[[], Any] | None:
    """A factory of smolagents executors with ``noop`` and ``read_file`` tools, or None."""
    try:
        from smolagents import Tool
        from smolagents.local_python_executor import LocalPythonExecutor
    except ImportError:
        return None

    class Noop(Tool):  # class tools: smolagents' @tool needs the source file
        name = "noop"
        description = "does nothing"
        inputs = {"x": {"type": "string", "description": "ignored"}}
        output_type = "string"

        def forward(self, x: str) -> str:
            return "ok"

    class ReadFile(Tool):
        name = "read_file"
        description = "reads a file of the workspace"
        inputs = {"path": {"type": "string", "description": "relative path"}}
        output_type = "string"

        def forward(self, path: str) -> str:
            return (root / path).read_text()

    def make() -> Any:
        executor = LocalPythonExecutor(additional_authorized_imports=[])
        executor.send_tools({"noop": Noop(), "read_file": ReadFile()})
        return executor

    return make


def _peer_run(executor: Any, source: str) -> Any:
    return executor(source).output


def _rate_row(label: str, subject: Samples, baseline: Samples, goal: int, **notes: Any) -> Row:
    return Row(
        "code-mode",
        label,
        subject,
        baseline,
        f">= {goal:,} calls/s",
        subject.ops_per_second >= goal,
        {"calls_per_second": round(subject.ops_per_second), **notes},
    )


async def code_mode(quick: bool) -> list[Row]:
    """Sequential, parallel and concurrent calls from scripts, against smolagents and the Gate."""
    from ringfence.workspace._file_tools import file_tool_specs
    from ringfence.workspace._workspace import Workspace

    rounds = 3 if quick else 7
    n = 300 if quick else 1000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(PARALLEL_CALLS):
            (root / f"f{i}.txt").write_text(f"line {i}\n" * 40)
        make_peer = _peer(root)
        peer = make_peer() if make_peer is not None else None
        missing = (
            {}
            if peer is not None
            else {"note": "smolagents is not installed: pip install -e '.[peers]'"}
        )
        workspace = Workspace([str(root)])
        config = ScriptConfig(warm_runners=CONCURRENT_SCRIPTS)
        try:
            async with script_kernel(config, file_tool_specs(workspace)) as kernel:
                rows += await _sequential(kernel, peer, n, rounds, missing)
                rows += await _parallel(kernel, peer, rounds, missing)
                rows += await _concurrent(kernel, make_peer, rounds, missing)
        finally:
            workspace.close()
    return rows


async def _sequential(
    kernel: Kernel, peer: Any, n: int, rounds: int, missing: dict[str, Any]
) -> list[Row]:
    ours = "tools.noop from a script (typed API)"

    async def script() -> list[float]:
        return [(await run_ok(kernel, SEQUENTIAL_SCRIPT.format(n=n)))["result"]]

    async def gate() -> None:
        await direct_calls(kernel, n)

    echo = EchoPeer()
    floor = "bare round trip to a Python child (floor)"
    arms = [
        Arm(ours, script, self_timed=True),
        Arm(GATE, gate),
        Arm(floor, partial(echo.round_trips, n), self_timed=True),
    ]
    if peer is not None:
        source = PEER_SEQUENTIAL.format(n=n)
        arms.append(Arm(PEER, lambda: _async(_peer_run, peer, source)))
    try:
        s = await interleave(arms, rounds=rounds, warmup=1, pause=SPARE_SETTLE_SECONDS)
    finally:
        echo.close()
    subject, gate_s = s[ours], _per_call(s[GATE], n)
    # Where a call's time goes: the process boundary's floor and the Gate, measured in the
    # same rounds; the rest is the bridge's own work (both ends' framing, HMAC, JSON, the
    # typed check) and what switching processes costs the caches on a busy machine.
    where = {
        "round_trip_floor_s": s[floor].median,
        "gate_direct_s": gate_s.median,
        "bridge_rest_s": subject.median - s[floor].median - gate_s.median,
    }
    where["note"] = (
        f"a call's {subject.median * 1e6:.0f} µs: {s[floor].median * 1e6:.0f} µs a bare round "
        f"trip between two Python processes, {gate_s.median * 1e6:.0f} µs the Gate, the rest "
        "the bridge (framing, HMAC, JSON, typed check) and process switches"
    )
    rows = []
    if peer is not None:
        theirs = _per_call(s[PEER], n)
        rows.append(
            Row(
                "code-mode",
                f"per call, {n} sequential no-op calls from one script, vs smolagents",
                subject,
                theirs,
                f"within {SEQUENTIAL_GOAL:g}x smolagents' unisolated call",
                subject.median / theirs.median <= SEQUENTIAL_GOAL,
                where,
            )
        )
    rows.append(
        _rate_row(
            f"{n} sequential no-op calls from one script, vs direct through the Gate",
            subject,
            gate_s,
            SEQUENTIAL_RATE_GOAL,
            **{k: v for k, v in where.items() if k != "note"},
            **missing,
        )
    )
    return rows


async def _parallel(kernel: Kernel, peer: Any, rounds: int, missing: dict[str, Any]) -> list[Row]:
    ours = f"parallel() of {PARALLEL_CALLS} read_file calls in one script"
    paths = [f"f{i}.txt" for i in range(PARALLEL_CALLS)]

    async def script() -> list[float]:
        value = (await run_ok(kernel, PARALLEL_SCRIPT.format(n=PARALLEL_CALLS)))["result"]
        return [value[0]]

    async def gate() -> None:
        for p in paths:
            outcome = await kernel.invoke("read_file", {"path": p})
            if not outcome.ok:
                raise RuntimeError(f"read_file failed: {outcome.error.message}")

    arms = [Arm(ours, script, self_timed=True), Arm(GATE, gate)]
    if peer is not None:
        source = PEER_PARALLEL.format(n=PARALLEL_CALLS)
        arms.append(Arm(PEER, lambda: _async(_peer_run, peer, source)))
    s = await interleave(arms, rounds=rounds * 2, warmup=1, pause=SPARE_SETTLE_SECONDS)
    subject, gate_s = s[ours], _per_call(s[GATE], PARALLEL_CALLS)
    notes: dict[str, Any] = {"gate_direct_s": gate_s.median, **missing}
    if peer is not None:
        notes["smolagents_per_call_s"] = _per_call(s[PEER], PARALLEL_CALLS).median
    return [
        _rate_row(
            f"{PARALLEL_CALLS} parallel read_file calls in one script, vs direct through the Gate",
            subject,
            gate_s,
            PARALLEL_RATE_GOAL,
            **notes,
        )
    ]


async def _concurrent(
    kernel: Kernel, make_peer: Callable[[], Any] | None, rounds: int, missing: dict[str, Any]
) -> list[Row]:
    k, m = CONCURRENT_SCRIPTS, CONCURRENT_CALLS
    ours = f"{k} scripts x {m} calls at once"
    source = CONCURRENT_SCRIPT.format(n=m)

    async def scripts() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(run_ok, kernel, source)

    arms = [Arm(ours, scripts)]
    if make_peer is not None:
        executors = [make_peer() for _ in range(k)]
        peer_source = PEER_SEQUENTIAL.format(n=m)
        limiter = trio.CapacityLimiter(k)

        async def threads() -> None:
            async with trio.open_nursery() as nursery:
                for executor in executors:
                    nursery.start_soon(
                        partial(trio.to_thread.run_sync, limiter=limiter),
                        _peer_run,
                        executor,
                        peer_source,
                    )

        arms.append(Arm(f"smolagents, {k} threads", threads))
    s = await interleave(arms, rounds=rounds, pause=SPARE_SETTLE_SECONDS * 2)
    subject = _per_call(s[ours], k * m)
    baseline = _per_call(s[f"smolagents, {k} threads"], k * m) if make_peer else None
    return [
        Row(
            "code-mode",
            f"{k} scripts x {m} no-op calls at once (warm pool of {k}), calls/s in all",
            subject,
            baseline,
            f">= {CONCURRENT_RATE_GOAL:,} calls/s",
            subject.ops_per_second >= CONCURRENT_RATE_GOAL,
            {"calls_per_second": round(subject.ops_per_second), **missing},
        )
    ]


def _per_call(samples: Samples, n: int) -> Samples:
    return Samples(samples.name, [x / n for x in samples.per_op])


async def _async(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)  # blocking on purpose: the peer runs in this thread, as its users run it


CODE_MODE = Scenario(
    "code-mode",
    "typed tool calls from scripts: sequential, parallel, 8 at once; vs smolagents and the Gate",
    f"per call within {SEQUENTIAL_GOAL:g}x smolagents; >= {SEQUENTIAL_RATE_GOAL:,}/s sequential, "
    f">= {PARALLEL_RATE_GOAL:,}/s parallel, >= {CONCURRENT_RATE_GOAL:,}/s 8 scripts at once",
    code_mode,
)
SCENARIOS.insert(2, CODE_MODE)
