"""run_tool_script costs, measured against their baselines in one interleaved run.

1. **startup**: an empty script through ``kernel.invoke("run_tool_script")``
   (Gate, approval, listener, handshake, sandbox, compile, result) vs a bare
   ``python -I -c pass``: with the tool's spare runner ready, back to back,
   and cold. Goal: within 2.5x. ``python -I -S -c pass`` is noted: the runner
   skips ``site``.
2. **call_tool**: round trips on a no-op read tool from inside a script
   (timed in the script around each call) vs the same call made directly
   through the Gate (``kernel.invoke``). Goal: at least 5,000 calls/s with
   p99 under 1 ms.

Run: ``python -m benchmarks.bridge [--quick]`` from the checkout.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from ringfence.bridge import SCRIPT_TOOL, register_script_tool, run_script
from ringfence.runtime import (
    ApprovalAnswer,
    CallContext,
    Consequence,
    FileSink,
    Kernel,
    ScriptedApprover,
    ToolSpec,
)

from ._harness import Samples, format_seconds
from ._suite import Row, Scenario

STARTUP_RATIO_GOAL = 2.5
CALLS_PER_SECOND_GOAL = 5000
P99_GOAL_SECONDS = 1e-3
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False}

# Times each call with datetime (the only clock a restricted script has); µs resolution.
CALLS_SCRIPT = """
import datetime
now = datetime.datetime.now
laps = []
for i in range({n}):
    t0 = now()
    call_tool("noop", x="hello")
    laps.append((now() - t0).total_seconds())
result = laps
"""


async def _noop(args: dict, ctx: CallContext) -> str:
    return "ok"


def _kernel(tmp: str) -> Kernel:
    kernel = Kernel(
        approver=ScriptedApprover(lambda r: ApprovalAnswer.once("bench")),
        events_sink=FileSink(Path(tmp) / "events.jsonl"),
    )
    kernel.register(ToolSpec("noop", "does nothing", SCHEMA, _noop, consequence=Consequence.READ))
    register_script_tool(kernel)
    return kernel


async def startup(quick: bool) -> list[Row]:
    """Empty scripts end to end vs bare python, interleaved run by run.

    Three ways a run can start: the tool's spare runner is ready (the usual
    case between a model's turns; an idle gap before each run, not timed),
    runs back to back (the spare started by one run is still importing when
    the next arrives), and cold (no spare, as for a session's first script).
    """
    rounds = 6 if quick else 30
    no_site = min(_time(lambda: _bare("-I", "-S")) for _ in range(5))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with _kernel(tmp) as kernel:

            async def via_tool() -> None:
                outcome = await kernel.invoke(SCRIPT_TOOL, {"script": "pass"})
                assert outcome.ok, outcome.error

            async def cold() -> None:
                result = await run_script(kernel, "pass", timeout=30, trace_id="bench")
                assert result.status == "ok", result.error

            await via_tool()  # warm the page cache and start the spare
            for label, subject, gap in (
                ("spare runner ready", via_tool, 0.3),
                ("back to back", via_tool, 0.0),
                ("cold start", cold, 0.0),
            ):
                base, subj = Samples("python -I -c pass"), Samples(f"empty script, {label}")
                for i in range(rounds):
                    await trio.sleep(gap)  # not timed: lets the spare finish its imports
                    for fn, samples in ((_bare_async, base), (subject, subj))[
                        :: 1 if i % 2 else -1
                    ]:
                        t0 = time.perf_counter()
                        await fn()
                        samples.per_op.append(time.perf_counter() - t0)
                ratio = subj.median / base.median
                rows.append(
                    Row(
                        "bridge-startup",
                        f"empty run_tool_script end to end, {label}",
                        subj,
                        base,
                        f"<= {STARTUP_RATIO_GOAL}x python -I -c pass",
                        ratio <= STARTUP_RATIO_GOAL,
                        {"ratio": round(ratio, 2), "python_-I_-S_-c_pass_s": no_site},
                    )
                )
    return rows


def _bare(*flags: str) -> object:
    return subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)


async def _bare_async() -> None:
    _bare("-I")


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


async def round_trips(quick: bool) -> Row:
    rounds, n = (4, 500) if quick else (10, 2000)
    direct = Samples("direct through the Gate")
    script = Samples("call_tool from a script")
    script_rates: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with _kernel(tmp) as kernel:
            source = CALLS_SCRIPT.format(n=n)

            async def direct_batch() -> None:
                for _ in range(n):
                    t0 = time.perf_counter()
                    outcome = await kernel.invoke("noop", {"x": "hello"})
                    direct.per_op.append(time.perf_counter() - t0)
                    assert outcome.ok

            async def script_batch() -> None:
                outcome = await kernel.invoke(SCRIPT_TOOL, {"script": source})
                assert outcome.ok, outcome.error
                laps = outcome.value["result"]
                script.per_op.extend(laps)
                script_rates.append(len(laps) / sum(laps))

            await direct_batch()  # warm
            direct.per_op.clear()
            for i in range(rounds):
                for fn in (
                    (direct_batch, script_batch) if i % 2 == 0 else (script_batch, direct_batch)
                ):
                    await fn()
    rate = script.ops_per_second
    met = rate >= CALLS_PER_SECOND_GOAL and script.p99 < P99_GOAL_SECONDS
    return Row(
        "bridge-call-tool",
        "call_tool round trip on a no-op read tool",
        script,
        direct,
        f">= {CALLS_PER_SECOND_GOAL}/s, p99 < 1 ms",
        met,
        {
            "script_calls_per_second": round(rate),
            "script_calls_per_second_sustained": round(min(script_rates)),
            "direct_calls_per_second": round(direct.ops_per_second),
            "bridge_overhead_s": script.median - direct.median,
            "script_p99_s": script.p99,
            "direct_p99_s": direct.p99,
        },
    )


async def run(quick: bool) -> list[Row]:
    return [*await startup(quick), await round_trips(quick)]


SCENARIO = Scenario(
    "bridge",
    "run_tool_script: startup vs bare python, call_tool vs direct",
    "startup <= 2.5x python -I; >= 5000 call_tool/s, p99 < 1 ms",
    run,
)


def main(argv: list[str] | None = None) -> None:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    rows = trio.run(run, quick)
    for row in rows:
        print(f"{row.scenario}: {row.label}")
        print(
            f"  subject  {row.subject.name:28} median {format_seconds(row.subject.median):>9}"
            f"  p99 {format_seconds(row.subject.p99):>9}  ({len(row.subject.per_op)} samples)"
        )
        if row.baseline is not None:
            print(
                f"  baseline {row.baseline.name:28} median {format_seconds(row.baseline.median):>9}"
                f"  p99 {format_seconds(row.baseline.p99):>9}"
            )
        for key, value in row.notes.items():
            shown = format_seconds(value) if key.endswith("_s") else value
            print(f"  {key}: {shown}")
        print(f"  goal {row.goal}: {'met' if row.goal_met else 'NOT met'}")


if __name__ == "__main__":
    main()
