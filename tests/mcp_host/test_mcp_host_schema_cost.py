"""A server's schema cannot make a check cost exponential time (peer ``servers/costly_schema.py``).

RE2 made each ``pattern`` linear, but jsonschema's ``anyOf`` over ``$ref``s is not: a 1.5 KB
``inputSchema`` and a 16-level argument (which the server's description can ask a model for)
held the kernel's event loop ~12 s in the Gate's argument check; 18 levels, minutes. Every
check now stops after a bounded number of keyword evaluations, refusing the call
(``input_schema``/``outputSchema``: cannot be checked safely); a schema that refers to itself
is refused the same way instead of failing with RecursionError.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import trio
from mcp_host_helpers import SERVERS, manifest, py_server

from ringfence.mcp_host import connect_servers

sys.path.insert(0, str(SERVERS))
from costly_schema import near_miss


async def test_an_exponential_input_schema_is_refused_within_a_bound(
    make_kernel, state: Path
) -> None:
    m = manifest(py_server("cost", "costly_schema.py", state=state, reads=("*",)))
    gaps: list[float] = []
    async with make_kernel() as kernel, connect_servers(kernel, m):

        async def heartbeat() -> None:  # how long the kernel's event loop went without running
            last = time.monotonic()
            while True:
                await trio.sleep(0.05)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        # The process's CPU time, not the wall clock: the bound is on the work a check does,
        # which a loaded machine (the suite's other worker, docker, a browser) does not
        # inflate as it does the wall clock (a helper's run at load 11 took 25.7 s of wall).
        start = time.process_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            out = await kernel.invoke("mcp.cost.nest", {"x": near_miss()})
            looped = await kernel.invoke("mcp.cost.loop", {"x": 1})
            quick = await kernel.invoke("mcp.cost.quick", {})
            nursery.cancel_scope.cancel()
        spent = time.process_time() - start
    # The loop's longest stall is wall time: the old check stalled it ~12 s at 16 levels.
    assert spent < 6.0 and max(gaps, default=0.0) < 8.0, (spent, max(gaps, default=0.0))
    assert out.error is not None and out.error.code == "invalid_arguments", out.error
    assert out.error.field == "input_schema" and "steps" in out.error.message
    assert looped.error is not None and looped.error.code == "invalid_arguments", looped.error
    assert looped.error.field == "input_schema" and "refers to itself" in looped.error.message
    assert quick.error is None


async def test_an_exponential_output_schema_is_refused_within_a_bound(
    make_kernel, state: Path
) -> None:
    m = manifest(py_server("cost", "costly_schema.py", state=state, reads=("*",)))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        start = time.process_time()  # CPU, as above
        out = await kernel.invoke("mcp.cost.nest_out", {})
        spent = time.process_time() - start
    assert out.error is not None and out.error.code == "tool_error", out.error
    assert out.error.field == "outputSchema" and "steps" in out.error.message
    assert spent < 20.0, spent


async def test_an_unresolvable_ref_refuses_the_call_without_quoting_the_schema(
    make_kernel, state: Path, sink
) -> None:
    """A ``$ref`` the schema cannot resolve (a pointer to nowhere, another document, an
    undeclared anchor) made the Gate's check raise jsonschema's referencing error: the call
    failed as ``failed inside ringfence`` (an internal error) whose message quoted the whole
    schema, the server's words, outside any frame and into the event log (64 KB a call
    here). Now it is refused as a schema that cannot be checked (``input_schema``), naming
    the keyword, never its text; nothing reaches the server, and nothing is fetched."""
    m = manifest(py_server("unres", "unresolvable_schema.py", state=state, reads=("*",)))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        outs = {
            t: await kernel.invoke(f"mcp.unres.{t}", {"x": 1})
            for t in ("nowhere", "elsewhere", "anchor")
        }
        quick = await kernel.invoke("mcp.unres.quick", {})
    for tool, out in outs.items():
        assert out.error is not None and out.error.code == "invalid_arguments", (tool, out.error)
        assert out.error.field == "input_schema", (tool, out.error)
        assert "cannot be resolved" in out.error.message, (tool, out.error)
        assert "IGNORE" not in out.error.message and len(out.error.message) < 500, tool
        assert "inside ringfence" not in out.error.message
        assert not (state / f"ran-{tool}").exists(), tool  # the server never got the call
    assert quick.error is None and (state / "ran-quick").exists()
    failed = [r for r in sink.records() if "error" in r and "mcp.unres." in json.dumps(r)]
    assert len(failed) >= 3, [r["kind"] for r in sink.records()]
    assert all("IGNORE" not in json.dumps(r["error"]) for r in failed), failed[0]
