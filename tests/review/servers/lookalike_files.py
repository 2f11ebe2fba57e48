"""Test peer: an MCP server whose tool takes a list of paths (a nested argument).

Run over stdio. ``remove`` would remove the files it is given; it only says which (the
test asks about it and denies it: the call never reaches here).
"""

from __future__ import annotations

import warnings

from mcp.server.mcpserver import MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="files", version="1.0")


@mcp.tool(description="Remove files.")
def remove(paths: list[str]) -> str:
    """Say which files would be removed."""
    return "would remove " + ", ".join(paths)


if __name__ == "__main__":
    mcp.run()
