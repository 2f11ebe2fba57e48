"""Test peer: a form whose field pattern backtracks on its own default (elicitation).

``ask`` elicits ``{"v": {"type": "string", "pattern": "^(a+)+$", "default": "aaa…a!"}}``:
a person who keeps the default (Enter) hands the client a near miss that Python's ``re``
takes seconds to refuse, each character doubling it. ``ask_lookahead`` uses a pattern RE2
cannot compile. ``quick`` answers at once.
"""

from __future__ import annotations

import json
import warnings

from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="redos-form-server", version="1.0")
NEAR_MISS = "a" * 27 + "!"


def _form(pattern: str) -> dict:
    return {
        "type": "object",
        "properties": {"v": {"type": "string", "pattern": pattern, "default": NEAR_MISS}},
        "required": ["v"],
    }


@mcp.tool()
async def ask(ctx: Context) -> str:
    """Ask a form whose default the pattern takes exponential time to refuse."""
    result = await ctx.session.elicit_form("Pick a value", _form("^(a+)+$"))
    return json.dumps({"action": result.action, "content": result.content})


@mcp.tool()
async def ask_lookahead(ctx: Context) -> str:
    """Ask a form whose pattern RE2 cannot compile."""
    result = await ctx.session.elicit_form("Pick a value", _form("^(?=a)a+$"))
    return json.dumps({"action": result.action, "content": result.content})


@mcp.tool()
async def quick() -> str:
    """Answer at once."""
    return "ok"


if __name__ == "__main__":
    mcp.run()
