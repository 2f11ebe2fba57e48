"""run_tool_script costs, measured against their baselines in one interleaved run.

1. **startup** (``bridge-startup``): an empty script through
   ``kernel.invoke("run_tool_script")`` (Gate, approval, listener, handshake,
   sandbox, compile, result) vs a bare ``python -I -c pass``: with the tool's
   spare runner ready, back to back, and cold. Goal (issue 5): within 2.5x.
   ``python -I -S -c pass`` is noted: the runner skips ``site``.
2. **call_tool** (``bridge-call-tool``): round trips on a no-op read tool from
   inside a script (timed in the script around each call) vs the same call
   made directly through the Gate (``kernel.invoke``). Goal: at least 5,000
   calls/s with p99 under 1 ms.
3. **scaling sweep** (``sweep-calls``, ``sweep-concurrency``): 1, 10, 100,
   1000 ``call_tool`` calls in one script, and 1 to 8 scripts running at once
   under the same kernel (trio nursery), each against the same calls made
   directly through the Gate.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ringfence.bridge import SCRIPT_TOOL, register_script_tool, run_script
from ringfence.runtime._approval import ApprovalAnswer, ScriptedApprover
from ringfence.runtime._calls import CallContext
from ringfence.runtime._events import FileSink
from ringfence.runtime._kernel import Kernel
from ringfence.runtime._tools import Consequence, ToolSpec

from ._harness import Arm, Samples, interleave
from ._suite import Row, Scenario, Skip

STARTUP_RATIO_GOAL = 2.5
CALLS_PER_SECOND_GOAL = 5000
P99_GOAL_SECONDS = 1e-3
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False}
SPARE_SETTLE_SECONDS = 0.3  # untimed: lets the spare runner finish its imports before a round

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
async def script_kernel() -> AsyncIterator[Kernel]:
    """A kernel with ``noop`` and ``run_tool_script``; every script approved once.

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
        register_script_tool(kernel)
        async with kernel:
            # The probe also warms the page cache and starts the spare runner.
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

    Three ways a run can start: the tool's spare runner is ready (the usual
    case between a model's turns; an idle gap before each round, not timed),
    runs back to back (the spare started by one run is still importing when
    the next arrives), and cold (no spare, as for a session's first script).
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

        for label, subject, gap in (
            ("spare runner ready", via_tool, SPARE_SETTLE_SECONDS),
            ("back to back", via_tool, 0.0),
            ("cold start", cold, 0.0),
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
                    f"within {STARTUP_RATIO_GOAL:g}x python -I -c pass",
                    ratio <= STARTUP_RATIO_GOAL,
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
                pause=SPARE_SETTLE_SECONDS,  # each script starts from a ready spare
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
                            "note": "sweeps: wall time per run, each run starting from a ready "
                            "spare runner; baseline = the same calls made directly through the Gate"
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
                            "note": "one spare runner per kernel: of k scripts started together, "
                            "k-1 start a fresh interpreter"
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
    f"within {STARTUP_RATIO_GOAL:g}x python -I -c pass",
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
