"""MCP connector overhead: one tool call through ringfence vs the same call with the bare SDK client.

All arms talk to the same server program over the same transport, each on a
long-lived connection (ringfence's pooled one; an ``mcp.Client`` in legacy
mode with caching off, as ringfence uses it). Rounds interleave the arms
(rotating which goes first) so machine noise lands on all of them. A third
arm, "pool only", calls through ringfence's pooled connection without the
Gate, separating the connector's own cost from the kernel's per-call cost.

The ringfence arm is the whole road: Gate (schema validation, decision,
Ed25519 intent signed and redeemed), events (hash-chained, to a file), the
pooled connection's deadline, result rendering (redaction, cap, untrusted
framing) and the kernel's own redaction and cap.

Servers: @modelcontextprotocol/server-everything ``echo`` over stdio (when the
npm servers are installed), and the in-repo SDK test peer's ``read_note``
over stdio. Goal: ratio of medians under 1.2x.

Run: ``python -m benchmarks.mcp_host [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters, stdio_client

from ringfence.mcp_host import connect_servers, parse_manifest
from ringfence.runtime import FileSink, Kernel

ROOT = Path(__file__).resolve().parent.parent
EVERYTHING = ROOT / "tests" / "npm" / "node_modules" / ".bin" / "mcp-server-everything"
PEER = ROOT / "tests" / "mcp_host" / "servers" / "annotated.py"
GOAL_RATIO = 1.2


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def _interleave(
    arms: list[Callable[[], Awaitable[Any]]], rounds: int, batch: int
) -> list[list[float]]:
    """Per-call seconds for each arm: one batch of each per round, the order rotating every round."""
    out: list[list[float]] = [[] for _ in arms]
    for r in range(rounds):
        order = list(range(len(arms)))
        order = order[r % len(arms) :] + order[: r % len(arms)]
        for i in order:
            start = time.perf_counter()
            for _ in range(batch):
                await arms[i]()
            out[i].append((time.perf_counter() - start) / batch)
    return out


async def measure(
    label: str,
    command: str,
    args: list[str],
    tool: str,
    arguments: dict[str, Any],
    *,
    rounds: int,
    batch: int,
) -> dict[str, Any]:
    manifest = parse_manifest(
        f'[[server]]\nname = "bench"\ntransport = "stdio"\ncommand = {_toml(command)}\n'
        f"args = [{', '.join(_toml(a) for a in args)}]\n",
        "bench.toml",
    )
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("RINGFENCE_HOME", tmp)
        env = {"RF_STATE_DIR": tmp}
        params = StdioServerParameters(command=command, args=args, env=env)
        devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below, after the client
        async with (
            Kernel(events_sink=FileSink(Path(tmp) / "events.jsonl")) as kernel,
            connect_servers(kernel, manifest) as connectors,
            Client(stdio_client(params, errlog=devnull), mode="legacy", cache=None) as client,
        ):
            remote = {t.remote_name: t.name for t in connectors["bench"].tools}[tool]
            pool = connectors["bench"].pool

            async def through_ringfence() -> Any:
                return await kernel.call(remote, arguments)

            async def pooled_connection_only() -> Any:
                return await pool.run("bench", lambda c: c.call_tool(tool, arguments))

            async def bare_sdk() -> Any:
                return await client.call_tool(tool, arguments)

            arms = [through_ringfence, pooled_connection_only, bare_sdk]
            for _ in range(20):  # warm every connection (and the SDK's tool-schema cache)
                for arm in arms:
                    await arm()
            rf, pooled, sdk = await _interleave(arms, rounds, batch)
        devnull.close()
    ratio = statistics.median(rf) / statistics.median(sdk)
    return {
        "scenario": label,
        "ringfence_median_ms": round(statistics.median(rf) * 1000, 3),
        "pool_only_median_ms": round(statistics.median(pooled) * 1000, 3),
        "sdk_median_ms": round(statistics.median(sdk) * 1000, 3),
        "overhead_ms": round((statistics.median(rf) - statistics.median(sdk)) * 1000, 3),
        "ratio": round(ratio, 3),
        "pool_only_ratio": round(statistics.median(pooled) / statistics.median(sdk), 3),
        "goal": f"< {GOAL_RATIO}x",
        "met": ratio < GOAL_RATIO,
        "calls": rounds * batch,
    }


async def run(quick: bool = False) -> list[dict[str, Any]]:
    rounds, batch = (6, 20) if quick else (20, 50)
    rows = []
    if EVERYTHING.exists():
        rows.append(
            await measure(
                "server-everything echo (stdio, node)",
                str(EVERYTHING),
                ["stdio"],
                "echo",
                {"message": "hello"},
                rounds=rounds,
                batch=batch,
            )
        )
    else:
        print(
            f"note: {EVERYTHING} is missing (npm ci --prefix tests/npm); skipping server-everything",
            file=sys.stderr,
        )
    rows.append(
        await measure(
            "SDK test peer read_note (stdio, python)",
            sys.executable,
            [str(PEER)],
            "read_note",
            {"name": "bench"},
            rounds=rounds,
            batch=batch,
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    rows = trio.run(run, args.quick)
    print(
        f"{'scenario':<40} {'ringfence':>10} {'pool only':>10} {'bare SDK':>9} {'overhead':>9} "
        f"{'ratio':>6} {'pool/SDK':>8}  goal"
    )
    for r in rows:
        print(
            f"{r['scenario']:<40} {r['ringfence_median_ms']:>8.3f}ms {r['pool_only_median_ms']:>8.3f}ms "
            f"{r['sdk_median_ms']:>7.3f}ms {r['overhead_ms']:>7.3f}ms {r['ratio']:>5.2f}x {r['pool_only_ratio']:>7.2f}x"
            f"  {r['goal']}: {'met' if r['met'] else 'NOT met'}"
        )
    print(
        "ringfence = the whole road (Gate, intent, events, deadline, rendering); pool only = the MCP "
        "connector without the Gate; ratios are medians over interleaved batches"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
