"""``--expose connectors``: a configured MCP server's tools, served through the same Gate.

Uses @modelcontextprotocol/server-filesystem from tests/npm (see test_serve_inspector
for RINGFENCE_NPM_BIN / RINGFENCE_REQUIRE_NPM).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import MCPError
from serve_helpers import Asker, error_code, real_command, records, stdio_session, text_of

REPO = Path(__file__).resolve().parents[2]
NPM_BIN = Path(
    os.environ.get("RINGFENCE_NPM_BIN", REPO / "tests" / "npm" / "node_modules" / ".bin")
)

pytestmark = pytest.mark.npm


@pytest.fixture
def shared(tmp_path: Path, ringfence_home: Path) -> Path:
    """A directory served by server-filesystem, configured in the user manifest."""
    server = NPM_BIN / "mcp-server-filesystem"
    if not server.exists():
        reason = f"@modelcontextprotocol/server-filesystem is not installed at {server}"
        if os.environ.get("RINGFENCE_REQUIRE_NPM") == "1":
            pytest.fail(reason + "; RINGFENCE_REQUIRE_NPM=1 requires it")
        pytest.skip(reason)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello from the connector\n")
    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "fs"\ntransport = "stdio"\n'
        f'command = "{server.resolve()}"\nargs = ["{shared}"]\n'
        # The operator marks the reads: an untrusted server's readOnlyHint alone is not believed.
        'read_only_tools = ["read_*", "list_*"]\n'
    )
    return shared


async def test_connector_tools_are_served_with_their_consequence(
    shared: Path, workspace: Path, events: Path
) -> None:
    asker = Asker.choosing("deny")
    command = real_command(workspace, events, "--expose", "native,connectors")
    async with stdio_session(workspace, events, asker=asker, command=command) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        read = tools["mcp.fs.read_text_file"]
        assert read.annotations.read_only_hint is True
        assert read.meta["dev.ringfence/consequence"] == "read"
        assert tools["mcp.fs.write_file"].annotations.read_only_hint is False
        assert "read_file" in tools  # native tools too

        result = await client.call_tool(
            "mcp.fs.read_text_file", {"path": str(shared / "hello.txt")}
        )
        assert "hello from the connector" in text_of(result), text_of(result)
        target = shared / "new.txt"
        refused = await client.call_tool("mcp.fs.write_file", {"path": str(target), "content": "x"})
    assert error_code(refused) == "denied"  # asked through this client, which said deny
    assert asker.tools_asked() == ["mcp.fs.write_file"]
    assert not target.exists()


async def test_connectors_are_not_served_unless_exposed(
    shared: Path, workspace: Path, events: Path
) -> None:
    command = real_command(workspace, events, "--mcp")  # connected, but --expose native
    async with stdio_session(workspace, events, command=command) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "read_file" in names
        assert not any(n.startswith("mcp.") for n in names)
        with pytest.raises(MCPError):
            await client.call_tool("mcp.fs.read_text_file", {"path": str(shared / "hello.txt")})


async def test_a_script_reaches_only_the_tools_expose_served(
    shared: Path, workspace: Path, events: Path
) -> None:
    """``--expose native`` with the servers connected: a ``run_tool_script`` the client
    starts calls no connector tool (it wrote through ``mcp.fs.write_file`` before), and its
    ``tools`` namespace has none; the refused calls are recorded, never run."""
    asker = Asker()  # approves every question once: only the offer can refuse
    command = real_command(workspace, events, "--mcp")  # connected, but --expose native
    target = shared / "from-script.txt"
    script = (
        (
            "out = {}\n"
            "for name, args in [('mcp.fs.write_file', {'path': PATH, 'content': 'x'}),\n"
            "                   ('mcp.fs.read_text_file', {'path': HELLO})]:\n"
            "    try:\n"
            "        out[name] = call_tool(name, **args)\n"
            "    except ToolError as e:\n"
            "        out[name] = e.code\n"
            "out['namespace'] = hasattr(tools, 'mcp')\n"
            "out['native'] = tools.read_file(path='hello.txt')\n"
            "result = out\n"
        )
        .replace("PATH", repr(str(target)))
        .replace("HELLO", repr(str(shared / "hello.txt")))
    )
    async with stdio_session(workspace, events, asker=asker, command=command) as client:
        answer = await client.call_tool("run_tool_script", {"script": script})
    assert not answer.is_error, text_of(answer)
    value = answer.structured_content["result"]
    assert value["mcp.fs.write_file"] == "not_found", value
    assert value["mcp.fs.read_text_file"] == "not_found", value
    assert value["namespace"] is False
    assert value["native"].startswith("hello from the workspace")
    assert not target.exists()
    assert all("mcp." not in tool for tool in asker.tools_asked()), asker.tools_asked()
    seen = records(events)
    connector_ids = {
        r["call_id"] for r in seen if r.get("kind") == "proposed" and r["tool"].startswith("mcp.")
    }
    assert len(connector_ids) == 2
    started = [r for r in seen if r.get("call_id") in connector_ids and r["kind"] == "started"]
    assert started == []
