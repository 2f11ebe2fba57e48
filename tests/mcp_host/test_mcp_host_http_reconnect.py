"""A server cannot make the client reopen its event stream in a storm (real stdlib peer
``servers/reconnect_http.py``).

The SDK reopens a Streamable HTTP server's event stream (its GET) whenever it ends, after
the wait the stream's ``retry:`` field asks for. A server answering each GET with
``retry: 0`` and an end had the client reconnect at once, for ever: ~20 GETs a second for
the whole session, on a quiet machine. Now a connection's event-stream GETs are at least a
second apart, whatever the server says, and its calls are not held.
"""

from __future__ import annotations

import math
from pathlib import Path

import trio
from mcp_host_helpers import manifest, stdlib_peers

from ringfence.mcp_host import connect_servers
from ringfence.mcp_host.transport._inbound import MIN_STREAM_INTERVAL


def _gets(state: Path) -> int:
    path = state / "gets"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_a_servers_retry_zero_cannot_make_a_reconnect_storm(make_kernel, state: Path) -> None:
    async with stdlib_peers("reconnect_http.py", state) as start:
        url = await start()
        block = f'[[server]]\nname = "rc"\ntransport = "http"\nurl = "{url}"\n'
        block += 'read_only_tools = ["ping"]\n'
        async with make_kernel() as kernel, connect_servers(kernel, manifest(block)) as cs:
            assert not cs.failures, cs.failures
            began, before = trio.current_time(), _gets(state)
            with trio.fail_after(60):  # calls are not held behind the spaced GETs
                for _ in range(5):
                    result = await kernel.invoke("mcp.rc.ping", {})
                    assert result.error is None, result.error
            await trio.sleep(5)
            elapsed, sent = trio.current_time() - began, _gets(state) - before
    assert sent <= math.ceil(elapsed / MIN_STREAM_INTERVAL) + 1, (sent, elapsed)
    assert _gets(state) >= 2  # the stream is still reopened, only not at once
