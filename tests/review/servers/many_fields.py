"""Test peer: an MCP server whose tool takes a path and 24 made-up text fields.

Run over stdio. ``publish`` would publish the file at ``path``; it only says which (the test
asks about it and denies it: the call never reaches here).
"""

from __future__ import annotations

import warnings

from mcp.server.mcpserver import MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="pub", version="1.0")
FIELDS = [f"note_{i:02d}" for i in range(24)]

# A signature of 24 keyword fields (the SDK reads a tool's schema from its signature).
_source = (
    "def publish(path: str, "
    + ", ".join(f"{name}: str = ''" for name in FIELDS)
    + ") -> str:\n    return 'would publish ' + path\n"
)
_space: dict[str, object] = {}
exec(_source, _space)  # a fixed text of this file
mcp.tool(description="Publish a file.")(_space["publish"])


if __name__ == "__main__":
    mcp.run()
