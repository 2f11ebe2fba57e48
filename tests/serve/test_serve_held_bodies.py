"""Calls still running hold their request bodies: what they hold together is bounded.

The bodies being read at once were bounded (128 MiB), but once read whole a body lives as
long as its request: a ``tools/call`` waiting for its approval holds its arguments (parsed,
validated and described, a few times the body) until the person answers or the approval
times out (600 s). A client with the token sending calls of 3 MiB that it never approves
took the server from 85 to 702 MB resident with 60 of them, and nothing bounded how many
(up to 4,096 requests open). Now the bodies of admitted requests still running hold at most
``max_held_bytes`` together (128 MiB by default); past it a request is answered 503, unread,
naming the limit, and nothing of it reaches the Gate; a small body (64 KiB at most) is only
counted, never refused, so other clients' calls go on; once calls end, large ones are admitted
again.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import trio
from serve_helpers import bearer_client, serve_in_process
from test_serve_http import MCP_HEADERS, rpc

MIB = 1 << 20
CAP = 4 * MIB


async def _open_session(http: httpx2.AsyncClient, url: str) -> str:
    """initialize (declaring form elicitation: approvals are asked, and wait) + initialized."""
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "holder", "version": "0"},
    }
    response = await http.post(url, content=rpc("initialize", init), headers=MCP_HEADERS)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    done = await http.post(
        url,
        content=rpc("notifications/initialized", id=None),
        headers={**MCP_HEADERS, "MCP-Session-Id": session},
    )
    assert done.status_code == 202, done.text
    return session


def _note(i: int, size: int) -> bytes:
    args = {"path": f"held{i}.txt", "content": "x" * size}
    return rpc("tools/call", {"name": "note_file", "arguments": args}, 100 + i)


async def test_running_calls_hold_at_most_their_bound_of_bodies(workspace: Path) -> None:
    async with (
        serve_in_process(workspace, posture="ask", max_held_bytes=CAP) as served,
        bearer_client(served.token) as http,
    ):
        session = await _open_session(http, served.url)
        headers = {**MCP_HEADERS, "MCP-Session-Id": session}
        asked: list[int] = []
        refused: list[dict] = []

        async def hold(i: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
            """A call of ~1 MiB whose approval question arrives and is never answered."""
            async with http.stream(
                "POST", served.url, content=_note(i, MIB), headers=headers
            ) as response:
                if response.status_code == 503:
                    refused.append(json.loads(await response.aread()))
                    task_status.started()
                    return
                assert response.status_code == 200, response.status_code
                async for line in response.aiter_lines():
                    if "elicitation/create" in line:
                        asked.append(i)
                        task_status.started()
                        await trio.sleep_forever()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for i in range(5):
                    await nursery.start(hold, i)
                # Three bodies of just over 1 MiB fit in 4 MiB; the fourth and fifth do not.
                assert asked == [0, 1, 2], (asked, refused)
                assert len(refused) == 2
                for body in refused:
                    assert body["error"]["data"] == {"max_held_bytes": CAP}, body
                    assert "MiB of request bodies" in body["error"]["message"]
                proposed = {r["arguments"]["path"] for r in served.proposed()}
                assert proposed == {"held0.txt", "held1.txt", "held2.txt"}, proposed
                # A small request is never kept out by them: another client's calls go on.
                small = await http.post(
                    served.url,
                    content=rpc(
                        "tools/call", {"name": "peek_file", "arguments": {"path": "hello.txt"}}, 8
                    ),
                    headers=headers,
                )
                assert small.status_code == 200 and "hello" in small.text, small.text
                nursery.cancel_scope.cancel()  # the three clients go away
            # Their calls end and their bodies are let go: a large call is admitted again.
            while True:
                response = await http.post(
                    served.url,
                    content=rpc(
                        "tools/call",
                        {"name": "peek_file", "arguments": {"path": "y" * MIB}},
                        9,
                    ),
                    headers=headers,
                )
                if response.status_code != 503:
                    break
                await trio.sleep(0.2)
            assert response.status_code == 200, response.text
    assert not list(workspace.glob("held*.txt"))
