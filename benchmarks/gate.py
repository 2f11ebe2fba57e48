"""Gate overhead: a no-op read tool called directly vs through the full Gate.

The gated path validates arguments, decides, signs an Ed25519 intent,
verifies and spends it, redacts and caps the result, and writes five
hash-chained events to a file. Goal: under 100 µs per call on a 2-core machine.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from ringfence.runtime import CallContext, Consequence, FileSink, Kernel, ToolSpec

from ._harness import Comparison, format_seconds, interleave_async

GOAL = "gate < 100 µs per call"
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False}


async def _noop(args: dict, ctx: CallContext) -> str:
    return "ok"


async def measure(rounds: int = 30, batch: int = 200) -> Comparison:
    with tempfile.TemporaryDirectory() as tmp:
        async with Kernel(events_sink=FileSink(Path(tmp) / "events.jsonl")) as kernel:
            spec = ToolSpec("noop", "does nothing", SCHEMA, _noop, consequence=Consequence.READ)
            kernel.register(spec)
            args = {"x": "hello"}
            ctx = CallContext(kernel, spec, "bench", "bench", "direct", kernel.posture)

            async def direct() -> object:
                return await spec.executor(args, ctx)

            async def gated() -> object:
                return await kernel.call("noop", args)

            base, subj = await interleave_async(
                direct, gated, rounds=rounds, batch=batch, names=("direct", "gated")
            )
    return Comparison("gate", base, subj, GOAL)


def report(c: Comparison) -> str:
    return (
        f"{c.scenario}: direct {format_seconds(c.baseline.median)}/call, "
        f"gated {format_seconds(c.subject.median)}/call "
        f"({c.subject.ops_per_second:,.0f} calls/s, p99 {format_seconds(c.subject.p99)}), "
        f"overhead {format_seconds(c.overhead_seconds)}, ratio {c.ratio:.0f}x; goal: {c.goal}"
    )


def main() -> None:
    quick = "--quick" in sys.argv
    result = trio.run(measure, 6 if quick else 30, 100 if quick else 200)
    print(report(result))


if __name__ == "__main__":
    main()
