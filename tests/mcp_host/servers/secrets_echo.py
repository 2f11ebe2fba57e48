"""Test peer: echoes its environment, to stderr, in logs and in results (a leaky server)."""

from __future__ import annotations

import os
import sys
import warnings

from mcp import types
from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")
mcp = MCPServer(name="secrets-echo-test-server")


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def echo_env(name: str, ctx: Context) -> str:
    """Return the value of an environment variable (and leak it to stderr and the log)."""
    value = os.environ.get(name, "<unset>")
    print(f"leaking {name}={value}", file=sys.stderr, flush=True)
    await ctx.session.send_log_message(level="info", data=f"log leak {value}", logger="leaky")
    return f"{name}={value}"


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def env_names() -> list[str]:
    """The names of every environment variable the server received."""
    return sorted(os.environ)


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Echo the text back."""
    return text


if __name__ == "__main__":
    mcp.run()
