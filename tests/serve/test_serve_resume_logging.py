"""``serve`` over Streamable HTTP: resumable streams, the logging capability, invalid cursors.

Resumption is checked on the wire (raw HTTP: the priming event, ``retry``,
``Last-Event-ID``), including that one session cannot replay another's
stream; logging and cursors with the SDK client against ``ringfence serve``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from serve_helpers import (
    bearer_client,
    http_serve_process,
    http_session,
    real_command,
    serve_in_process,
    subprocess_env,
)
from test_serve_http import MCP_HEADERS, open_session, rpc


async def sse_events(
    response: httpx2.Response, until: Any = None, timeout: float = 10
) -> list[dict[str, str]]:
    """The SSE events of ``response`` (each a dict of its fields), until ``until(event)`` or the end."""
    events: list[dict[str, str]] = []
    current: dict[str, str] = {}
    with trio.move_on_after(timeout):
        async for line in response.aiter_lines():
            if line == "":
                if current:
                    events.append(current)
                    if until is not None and until(current):
                        return events
                current = {}
                continue
            name, _, value = line.partition(":")
            current[name] = current.get(name, "") + value.removeprefix(" ")
    if current:
        events.append(current)
    return events


def answers(events: list[dict[str, str]], request_id: int) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if e.get("data"):
            message = json.loads(e["data"])
            if message.get("id") == request_id and "result" in message:
                out.append(message)
    return out


async def test_streams_are_primed_and_resume_with_last_event_id(workspace: Path) -> None:
    async with serve_in_process(workspace) as served, httpx2.AsyncClient(timeout=30) as http:
        session = await open_session(http, served.url, served.token)
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {served.token}"}
        mine = {**headers, "MCP-Session-Id": session}
        call = rpc("tools/call", {"name": "peek_file", "arguments": {"path": "hello.txt"}}, id=7)
        async with http.stream("POST", served.url, content=call, headers=mine) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            first = await sse_events(response)
        priming = first[0]
        assert priming["id"] and priming.get("data", "") == "" and priming["retry"] == "1000"
        assert len(priming["id"]) >= 20  # random, not a counter
        assert answers(first, 7), first

        # The client lost the stream after the priming event: it resumes from there.
        resume = {**mine, "Last-Event-ID": priming["id"], "Accept": "text/event-stream"}
        async with http.stream("GET", served.url, headers=resume) as response:
            assert response.status_code == 200
            replayed = await sse_events(response, until=lambda e: "result" in e.get("data", ""))
        assert answers(replayed, 7) == answers(first, 7)

        # Another session (same token, its own request ids) cannot replay that stream.
        other = await open_session(http, served.url, served.token)
        theirs = {**resume, "MCP-Session-Id": other}
        async with http.stream("GET", served.url, headers=theirs) as response:
            stolen = await sse_events(response, timeout=3)
        assert not answers(stolen, 7)
        assert "hello from the workspace" not in json.dumps(stolen)


async def session_at(http: httpx2.AsyncClient, url: str, token: str, version: str) -> str:
    """initialize (asking for ``version``) + initialized; the MCP session id."""
    auth = {**MCP_HEADERS, "MCP-Protocol-Version": version, "Authorization": f"Bearer {token}"}
    init = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    response = await http.post(url, content=rpc("initialize", init), headers=auth)
    assert response.status_code == 200 and f'"protocolVersion":"{version}"' in response.text
    session = response.headers["mcp-session-id"]
    done = rpc("notifications/initialized", id=None)
    assert (
        await http.post(url, content=done, headers={**auth, "MCP-Session-Id": session})
    ).status_code == 202
    return session


async def call_events(
    http: httpx2.AsyncClient, url: str, token: str, session: str, header: str, tool: str, id: int
) -> list[dict[str, str]]:
    """The SSE events of one tools/call declaring ``header`` as its MCP-Protocol-Version."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", "MCP-Session-Id": session}
    headers["MCP-Protocol-Version"] = header
    arguments = {"path": "hello.txt"} if tool == "peek_file" else {}
    call = rpc("tools/call", {"name": tool, "arguments": arguments}, id=id)
    async with http.stream("POST", url, content=call, headers=headers) as response:
        assert response.status_code == 200
        return await sse_events(response)


