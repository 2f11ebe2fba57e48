"""One ``ringfence serve --transport http``, two MCP sessions: what one makes stays its own.

Issue 29, finding 6. Two real SDK clients (Streamable HTTP) against the real command in a
subprocess: session A asks for logs at ``debug`` and must never receive session B's records
(B's arguments in ``proposed``, the file B read in ``finished``); a "for this session"
approval given in session A must not let session B's identical call run unasked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from serve_helpers import Asker, bearer_client, error_code, http_serve_process, real_command

B_ONLY = "what only session B may read\n"


def _seen(received: list[types.LoggingMessageNotificationParams]) -> str:
    return json.dumps([r.model_dump(mode="json") for r in received])


@pytest.mark.filterwarnings("default::mcp.MCPDeprecationWarning")
async def test_a_sessions_log_records_reach_only_that_session(
    workspace: Path, events: Path
) -> None:
    (workspace / "b-only.txt").write_text(B_ONLY)
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    logs: dict[str, list[types.LoggingMessageNotificationParams]] = {"a": [], "b": []}

    def collector(name: str) -> Any:
        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            logs[name].append(params)

        return on_log

    async with http_serve_process(argv) as served:
        assert served.token is not None
        async with (
            bearer_client(served.token) as http_a,
            bearer_client(served.token) as http_b,
            Client(
                streamable_http_client(served.url, http_client=http_a),
                mode="legacy", logging_callback=collector("a"), cache=None,
                read_timeout_seconds=30.0,
            ) as a,
            Client(
                streamable_http_client(served.url, http_client=http_b),
                mode="legacy", logging_callback=collector("b"), cache=None,
                read_timeout_seconds=30.0,
            ) as b,
        ):  # fmt: skip
            await a.set_logging_level("debug")
            result = await b.call_tool("read_file", {"path": "b-only.txt"})
            assert not result.is_error and B_ONLY.strip() in json.dumps(result.model_dump())
            # A's own call after B's: records go out in order, so once A has its own
            # `finished`, anything of B's that was going to reach A has reached it.
            await a.call_tool("read_file", {"path": "hello.txt"})
            with trio.fail_after(10):
                while not any(
                    isinstance(r.data, dict)
                    and r.data.get("kind") == "finished"
                    and "hello" in json.dumps(r.data)
                    for r in logs["a"]
                ):
                    await trio.sleep(0.05)
            # And the other way round: B listens, A calls; B hears only B.
            await b.set_logging_level("debug")
            await a.call_tool("read_file", {"path": "hello.txt"})
            await b.call_tool("list_directory", {"path": "."})
            with trio.fail_after(10):
                while not any(
                    isinstance(r.data, dict)
                    and r.data.get("kind") == "finished"
                    and r.data.get("tool") == "list_directory"
                    for r in logs["b"]
                ):
                    await trio.sleep(0.05)
    seen_by_a = _seen(logs["a"])
    assert "b-only.txt" not in seen_by_a and "what only session B" not in seen_by_a
    assert any(isinstance(r.data, dict) and r.data.get("kind") == "proposed" for r in logs["a"])
    # B listened only after its own read_file: a read_file record it got would be A's.
    assert not [
        r for r in logs["b"] if isinstance(r.data, dict) and r.data.get("tool") == "read_file"
    ]


async def test_a_session_grant_covers_only_the_session_that_gave_it(
    workspace: Path, events: Path
) -> None:
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "ask"]
    write = {"path": "shared.txt", "content": "written\n"}
    session_a, deny_b = Asker.choosing("session"), Asker.choosing("deny")
    async with http_serve_process(argv) as served:
        assert served.token is not None
        async with (
            bearer_client(served.token) as http_a,
            bearer_client(served.token) as http_b,
            Client(
                streamable_http_client(served.url, http_client=http_a),
                mode="legacy", elicitation_callback=session_a, cache=None,
                read_timeout_seconds=30.0,
            ) as a,
            Client(
                streamable_http_client(served.url, http_client=http_b),
                mode="legacy", elicitation_callback=deny_b, cache=None,
                read_timeout_seconds=30.0,
            ) as b,
        ):  # fmt: skip
            first = await a.call_tool("write_file", write)
            assert not first.is_error
            (workspace / "shared.txt").write_text("the person's own text\n")
            # B's identical call: A's grant does not cover it, so B's person is asked (and denies).
            refused = await b.call_tool("write_file", write)
            assert error_code(refused) == "denied"
            assert (workspace / "shared.txt").read_text() == "the person's own text\n"
            assert len(deny_b.asked) == 1 and "shared.txt" in deny_b.asked[0].message
            # Within A's session the grant still holds: A's repeat is not asked again.
            again = await a.call_tool("write_file", write)
            assert not again.is_error
            assert len(session_a.asked) == 1
    records = [json.loads(line) for line in events.read_text().splitlines()]
    answered = [r for r in records if r["kind"] == "approval_answered"]
    assert [r["choice"] for r in answered] == ["session", "deny"]


async def test_a_session_cannot_cancel_another_sessions_call_by_its_request_id(
    workspace: Path, events: Path
) -> None:
    """Request ids are per session (both clients number theirs from the same start): session
    B's ``notifications/cancelled`` naming A's in-flight request id (and every small id) must
    not end A's call, which is waiting for A's person to approve it."""
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "ask"]
    asked, release = trio.Event(), trio.Event()

    async def slow_yes(context: Any, params: Any) -> types.ElicitResult:
        asked.set()
        await release.wait()
        return types.ElicitResult(action="accept", content={"decision": "once"})

    write = {"path": "a.txt", "content": "A's own write\n"}
    async with http_serve_process(argv) as served:
        assert served.token is not None
        async with (
            bearer_client(served.token) as http_a,
            bearer_client(served.token) as http_b,
            Client(
                streamable_http_client(served.url, http_client=http_a),
                mode="legacy", elicitation_callback=slow_yes, cache=None,
                read_timeout_seconds=30.0,
            ) as a,
            Client(
                streamable_http_client(served.url, http_client=http_b),
                mode="legacy", cache=None, read_timeout_seconds=30.0,
            ) as b,
            trio.open_nursery() as nursery,
        ):  # fmt: skip
            results: list[types.CallToolResult] = []

            async def call_a() -> None:
                results.append(await a.call_tool("write_file", write))

            nursery.start_soon(call_a)
            with trio.fail_after(30):
                await asked.wait()
            for request_id in range(0, 8):
                await b.session.send_notification(
                    types.CancelledNotification(
                        params=types.CancelledNotificationParams(
                            request_id=request_id, reason="B cancels"
                        )
                    )
                )
            await b.list_tools()  # B's notifications were read before B's next request
            release.set()
    assert len(results) == 1 and not results[0].is_error, results
    assert (workspace / "a.txt").read_text() == "A's own write\n"
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert not [r for r in records if r["kind"] == "cancelled"]
