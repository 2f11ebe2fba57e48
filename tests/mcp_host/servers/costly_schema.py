"""Test peer: schemas whose check costs exponential time (low-level SDK ``Server`` over stdio).

``nest``'s ``inputSchema`` (1.5 KB): level k is an array whose items are ``anyOf`` two
``$ref``s to level k-1, 16 levels down to an integer. An argument 16 arrays deep with a
string at the bottom fails both branches at every level: 2^16 paths (~12 s of the checking
thread). ``nest_out`` declares it as its ``outputSchema`` and returns such a value. ``loop``'s
schema refers to itself. ``quick`` answers at once.
"""

from __future__ import annotations

import warnings

import anyio
from mcp import MCPError, types
from mcp.server import Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore")
DEPTH = 16


def costly(depth: int = DEPTH) -> dict:
    defs: dict = {"n0": {"type": "integer"}}
    for k in range(1, depth + 1):
        below = {"$ref": f"#/$defs/n{k - 1}"}
        defs[f"n{k}"] = {"type": "array", "items": {"anyOf": [below, dict(below)]}}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/n{depth}"}}}


def near_miss(depth: int = DEPTH) -> list:
    value: object = "not an integer"
    for _ in range(depth):
        value = [value]
    return value  # type: ignore[return-value]


LOOP = {
    "type": "object",
    "$defs": {"a": {"$ref": "#/$defs/a"}},
    "properties": {"x": {"$ref": "#/$defs/a"}},
}
TOOLS = [
    types.Tool(name="nest", description="takes x", input_schema=costly()),
    types.Tool(name="nest_out", input_schema={"type": "object"}, output_schema=costly()),
    types.Tool(name="loop", input_schema=LOOP),
    types.Tool(name="quick", input_schema={"type": "object"}),
]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params) -> types.CallToolResult:
    if params.name not in {t.name for t in TOOLS}:
        raise MCPError(code=types.METHOD_NOT_FOUND, message=f"no tool {params.name}")
    structured = {"x": near_miss()} if params.name == "nest_out" else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{params.name} ran")],
        structured_content=structured,
    )


server = Server("costly-schema", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