async def test_the_negotiated_version_decides_priming_not_the_request_header(
    workspace: Path,
) -> None:
    # The SDK transport primes by the request's header; a session that negotiated
    # 2025-11-25 is primed even when a request declares 2025-03-26 (the suite's raw
    # requests do). This fails loudly if the SDK stops reading the header we set.
    async with serve_in_process(workspace) as served, httpx2.AsyncClient(timeout=30) as http:
        new = await session_at(http, served.url, served.token, "2025-11-25")
        events = await call_events(
            http, served.url, served.token, new, "2025-03-26", "peek_file", 3
        )
        assert events[0].get("data", "") == "" and events[0]["retry"] == "1000", events
        assert answers(events, 3)

        # A session that negotiated an older version is never primed, whatever it declares.
        old = await session_at(http, served.url, served.token, "2025-03-26")
        for declared in ("2025-03-26", "2025-11-25"):
            events = await call_events(
                http, served.url, served.token, old, declared, "peek_file", 4
            )
            assert "retry" not in json.dumps(events) and answers(events, 4), (declared, events)
            assert all(e.get("data") for e in events), events  # no empty-data priming event

        # A header naming no handshake version is not rewritten: the SDK answers it.
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {served.token}", "MCP-Session-Id": new}
        bogus = await http.post(
            served.url,
            content=rpc("tools/list", {}, id=5),
            headers={**headers, "MCP-Protocol-Version": "1999-01-01"},
        )
        assert bogus.status_code == 400 and '"tools"' not in bogus.text, bogus.text


async def test_a_host_tool_closes_its_stream_and_the_client_resumes(workspace: Path) -> None:
    from serve_tools import reconnection_tool

    async with serve_in_process(workspace) as served, httpx2.AsyncClient(timeout=30) as http:
        served.kernel.register(reconnection_tool())
        session = await session_at(http, served.url, served.token, "2025-11-25")
        first = await call_events(
            http, served.url, served.token, session, "2025-03-26", "test_reconnection", 9
        )
        # The stream ended after the priming event, before the result.
        assert len(first) == 1 and first[0].get("data", "") == "" and first[0]["retry"], first
        headers = {
            **MCP_HEADERS,
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {served.token}",
            "MCP-Session-Id": session,
            "Last-Event-ID": first[0]["id"],
        }
        async with http.stream("GET", served.url, headers=headers) as response:
            assert response.status_code == 200
            resumed = await sse_events(response, until=lambda e: "result" in e.get("data", ""))
        (answer,) = answers(resumed, 9)
        assert "stream closed: True" in json.dumps(answer), answer

        # A session that negotiated 2025-03-26 cannot resume: nothing is closed for it.
        old = await session_at(http, served.url, served.token, "2025-03-26")
        events = await call_events(
            http, served.url, served.token, old, "2025-03-26", "test_reconnection", 10
        )
        (answer,) = answers(events, 10)
        assert "stream closed: False" in json.dumps(answer), answer


async def test_close_sse_stream_outside_a_served_call_does_nothing() -> None:
    from ringfence.serve._resume import close_sse_stream

    assert await close_sse_stream() is False


async def test_invalid_cursor_is_invalid_params(workspace: Path) -> None:
    async with (
        serve_in_process(workspace) as served,
        http_session(served.url, served.token, mode="legacy") as client,
    ):
        assert (await client.list_tools()).tools  # one page, no cursor issued
        with pytest.raises(MCPError) as caught:
            await client.list_tools(cursor="bm90LWEtY3Vyc29y")
        assert caught.value.code == types.INVALID_PARAMS
        assert "cursor" in caught.value.error.message


