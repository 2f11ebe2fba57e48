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

Servers: @modelcontextprotocol/server-everything ``echo`` over stdio (needs
the npm servers: ``make npm-servers``), and the in-repo SDK test peer's
``read_note`` over stdio. Goal (issue 6): ratio of medians under 1.2x.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters, stdio_client

from ringfence.mcp_host._connect import connect_servers
from ringfence.mcp_host.manifest._load import parse_manifest
from ringfence.runtime._events import FileSink
from ringfence.runtime._kernel import Kernel

from ._harness import Arm, interleave
from ._source import source_file
from ._suite import Row, Scenario, Skip

# Both servers live in the source tree (source_file: a Skip naming the file without it).
EVERYTHING = "tests/npm/node_modules/.bin/mcp-server-everything"
PEER = "tests/mcp_host/servers/annotated.py"
GOAL_RATIO = 1.2  # issue 6's, for the Python SDK peer
EVERYTHING_GOAL = 1.10  # issue 33's, stricter, for server-everything's echo


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def measure(
    scenario: str,
    server: str,
    command: str,
    args: list[str],
    tool: str,
    arguments: dict[str, Any],
    *,
    quick: bool,
    goal: float = GOAL_RATIO,
) -> list[Row]:
    rounds, batch = (6, 20) if quick else (20, 50)
    manifest = parse_manifest(
        f'[[server]]\nname = "bench"\ntransport = "stdio"\ncommand = {_toml(command)}\n'
        f"args = [{', '.join(_toml(a) for a in args)}]\nread_only_tools = [{_toml(tool)}]\n",
        "bench.toml",
    )
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as devnull:
        params = StdioServerParameters(command=command, args=args, env={"RF_STATE_DIR": tmp})
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

            # warm-up: every connection, and the SDK's tool-schema cache
            s = await interleave(
                [
                    Arm("ringfence", through_ringfence, batch),
                    Arm("pool only", pooled_connection_only, batch),
                    Arm("bare SDK client", bare_sdk, batch),
                ],
                rounds=rounds,
                warmup=1,
            )
    rf, pooled, sdk = s["ringfence"], s["pool only"], s["bare SDK client"]
    ratio = rf.median / sdk.median
    return [
        Row(
            scenario,
            f"{server}: call through ringfence",
            rf,
            sdk,
            f"<= {goal:g}x bare SDK client",
            ratio <= goal,
            {"overhead_s": rf.median - sdk.median, "calls": rounds * batch},
        ),
        Row(
            scenario,
            f"{server}: pooled connection only (no Gate)",
            pooled,
            sdk,
            "informational (connector without the Gate)",
            None,
        ),
    ]


async def run_everything(quick: bool) -> list[Row]:
    everything = source_file(EVERYTHING, what="the npm MCP servers", fix="make npm-servers")
    if shutil.which("node") is None:
        raise Skip("node is not on PATH (the npm servers need Node.js)")
    return await measure(
        "mcp-everything",
        "server-everything echo (node)",
        str(everything),
        ["stdio"],
        "echo",
        {"message": "hello"},
        quick=quick,
        goal=EVERYTHING_GOAL,
    )


async def run_peer(quick: bool) -> list[Row]:
    peer = source_file(PEER, what="the Python SDK test peer")
    return await measure(
        "mcp-peer",
        "SDK test peer read_note (python)",
        sys.executable,
        [str(peer)],
        "read_note",
        {"name": "bench"},
        quick=quick,
    )


EVERYTHING_SCENARIO = Scenario(
    "mcp-everything",
    "MCP call (server-everything over stdio) through ringfence vs bare SDK",
    f"<= {EVERYTHING_GOAL:g}x bare SDK client",
    run_everything,
)
PEER_SCENARIO = Scenario(
    "mcp-peer",
    "MCP call (Python SDK peer over stdio) through ringfence vs bare SDK",
    f"<= {GOAL_RATIO:g}x bare SDK client",
    run_peer,
)
SCENARIOS = [EVERYTHING_SCENARIO, PEER_SCENARIO]
