"""One door: every path into a tool gets the same decision and the same event sequence.

The paths: a direct call, a nested call from an executor, ``call_tool`` from a
script, ``call_tool`` from a script started by an executor (nested script),
``plan apply``, ``ringfence serve`` (an MCP client over HTTP), and the two
requests an MCP server makes of the host (sampling and elicitation), which
enter the Gate as calls of their own kind. Under one rule (``ask: *``) and one
approver (once), each call must be proposed, decided (ask, by ``ask:*``),
asked, answered, signed, started and finished: no path skips a step.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ringfence.bridge import register_script_tool
from ringfence.mcp_host import ElicitationAnswer, connect_servers, parse_manifest
from ringfence.mcp_host.testing import FakeSamplingProvider, ScriptedElicitor
from ringfence.runtime import (
    ApprovalAnswer,
    CallContext,
    Consequence,
    Kernel,
    MemorySink,
    Rules,
    ScriptedApprover,
    ToolSpec,
)
from ringfence.runtime._events import KERNEL_KINDS
from ringfence.runtime._plan import Plan
from ringfence.serve import HttpOptions, serve_http

SERVERS = Path(__file__).resolve().parents[1] / "mcp_host" / "servers"
EXPECTED = ["proposed", "decided", "approval_asked", "approval_answered", "started", "finished"]
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False}
ARGS = {"x": "a"}


def gated_kernel(sink: MemorySink, **kw: Any) -> Kernel:
    kernel = Kernel(
        rules=Rules(ask=("*",)),
        approver=ScriptedApprover(lambda r: ApprovalAnswer.once()),
        events_sink=sink,
        **kw,
    )
    ran: list[dict[str, Any]] = []

    async def launch(args: dict[str, Any], ctx: CallContext) -> str:
        ran.append(args)
        return "launched"

    async def nested(args: dict[str, Any], ctx: CallContext) -> Any:
        outcome = await ctx.invoke("launch", ARGS)
        return outcome.unwrap()

    async def nested_script(args: dict[str, Any], ctx: CallContext) -> Any:
        outcome = await ctx.invoke("run_tool_script", {"script": 'call_tool("launch", x="a")'})
        return outcome.unwrap()

    spec = ToolSpec("launch", "l", SCHEMA, launch, consequence=Consequence.IRREVERSIBLE)
    kernel.register(spec)
    kernel.register(ToolSpec("nested", "n", {"type": "object"}, nested, Consequence.READ))
    kernel.register(
        ToolSpec("nested_script", "n", {"type": "object"}, nested_script, Consequence.READ)
    )
    register_script_tool(kernel, spare=False)
    kernel.extensions["ran"] = ran
    return kernel


def sequence(sink: MemorySink, tool: str) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The kernel's records of the one call of ``tool``: kinds, decision, proposal."""
    records = sink.records()
    (proposed,) = [r for r in records if r["kind"] == "proposed" and r["tool"] == tool]
    mine = [r for r in records if r.get("call_id") == proposed["call_id"]]
    kinds = [r["kind"] for r in mine if r["kind"] in KERNEL_KINDS]
    (decided,) = [r for r in mine if r["kind"] == "decided"]
    return kinds, {"verdict": decided["verdict"], "rule": decided["rule"]}, proposed


async def direct(tmp: Path) -> MemorySink:
    sink = MemorySink()
    async with gated_kernel(sink) as kernel:
        assert (await kernel.invoke("launch", ARGS)).ok
    return sink


async def nested(tmp: Path) -> MemorySink:
    sink = MemorySink()
    async with gated_kernel(sink) as kernel:
        assert (await kernel.invoke("nested", {})).ok
    return sink


async def script(tmp: Path) -> MemorySink:
    sink = MemorySink()
    async with gated_kernel(sink) as kernel:
        out = await kernel.invoke("run_tool_script", {"script": 'call_tool("launch", x="a")'})
        assert out.ok, out.error
    return sink


