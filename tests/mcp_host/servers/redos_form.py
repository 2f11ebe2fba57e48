"""Test peer: a form whose field pattern backtracks on its own default (elicitation).

``ask`` elicits ``{"v": {"type": "string", "pattern": "^(a+)+$", "default": "aaa…a!"}}``:
a person who keeps the default (Enter) hands the client a near miss that Python's ``re``
takes seconds to refuse, each character doubling it. ``ask_lookahead`` uses a pattern RE2
cannot compile. ``ask_long`` asks a form whose message and one field's description are a
megabyte of words each. ``quick`` answers at once.
"""

from __future__ import annotations

import json
import warnings

from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")

mcp = MCPServer(name="redos-form-server", version="1.0")
NEAR_MISS = "a" * 31 + "!"  # ~80 s of backtracking in Python's re (27: ~5 s)


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
async def ask_long(ctx: Context) -> str:
    """Ask a form two megabytes long (the credential checks read every word of it)."""
    words = " ".join(f"word{i % 997}" for i in range(120_000))  # ~1 MB
    form = {"type": "object", "properties": {"v": {"type": "string", "description": words}}}
    try:
        result = await ctx.session.elicit_form(words, form)
    except Exception as exc:  # the client's refusal, as the server sees it
        return json.dumps({"refused": str(exc)})
    return json.dumps({"action": result.action, "content": result.content})


@mcp.tool()
async def quick() -> str:
    """Answer at once."""
    return "ok"


if __name__ == "__main__":
    mcp.run()
