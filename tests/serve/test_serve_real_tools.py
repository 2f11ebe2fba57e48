"""The Done-when list against ringfence's real tools, through ``python -m ringfence serve`` itself.

read_file / write_file come from ``ringfence.workspace`` and run_tool_script
from ``ringfence.bridge``; ``create_kernel`` registers them. Each test names
the tools it needs and skips, saying which are missing, on a tree without them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from serve_helpers import (
    GIT_CONFIG,
    HELLO,
    SECRET,
    Asker,
    error_code,
    http_serve_process,
    http_session,
    real_command,
    records,
    stdio_session,
    text_of,
)

from ringfence.runtime import Consequence, verify_file

SCRIPT = 'call_tool("write_file", path="made/by-script.txt", content="made")\nresult = "done"\n'


@asynccontextmanager
async def connected(
    transport: str, workspace: Path, events: Path, asker: Asker
) -> AsyncIterator[Client]:
    """``python -m ringfence serve`` over ``transport``; the kernel is closed (events sealed) after."""
    if transport == "stdio":
        command = real_command(workspace, events)
        async with stdio_session(workspace, events, asker=asker, command=command) as client:
            assert client.protocol_version == "2025-11-25"
            yield client
    else:
        argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
        async with http_serve_process(argv) as server:
            assert server.token is not None
            async with http_session(server.url, server.token, asker=asker) as client:
                assert client.protocol_version == "2025-11-25"
                yield client
            assert await server.stop() == 0
        assert server.token not in json.dumps(records(events))
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


@pytest.mark.needs_tools("read_file", "write_file")
@TRANSPORTS
async def test_real_file_tools(
    transport: str, real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    """Listed with correct annotations; a read; outside_workspace; a refused .git/config write."""
    asker = Asker()
    async with connected(transport, workspace, events, asker) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == set(real_tools)
        for name, tool in tools.items():  # every tool's hints follow its declared consequence
            consequence = Consequence(real_tools[name])
            assert tool.annotations.read_only_hint is (consequence is Consequence.READ), name
            destructive = consequence is Consequence.IRREVERSIBLE
            assert tool.annotations.destructive_hint is destructive, name
        assert tools["read_file"].annotations.read_only_hint is True
        assert tools["write_file"].annotations.destructive_hint is False

        read = await client.call_tool("read_file", {"path": "hello.txt"})
        assert not read.is_error and HELLO.strip() in text_of(read)
        assert asker.asked == []  # reads do not ask under posture ask

        outside = await client.call_tool("read_file", {"path": "../secret.txt"})
        assert error_code(outside) == "outside_workspace"
        assert SECRET.strip() not in text_of(outside)

        # Refused before the person is asked (issue 31): the write would be refused anyway.
        git = await client.call_tool("write_file", {"path": ".git/config", "content": "[evil]\n"})
        assert error_code(git) == "git_metadata"
        assert asker.tools_asked() == []
    assert (workspace / ".git" / "config").read_text() == GIT_CONFIG


@pytest.mark.needs_tools("run_tool_script", "write_file")
@TRANSPORTS
async def test_real_script_asks_through_the_client(
    transport: str, real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    """A run_tool_script whose inner write_file triggers an elicitation the client answers."""
    asker = Asker()
    async with connected(transport, workspace, events, asker) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["run_tool_script"].annotations.destructive_hint is True
        assert tools["run_tool_script"].meta["dev.ringfence/residual"] is True
        result = await client.call_tool("run_tool_script", {"script": SCRIPT})
        assert not result.is_error, text_of(result)
    assert asker.tools_asked() == ["run_tool_script", "write_file"]
    assert "via script" in asker.asked[1].message
    assert (workspace / "made" / "by-script.txt").read_text() == "made"
    log = records(events)
    outer = next(r for r in log if r["kind"] == "proposed" and r["tool"] == "run_tool_script")
    inner = next(r for r in log if r["kind"] == "proposed" and r["origin"] == "script")
    assert outer["origin"] == "mcp" and inner["tool"] == "write_file"
    assert inner["parent_id"] == outer["call_id"]


PARALLEL_SCRIPT = """
texts = parallel(tools.read_file(path=p) for p in ["hello.txt", "hello.txt"])
made = parallel(tools.write_file(path="p/" + n + ".txt", content=n) for n in ["one", "two", "three"])
try:
    tools.read_file(pth="hello.txt")
except ToolError as e:
    local = [e.code, e.field]
result = {"same": texts[0] == texts[1], "made": [m["path"] for m in made], "local": local}
"""


@pytest.mark.needs_tools("run_tool_script", "read_file", "write_file")
@TRANSPORTS
async def test_a_typed_parallel_script_asks_through_the_client_in_order(
    transport: str, real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    """Typed calls and a parallel batch through serve: each write asked, one at a time, in order."""
    asker = Asker()
    async with connected(transport, workspace, events, asker) as client:
        result = await client.call_tool("run_tool_script", {"script": PARALLEL_SCRIPT})
        assert not result.is_error, text_of(result)
    value = result.structured_content
    assert value["status"] == "ok"
    assert value["result"] == {
        "same": True,
        "made": ["p/one.txt", "p/two.txt", "p/three.txt"],
        "local": ["invalid_arguments", "pth"],
    }
    assert asker.tools_asked() == ["run_tool_script", "write_file", "write_file", "write_file"]
    assert ["one" in a.message for a in asker.asked[1:]] == [True, False, False]
    assert ["three" in a.message for a in asker.asked[1:]] == [False, False, True]
    for name in ("one", "two", "three"):
        assert (workspace / "p" / f"{name}.txt").read_text() == name
    log = records(events)
    inner = [r for r in log if r["kind"] == "proposed" and r["origin"] == "script"]
    assert [r["tool"] for r in inner] == ["read_file"] * 2 + ["write_file"] * 3


FAILING_SCRIPT = """
print("before")
def load(name):
    return tools.read_file(path=name)
try:
    load("../outside.txt")
except ToolError as e:
    print("caught", e.code)
load("missing.txt")
print("not reached")
"""


@pytest.mark.needs_tools("run_tool_script", "read_file")
@TRANSPORTS
async def test_a_failing_script_comes_back_with_its_own_lines_output_and_calls(
    transport: str, real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    """Through serve, an uncaught ToolError ends the script with a traceback in the model's own
    lines (never the runner's), its ringfence code, the output so far and every call made."""
    async with connected(transport, workspace, events, Asker()) as client:
        result = await client.call_tool("run_tool_script", {"script": FAILING_SCRIPT})
    assert result.is_error
    text = text_of(result)
    assert text.startswith("tool_error: the script raised ToolError at script line 4: not_found")
    error = result.structured_content["error"]
    assert error["code"] == "tool_error"
    details = error["details"]
    assert details["output"] == "before\ncaught outside_workspace\n"
    assert [(c["tool"], c["error"]) for c in details["calls"]] == [
        ("read_file", "outside_workspace"),
        ("read_file", "not_found"),
    ]
    assert details["error"]["traceback"] == (
        "Traceback (most recent call last):\n"
        "  script line 9, in <module>\n"
        '    load("missing.txt")\n'
        "  script line 4, in load\n"
        "    return tools.read_file(path=name)\n"
        "ToolError: not_found: missing.txt does not exist"
    )
    assert (details["error"]["code"], details["error"]["field"]) == ("not_found", "path")
    assert "_runner" not in json.dumps(result.structured_content) + text
