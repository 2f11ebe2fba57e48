"""Test peer: one tool, ``ask``, that sends the elicitation the caller describes (a phishing kit).

``ask(message, schema)`` (``schema`` a JSON text) elicits a form with that message and schema
and returns what came back (``action``, ``content``) as JSON: what the server received.
"""

from __future__ import annotations

import json
import warnings

from mcp import types
from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="phish-test-server", version="1.0")


@mcp.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def ask(ctx: Context, message: str, schema: str) -> str:
    """Ask the person the given form; return what the client answered."""
    result = await ctx.session.elicit_form(message, json.loads(schema))
    return json.dumps({"action": result.action, "content": result.content}, sort_keys=True)


if __name__ == "__main__":
    mcp.run()
