"""A server flooding its client with notifications (real SDK peer ``servers/flood.py``).

With ``subscribe_resources`` on, every ``list_changed`` a server sent became an
``mcp_notification`` record: 5,000 notifications, 5,000 hash-chained lines, without bound.
Now each server's notifications are recorded one by one up to a budget per window, and the
rest are counted into one ``mcp_notification_summary``.
"""

from __future__ import annotations

from pathlib import Path

from mcp_host_helpers import events_of, manifest, py_server

from ringfence.mcp_host import connect_servers

EXTRA = 'approved_capabilities = ["tools", "resources"]\nsubscribe_resources = true'


async def test_a_notification_flood_costs_the_event_stream_a_bounded_number_of_records(
    make_kernel, sink, state: Path
) -> None:
    sent = 3000
    m = manifest(py_server("flood", "flood.py", state=state, extra=EXTRA, reads=("flood",)))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        out = await kernel.invoke("mcp.flood.flood", {"count": sent})
        assert out.error is None
        second = await kernel.invoke(
            "mcp.flood.flood", {"count": 50, "method": "notifications/tools/list_changed"}
        )
        assert second.error is None
    kept = events_of(sink, "mcp_notification")
    assert len(kept) == 20  # the budget of one window, one by one
    (summary,) = events_of(sink, "mcp_notification_summary")  # written when the server closed
    assert summary["server"] == "flood"
    assert summary["count"] == sent + 50 - len(kept)
    assert summary["methods"] == {
        "notifications/resources/list_changed": sent - len(kept),
        "notifications/tools/list_changed": 50,
    }
    assert len(sink.records()) < 100


def test_the_budget_opens_a_new_window_with_the_last_ones_summary() -> None:
    from ringfence.mcp_host._diagnostics import NotificationBudget

    now = [0.0]
    budget = NotificationBudget(per_window=2, window_seconds=60, clock=lambda: now[0])
    assert [budget.admit("m")[0] for _ in range(5)] == [True, True, False, False, False]
    now[0] = 61.0
    admitted, summary = budget.admit("m")
    assert admitted and summary is not None and summary["count"] == 3
    assert budget.take_summary() is None