async def nested_script(tmp: Path) -> MemorySink:
    sink = MemorySink()
    async with gated_kernel(sink) as kernel:
        out = await kernel.invoke("nested_script", {})
        assert out.ok, out.error
    return sink


async def plan_apply(tmp: Path) -> MemorySink:
    plan_path = tmp / "plan.json"
    async with gated_kernel(MemorySink(), dry_run=True, plan_path=plan_path) as kernel:
        assert (await kernel.invoke("launch", ARGS)).staged
    sink = MemorySink()
    async with gated_kernel(sink) as kernel:
        outcomes = await kernel.apply_plan(Plan.load(plan_path))
        assert [o.ok for o in outcomes] == [True]
    return sink


async def serve(tmp: Path) -> MemorySink:
    sink = MemorySink()
    async with gated_kernel(sink) as kernel, trio.open_nursery() as nursery:
        options = HttpOptions(token=HttpOptions.generate_token(), port=0)
        url = await nursery.start(partial(serve_http, kernel, options))
        headers = {"Authorization": f"Bearer {options.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
            Client(streamable_http_client(url, http_client=http), cache=None) as client,
        ):
            result = await client.call_tool("launch", ARGS)
            assert not result.is_error
        nursery.cancel_scope.cancel()
    return sink


@asynccontextmanager
async def notes_server(
    kernel: Kernel, tmp: Path, extra: str, **options: Any
) -> AsyncIterator[None]:
    block = (
        f'[[server]]\nname = "notes"\ntransport = "stdio"\ncommand = "{sys.executable}"\n'
        f'args = ["{SERVERS / "annotated.py"}"]\n{extra}\n'
        f'[server.env]\nRF_STATE_DIR = "{tmp}"\n'  # where the test server writes its logs
    )
    async with connect_servers(kernel, parse_manifest(block, "paths.toml"), **options):
        yield


async def sampling(tmp: Path) -> MemorySink:
    sink = MemorySink()
    provider = FakeSamplingProvider()
    extra = 'sampling_policy = "ask"\nsampling_allowed_models = ["fake-small"]'
    kernel = gated_kernel(sink)
    async with kernel, notes_server(kernel, tmp, extra, sampling_provider=provider):
        out = await kernel.invoke("mcp.notes.sample", {"prompt": "hi"})
        assert out.ok, out.error
    assert len(provider.requests) == 1
    return sink


async def elicitation(tmp: Path) -> MemorySink:
    sink = MemorySink()
    elicitor = ScriptedElicitor([ElicitationAnswer("accept", {"city": "Paris"})])
    kernel = gated_kernel(sink)
    async with kernel, notes_server(kernel, tmp, 'elicitation_policy = "ask"', elicitor=elicitor):
        out = await kernel.invoke("mcp.notes.ask_form", {})
        assert out.ok and "Paris" in out.value["text"], out
    return sink


PATHS: list[tuple[Callable[[Path], Awaitable[MemorySink]], str, str]] = [
    (direct, "launch", "direct"),
    (nested, "launch", "nested"),
    (script, "launch", "script"),
    (nested_script, "launch", "script"),
    (plan_apply, "launch", "plan"),
    (serve, "launch", "mcp"),
    (sampling, "mcp.notes.__sampling", "mcp-sampling"),
    (elicitation, "mcp.notes.__elicitation", "mcp-elicitation"),
]


@pytest.mark.parametrize(("path", "tool", "origin"), PATHS, ids=[p[0].__name__ for p in PATHS])
async def test_every_path_gets_the_same_decision_and_events(
    tmp_path: Path, path: Callable[[Path], Awaitable[MemorySink]], tool: str, origin: str
) -> None:
    sink = await path(tmp_path)
    kinds, decision, proposed = sequence(sink, tool)
    assert kinds == EXPECTED
    assert decision == {"verdict": "ask", "rule": "ask:*"}
    assert proposed["origin"] == origin
    started = next(r for r in sink.records() if r["kind"] == "started" and r["tool"] == tool)
    assert started["intent"]["tool"] == tool  # every start carries the Gate's intent
