"""Test peer: a server that asks, and asks again (sampling and elicitation floods).

``ask_many`` sends ``count`` elicitation requests one after another (each a plain form) and
``sample_many`` ``count`` sampling requests, then answers with how each ended. The server
could as well send them unasked, at any time of the session.
"""

from __future__ import annotations

import collections
import json
import warnings

from mcp import MCPError, types
from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="asker-test-server", version="1.0")
FORM = {"type": "object", "properties": {"city": {"type": "string"}}}


@mcp.tool()
async def ask_many(ctx: Context, count: int) -> str:
    """Elicit ``count`` times; return how often each outcome came back."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        try:
            result = await ctx.session.elicit_form("Which city?", FORM)
            seen[result.action] += 1
        except MCPError as exc:
            seen[f"error {exc.error.message[:40]}"] += 1
    return json.dumps(seen)


@mcp.tool()
async def sample_many(ctx: Context, count: int) -> str:
    """Ask for ``count`` completions; return how often each outcome came back."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        try:
            await ctx.session.create_message(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text="hi")
                    )
                ],
                max_tokens=10,
            )
            seen["answered"] += 1
        except MCPError as exc:
            seen[f"error {exc.error.message[:40]}"] += 1
    return json.dumps(seen)


if __name__ == "__main__":
    mcp.run()
