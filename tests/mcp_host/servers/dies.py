"""Test peer: a tool that records that it ran and then kills its own process mid-call."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from mcp import types
from mcp.server.mcpserver import MCPServer

warnings.simplefilter("ignore")
mcp = MCPServer(name="dies-test-server")
STATE = Path(os.environ.get("RF_STATE_DIR", "."))


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True))
def die(tag: str) -> str:
    """Append `tag` to dies.log, then exit without answering."""
    with open(STATE / "dies.log", "a", encoding="utf-8") as f:
        f.write(tag + "\n")
    os._exit(3)


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    mcp.run()
