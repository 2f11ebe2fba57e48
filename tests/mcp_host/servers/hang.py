"""Test peer: a tool that never returns, and a quick one.

``python hang.py silent`` instead never answers anything (not even initialize).
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import anyio
from mcp import types
from mcp.server.mcpserver import MCPServer

warnings.simplefilter("ignore")
mcp = MCPServer(name="hang-test-server")


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def hang() -> str:
    """Sleeps forever."""
    await anyio.sleep_forever()
    return "never"


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def quick() -> int:
    """Returns the server's pid at once."""
    return os.getpid()


if __name__ == "__main__":
    if sys.argv[1:] == ["silent"]:
        while True:
            time.sleep(60)
    mcp.run()
