"""A server answering each listing page just inside the call deadline cannot hold a session.

Each page of ``tools/list`` had ``call_timeout_seconds`` of its own, and a listing may take
100 pages: a server answering every page just before the deadline held the session's start
100 deadlines (100 minutes by default) before any tool could be called. The whole listing
now shares one call's deadline: past it the listing stops, keeping the tools it has, and
the diagnostics say why (real SDK peer ``servers/paging.py slow``).
"""

from __future__ import annotations

import time
from pathlib import Path

import trio
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import connect_servers

DEADLINE = 4.0  # call_timeout_seconds: each page or subscription (0.4 s) is far inside it


async def test_a_slow_endless_listing_stops_at_one_call_deadline(make_kernel) -> None:
    extra = f"call_timeout_seconds = {DEADLINE}"
    block = py_server("slow", "paging.py", "slow", extra=extra)
    async with make_kernel() as kernel:
        started = trio.current_time()
        # Before: 100 pages of 0.4 s, 40 s at least (and 100 deadlines at worst).
        with trio.fail_after(120):
            async with connect_servers(kernel, manifest(block)) as cs:
                took = trio.current_time() - started
                c = cs["slow"]
                listing = c.listings["tools/list"]
                assert not listing.complete and "time limit" in listing.problem, listing
                assert 1 <= len(c.tools) < 100, len(c.tools)
                assert any("time limit" in f["message"] for f in c.diagnostics.failures)
                # The tools it has are registered and callable.
                out = await kernel.invoke("mcp.slow.slow_0", {})
                assert out.error is None, out.error
    assert took < 60, took  # the connect (a fresh interpreter) and one 4 s listing


async def test_slow_subscriptions_stop_at_one_call_deadline(make_kernel, state: Path) -> None:
    extra = (
        'approved_capabilities = ["tools", "resources"]\nsubscribe_resources = true\n'
        f"call_timeout_seconds = {DEADLINE}"
    )
    block = py_server("slowsub", "flood.py", "slow", extra=extra, state=state, reads=("flood",))
    async with make_kernel() as kernel:
        started = trio.current_time()
        # Before: 60 subscriptions of 0.4 s, 24 s at least (and 100 deadlines at worst).
        with trio.fail_after(120):
            async with connect_servers(kernel, manifest(block)) as cs:
                took = trio.current_time() - started
                c = cs["slowsub"]
                assert len(c.resources) == 60
                assert 1 <= len(c.subscribed) < 60, len(c.subscribed)
                assert any("time limit" in f["message"] for f in c.diagnostics.failures)
                out = await kernel.invoke("mcp.slowsub.flood", {"count": 1})
                assert out.error is None, out.error
    assert took < 60, took  # the connect (a fresh interpreter) and one 4 s round


STALL_DEADLINE = 15.0  # call_timeout_seconds for the stalling server


async def test_a_servers_listings_at_start_share_one_call_deadline(
    make_kernel, state: Path
) -> None:
    """Each kind listed at a server's start (prompts, resources, resource templates) and its
    subscriptions had a call's deadline of its own: a server answering tools/list and
    resources/list, then never prompts/list, resources/templates/list or a subscription,
    held the session's start three deadlines (three minutes by default) past its listing.
    After tools/list, what the start still lists shares one deadline, and what it cut is said."""
    extra = (
        'approved_capabilities = ["tools", "prompts", "resources"]\nsubscribe_resources = true\n'
        f"call_timeout_seconds = {STALL_DEADLINE}"
    )
    block = py_server("stall", "paging.py", "stall", extra=extra, state=state)
    async with make_kernel() as kernel:
        # Before: prompts/list, resources/templates/list and resources/subscribe, each 15 s.
        with trio.fail_after(300):
            async with connect_servers(kernel, manifest(block)) as cs:
                ready = time.time()
                c = cs["stall"]
                assert [t.remote_name for t in c.tools] == ["stall"]
                assert len(c.resources) == 3  # listed before the stall: kept
                assert c.subscribed == []
                problems = " ".join(f["message"] for f in c.diagnostics.failures)
                assert "time limit" in problems, c.diagnostics.failures
                out = await kernel.invoke("mcp.stall.stall", {})
                assert out.error is None, out.error
    waited = ready - float((state / "listed").read_text())
    # One deadline after tools/list (the rest of the start is milliseconds); three before.
    assert waited < 2 * STALL_DEADLINE, waited
