"""A hostile HTTP server's cookies stay bounded (real stdlib peer ``servers/cookie_http.py``).

The client kept every ``Set-Cookie`` of every answer and sent them all back: a server that
sets 400 new cookies on each answer had the client hold 13,601 cookies and send a 1.4 MB
``Cookie`` header after 30 calls, growing without end. Now a connection keeps at most 50
cookies of at most 4,096 bytes each.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_host_helpers import manifest, stdlib_peers

from ringfence.mcp_host import connect_servers
from ringfence.mcp_host.transport._http import MAX_COOKIE_BYTES, MAX_COOKIES


async def test_a_servers_cookie_flood_is_held_to_a_bounded_jar(make_kernel, state: Path) -> None:
    async with stdlib_peers("cookie_http.py", state) as start:
        url = await start(400, 100)
        block = f'[[server]]\nname = "ck"\ntransport = "http"\nurl = "{url}"\n'
        block += 'read_only_tools = ["ping"]\n'
        async with make_kernel() as kernel, connect_servers(kernel, manifest(block)) as cs:
            assert not cs.failures, cs.failures
            for _ in range(20):
                result = await kernel.invoke("mcp.ck.ping", {})
                assert result.error is None, result.error
    sent = [json.loads(line) for line in (state / "cookies").read_text().splitlines()]
    assert len(sent) > 20
    assert max(len(s["names"]) for s in sent) == MAX_COOKIES  # the jar filled, no further
    assert max(s["length"] for s in sent) < MAX_COOKIES * MAX_COOKIE_BYTES
    assert all("big" not in s["names"] for s in sent)  # 10,000 bytes: never kept
    # The first cookies kept are still sent: later ones do not push them out.
    assert {"c0", "c49"} <= set(sent[-1]["names"])