@pytest.mark.filterwarnings("default::mcp.MCPDeprecationWarning")
async def test_log_notifications_follow_the_level_and_are_redacted(
    workspace: Path, events: Path
) -> None:
    received: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params)

    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    async with http_serve_process(argv) as served:
        assert served.token is not None
        async with (
            bearer_client(served.token) as http,
            Client(
                streamable_http_client(served.url, http_client=http),
                mode="legacy",
                logging_callback=on_log,
                cache=None,
                read_timeout_seconds=30.0,
            ) as client,
        ):
            assert client.server_capabilities.logging is not None
            await client.call_tool("read_file", {"path": "hello.txt"})
            await trio.sleep(0.3)
            assert received == []  # no level set: nothing is sent
            await client.set_logging_level("warning")
            # Refused (outside the workspace), with the server's token in the arguments.
            await client.call_tool("read_file", {"path": f"/etc/{served.token}"})
            await client.call_tool("read_file", {"path": "hello.txt"})  # info: below warning
            with trio.fail_after(10):
                while not received:
                    await trio.sleep(0.05)
            await trio.sleep(0.3)
            assert {r.level for r in received} <= {"warning", "error"}, received
            await client.set_logging_level("info")
            count = len(received)
            await client.call_tool("read_file", {"path": "hello.txt"})
            with trio.fail_after(10):
                while not any(r.level == "info" for r in received[count:]):
                    await trio.sleep(0.05)
        shown = json.dumps([r.model_dump(mode="json") for r in received])
        assert served.token not in shown  # redacted like the event file
        assert all(r.logger == "ringfence.events" for r in received)
        assert any(r.data.get("tool") == "read_file" for r in received if isinstance(r.data, dict))


async def test_the_event_store_is_bounded_and_forgets_oldest_first() -> None:
    from ringfence.serve._resume import SessionEventStore, _current

    _current.set("session-a")  # what the request guard sets for a request of session-a
    store = SessionEventStore(max_events=3, max_bytes=10_000)
    message = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/progress")
    ids = [await store.store_event("1", message) for _ in range(5)]
    sent: list[Any] = []

    async def send(event: Any) -> None:
        sent.append(event)

    # The two oldest are gone: resuming from them replays nothing; from the third, the rest.
    assert await store.replay_events_after(ids[0], send) is None and sent == []
    assert await store.replay_events_after(ids[2], send) == "1"
    assert [e.event_id for e in sent] == ids[3:]
    small = SessionEventStore(max_events=100, max_bytes=len(message.model_dump_json()) * 2)
    kept = [await small.store_event("1", message) for _ in range(4)]
    assert await small.replay_events_after(kept[0], send) is None  # evicted by size
    assert await small.replay_events_after(kept[2], send) == "1"
    assert len(set(ids)) == 5 and all(len(i) >= 20 for i in ids)


@pytest.mark.filterwarnings("default::mcp.MCPDeprecationWarning")
async def test_log_notifications_over_stdio(workspace: Path, events: Path, tmp_path: Path) -> None:
    received: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params)

    argv = real_command(workspace, events, "--posture", "allow-all")
    params = StdioServerParameters(command=sys.executable, args=argv, env=subprocess_env())
    with (tmp_path / "stderr.txt").open("w") as log:
        async with Client(
            stdio_client(params, errlog=log),
            mode="legacy",
            logging_callback=on_log,
            cache=None,
            read_timeout_seconds=30.0,
        ) as client:
            await client.set_logging_level("error")
            await client.call_tool("read_file", {"path": "hello.txt"})  # info: not sent
            await client.call_tool("read_file", {"path": "../secret.txt"})  # refused: error
            with trio.fail_after(10):
                while not received:
                    await trio.sleep(0.05)
    assert {r.level for r in received} == {"error"}
    assert any(
        isinstance(r.data, dict) and r.data.get("error", {}).get("code") == "outside_workspace"
        for r in received
    )
