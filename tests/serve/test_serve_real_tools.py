"""The Done-when list against ringfence's real tools, through ``python -m ringfence serve`` itself.

read_file / write_file come from ``ringfence.workspace`` and run_tool_script
from ``ringfence.bridge``; ``create_kernel`` registers them. The ``real_tools``
fixture skips, naming what is missing, on a tree where they are not wired in.
"""

from __future__ import annotations

import json
from pathlib import Path

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


def command(workspace: Path, events: Path, *args: str) -> list[str]:
    return [
        "-m",
        "ringfence",
        "serve",
        "--workspace",
        str(workspace),
        "--events",
        str(events),
        *args,
    ]


async def check_real_tools_scenario(
    client: Client, workspace: Path, asker: Asker, declared: dict[str, str]
) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == set(declared)
    for name, tool in tools.items():  # every tool's hints follow its declared consequence
        consequence = Consequence(declared[name])
        assert tool.annotations.read_only_hint is (consequence is Consequence.READ), name
        assert tool.annotations.destructive_hint is (consequence is Consequence.IRREVERSIBLE), name
    assert tools["read_file"].annotations.read_only_hint is True
    assert tools["write_file"].annotations.destructive_hint is False
    assert tools["run_tool_script"].annotations.destructive_hint is True
    assert tools["run_tool_script"].meta["dev.ringfence/residual"] is True

    read = await client.call_tool("read_file", {"path": "hello.txt"})
    assert not read.is_error and HELLO.strip() in text_of(read)
    assert asker.asked == []

    outside = await client.call_tool("read_file", {"path": "../secret.txt"})
    assert error_code(outside) == "outside_workspace"
    assert SECRET.strip() not in text_of(outside)

    git = await client.call_tool("write_file", {"path": ".git/config", "content": "[evil]\n"})
    assert error_code(git) == "git_metadata"
    assert (workspace / ".git" / "config").read_text() == GIT_CONFIG

    asker.asked.clear()
    script = await client.call_tool("run_tool_script", {"script": SCRIPT})
    assert not script.is_error, text_of(script)
    assert asker.tools_asked() == ["run_tool_script", "write_file"]
    assert "via script" in asker.asked[1].message
    assert (workspace / "made" / "by-script.txt").read_text() == "made"


def check_events(events: Path) -> None:
    log = records(events)
    outer = next(r for r in log if r["kind"] == "proposed" and r["tool"] == "run_tool_script")
    inner = next(r for r in log if r["kind"] == "proposed" and r["origin"] == "script")
    assert outer["origin"] == "mcp" and inner["tool"] == "write_file"
    assert inner["parent_id"] == outer["call_id"]
    report = verify_file(events)
    assert report.ok and report.sealed_sessions == 1, report.problems


async def test_real_tools_over_stdio(
    real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    asker = Asker()
    async with stdio_session(
        workspace, events, asker=asker, command=real_command(workspace, events)
    ) as client:
        assert client.protocol_version == "2025-11-25"
        await check_real_tools_scenario(client, workspace, asker, real_tools)
    check_events(events)


async def test_real_tools_over_http(
    real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    asker = Asker()
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    async with http_serve_process(argv) as server:
        assert server.token is not None
        async with http_session(server.url, server.token, asker=asker) as client:
            await check_real_tools_scenario(client, workspace, asker, real_tools)
        assert await server.stop() == 0
    check_events(events)
    assert server.token not in json.dumps(records(events))
