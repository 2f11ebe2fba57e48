"""``--expose connectors``: a configured MCP server's tools, served through the same Gate.

Uses @modelcontextprotocol/server-filesystem from tests/npm (see test_serve_inspector
for RINGFENCE_NPM_BIN / RINGFENCE_REQUIRE_NPM).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import MCPError
from serve_helpers import Asker, error_code, real_command, stdio_session, text_of

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
