"""Deadlines, servers that hang or die, pooling, and connection failures."""

from __future__ import annotations

import os
from pathlib import Path

import trio
from mcp_host_helpers import PYTHON, SERVERS, events_of, manifest, py_server, toml_str

from ringfence.mcp_host import connect_servers
from ringfence.runtime import MemorySink, Posture


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_calls_share_one_pooled_process(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        pids = set()
        async with trio.open_nursery() as n:

            async def call() -> None:
                pids.add((await kernel.call("mcp.notes.pid", {}))["text"].splitlines()[1])

            for _ in range(5):
                n.start_soon(call)
        assert len(pids) == 1
        assert connectors["notes"].pool.connects == 1
        pid = int(pids.pop())
        assert _alive(pid)
    # Closing the session stops the server process.
    assert not _alive(pid)


async def test_a_hanging_call_times_out_and_the_connection_survives(
    make_kernel, state: Path
) -> None:
    m = manifest(py_server("slow", "hang.py", extra="call_timeout_seconds = 0.5"))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        pid = (await kernel.call("mcp.slow.quick", {}))["text"].splitlines()[1]
        with trio.fail_after(10):
            out = await kernel.invoke("mcp.slow.hang", {})
        assert out.error is not None and out.error.code == "timeout"
        assert "call_timeout_seconds" in out.error.message and "not be retried" in out.error.message
        # The same process answers the next call: a timeout does not discard the connection.
        assert (await kernel.call("mcp.slow.quick", {}))["text"].splitlines()[1] == pid
        assert connectors["slow"].pool.connects == 1


async def test_a_server_that_dies_mid_call_is_not_replayed_and_reconnects(
    make_kernel, state: Path
) -> None:
    m = manifest(py_server("fragile", "dies.py", state=state))
    kernel = make_kernel(posture=Posture.ALLOW_ALL)
    async with kernel, connect_servers(kernel, m) as connectors:
        first_pid = int((await kernel.call("mcp.fragile.pid", {}))["text"].splitlines()[1])
        with trio.fail_after(15):
            out = await kernel.invoke("mcp.fragile.die", {"tag": "once"})
        assert out.error is not None and out.error.code == "unavailable"
        assert "not replayed" in out.error.message
        # It ran exactly once: the failed call was not sent again.
        assert (state / "dies.log").read_text() == "once\n"
        second_pid = int((await kernel.call("mcp.fragile.pid", {}))["text"].splitlines()[1])
        assert second_pid != first_pid
        assert connectors["fragile"].pool.connects == 2
        assert (state / "dies.log").read_text() == "once\n"
        failures = [f["action"] for f in connectors["fragile"].diagnostics.failures]
        assert "tools/call mcp.fragile.die" in failures


async def test_a_server_that_never_answers_initialize_times_out(
    make_kernel, sink: MemorySink
) -> None:
    m = manifest(py_server("silent", "hang.py", "silent", extra="connect_timeout_seconds = 1"))
    async with make_kernel() as kernel:
        with trio.fail_after(15):
            async with connect_servers(kernel, m) as connectors:
                assert "silent" not in connectors
                error = connectors.failures["silent"]
                assert error.code == "timeout" and "connect_timeout_seconds" in error.message
    (failed,) = events_of(sink, "mcp_connect_failed")
    assert failed["server"] == "silent"


async def test_a_missing_command_is_unavailable_and_named(make_kernel) -> None:
    block = '[[server]]\nname = "ghost"\ntransport = "stdio"\ncommand = "/nonexistent/mcp-server"\n'
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block)) as connectors:
        error = connectors.failures["ghost"]
        assert error.code == "unavailable" and "/nonexistent/mcp-server" in error.message
        assert error.field == "command"


async def test_strict_mode_raises_instead(make_kernel) -> None:
    block = '[[server]]\nname = "ghost"\ntransport = "stdio"\ncommand = "/nonexistent/mcp-server"\n'
    async with make_kernel() as kernel:
        try:
            async with connect_servers(kernel, manifest(block), strict=True):
                raise AssertionError("strict connect should have failed")
        except Exception as exc:
            assert getattr(exc, "code", None) == "unavailable"


async def test_one_broken_server_does_not_stop_the_others(make_kernel, state: Path) -> None:
    ghost = '[[server]]\nname = "ghost"\ntransport = "stdio"\ncommand = "/nonexistent/mcp-server"\n'
    m = manifest(ghost, py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        assert "notes" in connectors and "ghost" in connectors.failures
        assert (await kernel.invoke("mcp.notes.pid", {})).ok


async def test_disabled_servers_are_not_started(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state, extra="enabled = false"))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        assert len(connectors) == 0 and not connectors.failures


async def test_cancelling_the_session_stops_the_server(make_kernel, state: Path) -> None:
    m = manifest(py_server("slow", "hang.py"))
    pid = None
    async with make_kernel() as kernel:
        with trio.move_on_after(60) as scope:
            async with connect_servers(kernel, m):
                pid = int((await kernel.call("mcp.slow.quick", {}))["text"].splitlines()[1])
                # Cancel while the call hangs (the deadline counts from now, not from a
                # connect that can take seconds on a loaded machine).
                scope.deadline = trio.current_time() + 0.5
                await kernel.invoke("mcp.slow.hang", {})
    assert pid is not None and not _alive(pid)


def test_server_scripts_exist() -> None:
    # Guards the fixtures above against a renamed peer silently turning into "command not found".
    for name in (
        "annotated.py",
        "paging.py",
        "unapproved.py",
        "secrets_echo.py",
        "hang.py",
        "dies.py",
    ):
        assert (SERVERS / name).is_file(), name
    assert toml_str(PYTHON)


async def test_an_error_in_the_callers_body_propagates_as_itself(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel:
        try:
            async with connect_servers(kernel, m):
                raise KeyError("mine")
        except KeyError as exc:
            assert exc.args == ("mine",)
        else:
            raise AssertionError("the KeyError was swallowed")
