"""Test peer: one tool that asks the person a form with a default, a choice and bounds (elicitation).

Run over stdio (``python form.py``); the tool returns the elicitation's action and content.
"""

from __future__ import annotations

import json
import warnings

from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="form-test-server", version="1.0")

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "title": "City", "default": "Oslo"},
        "nights": {"type": "integer", "title": "Nights", "minimum": 1, "maximum": 30},
        "cabin": {
            "type": "string",
            "title": "Cabin",
            "enum": ["economy", "business"],
            "default": "economy",
        },
        "breakfast": {"type": "boolean", "title": "Breakfast"},
    },
    "required": ["city", "nights", "cabin"],
}


@mcp.tool()
async def book(ctx: Context) -> str:
    """Ask for a booking (elicitation) and return what came back."""
    # The escape sequence would clear a terminal; the CLI must show it escaped.
    result = await ctx.session.elicit_form("Where to?\x1b[2J", SCHEMA)
    return json.dumps({"action": result.action, "content": result.content}, sort_keys=True)


if __name__ == "__main__":
    mcp.run()
