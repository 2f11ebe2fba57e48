"""Capability authority: advertised / approved / pending, and subscriptions when approved."""

from __future__ import annotations

from pathlib import Path

from mcp import types
from mcp_host_helpers import events_of, manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.mcp_host._authority import CapabilityLedger
from ringfence.runtime import MemorySink


def test_ledger_arithmetic() -> None:
    caps = types.ServerCapabilities(
        tools=types.ToolsCapability(),
        resources=types.ResourcesCapability(subscribe=True),
        logging=types.LoggingCapability(),
        experimental={"x": {}},
    )
    ledger = CapabilityLedger.from_initialize(caps, frozenset({"tools", "prompts"}))
    assert ledger.advertised == {"tools", "resources", "logging", "experimental.x"}
    assert ledger.active == {"tools"}
    assert ledger.pending == {"resources", "logging", "experimental.x"}
    assert "resources.subscribe" in ledger.flags
    assert not ledger.allows("prompts")  # approved but not advertised


async def test_unapproved_capabilities_are_pending_and_unused(make_kernel, state: Path) -> None:
    m = manifest(py_server("status", "unapproved.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        ledger = cs["status"].ledger
        assert ledger.pending == {"resources", "logging", "experimental.frobnicate"}
        assert ledger.active == {"tools"}
        assert cs["status"].resources == [] and cs["status"].templates == []
        assert "mcp.status.__read_resource" not in kernel.registry
        assert (await kernel.call("mcp.status.hello", {}))["text"].splitlines()[1] == "hello"
    # The server records every resources call it gets: there were none.
    assert not (state / "unapproved-calls.log").exists()


async def test_approving_resources_lists_them(make_kernel, state: Path) -> None:
    extra = 'approved_capabilities = ["tools", "resources"]\nallow_resources = ["status://now", "status://log/*"]'
    m = manifest(py_server("status", "unapproved.py", state=state, extra=extra))
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        c = cs["status"]
        assert [r["uri"] for r in c.resources] == ["status://now"]
        assert [t["uri_template"] for t in c.templates] == ["status://log/{day}"]
        assert c.ledger.pending == {"logging", "experimental.frobnicate"}
        assert c.subscribed == []  # subscriptions are off by default
    calls = (state / "unapproved-calls.log").read_text().splitlines()
    assert "resources/list" in calls and not any(x.startswith("resources/subscribe") for x in calls)


async def test_subscription_round_trip_puts_updates_in_the_event_stream(
    make_kernel, sink: MemorySink, state: Path
) -> None:
    extra = 'approved_capabilities = ["tools", "resources"]\nsubscribe_resources = true\ndeny_resources = ["status://secret"]'
    m = manifest(py_server("status", "unapproved.py", state=state, extra=extra))
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        assert cs["status"].subscribed == ["status://now"]
        await sink.wait_for("mcp_notification")
    (event,) = events_of(sink, "mcp_notification")
    assert event["server"] == "status" and event["method"] == "notifications/resources/updated"
    assert event["params"]["uri"] == "status://now"
    calls = (state / "unapproved-calls.log").read_text().splitlines()
    assert "resources/subscribe status://now" in calls
    assert "resources/subscribe status://secret" not in calls  # denied resources are not subscribed
