"""``ringfence serve`` over stdio, driven by the official SDK client in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import mcp_types as types
import pytest
import trio
from mcp import MCPError
from serve_helpers import (
    HELLO,
    Asker,
    check_test_tools_scenario,
    error_code,
    peer_args,
    records,
    stdio_session,
    subprocess_env,
    text_of,
)

from ringfence.runtime import verify_file


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_done_when_over_stdio(workspace: Path, events: Path, mode: str) -> None:
    asker = Asker()
    async with stdio_session(workspace, events, asker=asker, mode=mode) as client:
        # auto mode probes the 2026-07-28 era; serve refuses it so approvals can be asked.
        assert client.protocol_version == "2025-11-25"
        assert client.server_info.name == "ringfence"
        await check_test_tools_scenario(client, workspace, asker)
    log = records(events)
    origins = {(r["tool"], r["origin"]) for r in log if r["kind"] == "proposed"}
    assert ("batch", "mcp") in origins and ("note_file", "script") in origins
    nested = next(r for r in log if r["kind"] == "proposed" and r["origin"] == "script")
    outer = next(r for r in log if r["kind"] == "proposed" and r["tool"] == "batch")
    assert nested["parent_id"] == outer["call_id"]
    # The server closed its kernel when the client went away: the stream is sealed and intact.
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems


async def test_client_without_elicitation_gets_a_refusal_that_says_why(
    workspace: Path, events: Path
) -> None:
    async with stdio_session(workspace, events) as client:  # no elicitation callback
        result = await client.call_tool("note_file", {"path": "new.txt", "content": "x"})
    assert error_code(result) == "denied"
    text = text_of(result)
    assert "note_file was refused" in text
    assert "did not declare form elicitation" in text and "headless policy" in text
    assert "posture ask asks before reversible tools" in text
    assert result.structured_content["decision"]["rule"] == "approver:posture:ask"
    assert not (workspace / "new.txt").exists()
    assert not any(r["kind"] == "started" for r in records(events))


async def test_headless_approve_policy_answers_when_the_client_cannot(
    workspace: Path, events: Path
) -> None:
    async with stdio_session(workspace, events, "--headless", "approve") as client:
        result = await client.call_tool("note_file", {"path": "new.txt", "content": "x"})
    assert not result.is_error, text_of(result)
    assert (workspace / "new.txt").read_text() == "x"


@pytest.mark.parametrize(
    ("asker", "expected"),
    [
        (Asker.acting("decline"), "declined in the MCP client"),
        (Asker.acting("cancel"), "dismissed in the MCP client"),
        (Asker.choosing("deny"), "denied in the MCP client"),
        (Asker.choosing("always"), "sent no valid decision"),
    ],
    ids=["decline", "cancel", "deny", "bogus"],
)
async def test_anything_but_approval_is_a_deny(
    workspace: Path, events: Path, asker: Asker, expected: str
) -> None:
    async with stdio_session(workspace, events, asker=asker) as client:
        result = await client.call_tool("erase_file", {"path": "hello.txt"})
    assert error_code(result) == "denied"
    assert expected in text_of(result)
    assert (workspace / "hello.txt").exists()
    assert len(asker.asked) == 1
    form = asker.asked[0]
    assert form.mode == "form"
    choices = form.requested_schema["properties"]["decision"]["oneOf"]
    assert [c["const"] for c in choices] == ["once", "session", "deny"]
    assert "erase_file (irreversible, via mcp)" in form.message


async def test_session_grant_is_not_asked_again(workspace: Path, events: Path) -> None:
    asker = Asker.choosing("session")
    args = {"path": "g.txt", "content": "same"}
    async with stdio_session(workspace, events, asker=asker) as client:
        first = await client.call_tool("note_file", args)
        second = await client.call_tool("note_file", args)
        other = await client.call_tool("note_file", {"path": "g.txt", "content": "different"})
    assert not first.is_error and not second.is_error and not other.is_error
    assert asker.tools_asked() == ["note_file", "note_file"]  # the different call asked again


async def test_errors_are_tool_errors_and_unknown_tools_are_protocol_errors(
    workspace: Path, events: Path
) -> None:
    async with stdio_session(workspace, events) as client:
        bad = await client.call_tool("peek_file", {"path": 7})
        missing = await client.call_tool("peek_file", {"path": "nope.txt"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
    assert error_code(bad) == "invalid_arguments"
    assert bad.structured_content["error"]["field"] == "path"
    assert error_code(missing) == "not_found"
    assert unknown.value.code == types.INVALID_PARAMS
    assert "no_such_tool" in str(unknown.value)
    assert not any(r.get("tool") == "no_such_tool" for r in records(events))


async def test_the_real_command_serves_over_stdio(workspace: Path, events: Path) -> None:
    """``python -m ringfence serve`` itself (no test tools): connects, lists, closes cleanly."""
    command = ["-m", "ringfence", "serve", "--workspace", str(workspace), "--events", str(events)]
    async with stdio_session(workspace, events, command=command) as client:
        assert client.protocol_version == "2025-11-25"
        listed = await client.list_tools()
        assert client.server_capabilities.tools is not None
    assert all(t.annotations is not None for t in listed.tools)
    assert verify_file(events).sealed_sessions == 1


async def test_sigterm_ends_a_stdio_server_cleanly(workspace: Path, events: Path) -> None:
    process = await trio.lowlevel.open_process(
        [sys.executable, *peer_args(workspace, events)],
        stdin=subprocess.PIPE,  # held open: only the signal can end it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **subprocess_env()},
    )
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(30):
            while b"tools over stdio" not in seen:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, seen
                seen += chunk
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems


async def test_stray_output_and_children_cannot_touch_the_wire(
    workspace: Path, events: Path
) -> None:
    async with stdio_session(workspace, events) as client:
        noisy = await client.call_tool("shout", {})
        after = await client.call_tool("peek_file", {"path": "hello.txt"})
    assert text_of(noisy) == "shouted; the child exited 0"  # cat read /dev/null, not our requests
    assert text_of(after) == HELLO
    stderr = events.with_suffix(".stderr").read_text()
    assert "stray print from a tool" in stderr and "child output" in stderr
