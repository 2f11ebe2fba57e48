"""When an MCP session over Streamable HTTP ends, and what goes with it.

The rules of :class:`ringfence.serve._sessions.SessionLifetimes` and the event store's
``forget``/``expire`` on their own (a clock the test moves), then the idle timeout through
the real command: a client cut off without ``DELETE`` loses its session after
``--session-idle-timeout``, and a client that keeps its stream open does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from serve_helpers import bearer_client, http_serve_process, real_command
from test_serve_http import MCP_HEADERS, rpc

from ringfence.serve._resume import SessionEventStore, _current
from ringfence.serve._sessions import IDLE_GRACE_SECONDS, SessionLifetimes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lifetimes(clock: Clock, **options: Any) -> tuple[SessionLifetimes, list[str]]:
    ended: list[str] = []
    return SessionLifetimes(ended.append, clock=clock, **options), ended


def test_a_session_ends_on_delete_on_404_and_when_idle_never_while_in_flight() -> None:
    clock = Clock()
    sessions, ended = lifetimes(clock, idle_seconds=10)
    for sid in ("deleted", "refused-delete", "unknown-to-sdk", "idle", "listening"):
        sessions.opened(sid)

    sessions.answered("deleted", "DELETE", 200)
    sessions.answered("refused-delete", "DELETE", 400)  # not ended: the SDK kept it
    sessions.answered("unknown-to-sdk", "POST", 404)
    sessions.answered("never-assigned", "POST", 404)  # made up by a client: nothing tracked
    assert ended == ["deleted", "unknown-to-sdk"]

    with sessions.request("listening"):  # a GET stream held open: in flight all along
        clock.now += 10 + IDLE_GRACE_SECONDS
        sessions.expire()
        assert "idle" in ended and "listening" not in ended and "refused-delete" in ended
        clock.now += 1000
        sessions.expire()
        assert "listening" not in ended
    sessions.expire()  # just closed: idle from now
    assert "listening" not in ended
    clock.now += 10 + IDLE_GRACE_SECONDS
    sessions.expire()
    assert ended[-1] == "listening" and sessions.count == 0
    sessions.end("listening")  # once
    assert ended.count("listening") == 1


def test_sessions_are_bounded_and_all_end_with_the_server() -> None:
    clock = Clock()
    sessions, ended = lifetimes(clock, max_sessions=3)
    for n in range(5):
        sessions.opened(f"s{n}")
    assert ended == ["s0", "s1"] and sessions.count == 3
    sessions.end_all()
    assert ended == ["s0", "s1", "s2", "s3", "s4"]


async def test_the_store_forgets_a_session_and_events_past_their_age() -> None:
    clock = Clock()
    store = SessionEventStore(max_age_seconds=60, clock=clock)
    message = types.JSONRPCResponse(
        jsonrpc="2.0", id=1, result={"content": [{"type": "text", "text": "x" * 1000}]}
    )
    _current.set("pending:abc")  # initialize: a provisional key, bound to its session after
    opening = await store.store_event("0", message)
    store.bind("pending:abc", "session-a")
    store.negotiated("session-a", "2025-11-25")
    _current.set("session-a")
    a_events = [await store.store_event("1", message) for _ in range(3)]
    _current.set("session-b")
    b_first = await store.store_event("1", None)
    b_events = [await store.store_event("1", message) for _ in range(2)]
    assert store.count == 7
    assert store.held_bytes == 6 * len(message.model_dump_json(by_alias=True, exclude_unset=True))

    store.forget("session-a")  # its own events, the initialize one (by its alias) included
    assert store.count == 3
    sent: list[Any] = []

    async def send(event: Any) -> None:
        sent.append(event)

    _current.set("session-a")
    assert await store.replay_events_after(opening, send) is None
    assert await store.replay_events_after(a_events[0], send) is None
    _current.set("session-b")
    assert await store.replay_events_after(b_first, send) == "1"
    assert [e.event_id for e in sent] == b_events
    assert sent[0].message == message  # held as JSON, handed back as the message it was

    clock.now += 61
    store.expire()
    assert store.count == 0 and store.held_bytes == 0


async def test_a_session_cut_off_without_delete_ends_after_the_idle_timeout(
    workspace: Path, events: Path
) -> None:
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all", "--session-idle-timeout", "1"]
    async with http_serve_process(argv) as served:
        assert served.token is not None
        session_ids: dict[str, str] = {}

        async def capture(name: str, http: httpx2.AsyncClient) -> None:
            async def on_response(response: httpx2.Response) -> None:
                sid = response.headers.get("mcp-session-id")
                if sid:
                    session_ids.setdefault(name, sid)

            http.event_hooks["response"].append(on_response)

        async with bearer_client(served.token) as kept_http:
            await capture("kept", kept_http)
            async with Client(
                streamable_http_client(served.url, http_client=kept_http),
                mode="legacy",
                cache=None,
            ) as kept:
                async with bearer_client(served.token) as cut_http:
                    await capture("cut", cut_http)
                    with trio.CancelScope() as cut:
                        async with Client(
                            streamable_http_client(served.url, http_client=cut_http),
                            mode="legacy",
                            cache=None,
                        ) as client:
                            await client.call_tool("read_file", {"path": "hello.txt"})
                            cut.cancel()  # gone without a DELETE
                await trio.sleep(1 + IDLE_GRACE_SECONDS + 1.5)
                # The client that kept its stream open still has its session.
                assert not (await kept.call_tool("read_file", {"path": "hello.txt"})).is_error

        # The one that vanished has none any more.
        async with bearer_client(served.token) as raw:
            headers = {**MCP_HEADERS, "MCP-Session-Id": session_ids["cut"]}
            response = await raw.post(served.url, content=rpc("tools/list"), headers=headers)
        assert response.status_code == 404, response.text


async def test_forgetting_a_session_after_evictions_leaves_nothing() -> None:
    store = SessionEventStore(max_events=3)
    message = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/progress")
    _current.set("pending:x")
    await store.store_event("0", message)
    store.bind("pending:x", "session-x")
    _current.set("session-x")
    for _ in range(5):
        await store.store_event("1", message)  # the oldest are evicted as these come
    _current.set("session-y")
    kept = await store.store_event("1", message)
    assert store.count == 3
    store.forget("session-x")
    store.forget("session-x")  # twice: nothing left to drop
    held = len(message.model_dump_json(by_alias=True, exclude_unset=True))
    assert store.count == 1 and store.held_bytes == held
    store.forget("session-y")
    assert store.count == 0 and store.held_bytes == 0
    assert await store.replay_events_after(kept, _fail) is None


async def _fail(event: Any) -> None:
    raise AssertionError(f"replayed {event}")


async def test_freed_memory_is_trimmed_once_per_quiet_spell() -> None:
    from ringfence._confine.libc import malloc_trim
    from ringfence.serve._memory import QuietTrim

    clock = Clock()
    trim = QuietTrim(quiet_seconds=2, clock=clock)
    await trim.tick()
    assert trim.trims == 0  # nothing happened: nothing to do
    trim.activity()
    clock.now += 1
    await trim.tick()
    assert trim.trims == 0  # not quiet yet
    clock.now += 1
    await trim.tick()
    await trim.tick()
    done = 1 if malloc_trim() is not None else 0
    assert trim.trims == done  # once, however often it is asked
    trim.freed()  # a session ended idle, long after the last request: at once
    await trim.tick()
    assert trim.trims == 2 * done
