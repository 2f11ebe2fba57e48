"""Gate overhead: a no-op read tool called directly vs through the full Gate.

The gated path validates arguments, decides, signs an Ed25519 intent,
redeems it, redacts and caps the result, and writes four hash-chained events
to a file. Goal: under 100 µs per call on a 2-core machine.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ringfence.runtime import CallContext, Consequence, FileSink, Kernel, ToolSpec

from ._harness import interleave_async
from ._suite import Row, Scenario

GOAL_SECONDS = 100e-6
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False}


async def _noop(args: dict, ctx: CallContext) -> str:
    return "ok"


async def run(quick: bool) -> list[Row]:
    rounds, batch = (6, 100) if quick else (30, 200)
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
    overhead = subj.median - base.median
    return [
        Row(
            "gate",
            "no-op read tool through the Gate",
            subj,
            base,
            "overhead < 100 µs/call",
            overhead < GOAL_SECONDS,
            {"calls_per_second": round(subj.ops_per_second), "overhead_s": overhead},
        )
    ]


SCENARIO = Scenario("gate", "Gate overhead per call", "< 100 µs per call", run)
