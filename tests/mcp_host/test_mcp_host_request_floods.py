"""A server flooding the host with sampling and elicitation requests (peer ``servers/asker.py``).

Each server-initiated request wrote event records (requested, then refused, answered or the
Gate's own), whatever came of it: a server that loops requests (each declined, or refused for
its budget) grew the hash-chained event log without bound, 300 requests 600+ records. Now a
server's requests are handled 20 per 60 s; later ones are refused at once, unrecorded, and
counted into one ``mcp_requests_summary``.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_host_helpers import events_of, manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.mcp_host.testing import FakeSamplingProvider

SENT = 300
EXTRA = (
    'elicitation_policy = "ask"\nsampling_policy = "allow"\n'
    'sampling_allowed_models = ["fake"]\nsampling_max_tokens = 100\n'
    'sampling_total_tokens = 100000\nread_only_tools = ["*"]'
)


def counts(out) -> dict[str, int]:
    line = next(x for x in out.value["text"].splitlines() if x.startswith("{"))
    return json.loads(line)


async def test_a_request_flood_costs_the_event_stream_a_bounded_number_of_records(
    make_kernel, sink, state: Path
) -> None:
    provider = FakeSamplingProvider()
    m = manifest(py_server("asker", "asker.py", state=state, extra=EXTRA))
    async with (
        make_kernel() as kernel,
        connect_servers(kernel, m, sampling_provider=provider),  # no elicitor: each declined
    ):
        asked = await kernel.invoke("mcp.asker.ask_many", {"count": SENT})
        sampled = await kernel.invoke("mcp.asker.sample_many", {"count": SENT})
    assert asked.error is None and sampled.error is None
    asked_counts, sampled_counts = counts(asked), counts(sampled)
    assert asked_counts["decline"] == 20  # the budget: 20 requests handled in the window
    assert sum(asked_counts.values()) == SENT
    assert "answered" not in sampled_counts  # the window's 20 went to the elicitations
    assert len(provider.requests) == 0
    requested = events_of(sink, "mcp_elicitation_requested") + events_of(
        sink, "mcp_sampling_requested"
    )
    assert len(requested) == 20
    (summary,) = events_of(sink, "mcp_requests_summary")
    assert summary["server"] == "asker" and summary["count"] == 2 * SENT - 20
    assert summary["methods"] == {
        "elicitation/create": SENT - 20,
        "sampling/createMessage": SENT,
    }
    assert len(sink.records()) < 150
