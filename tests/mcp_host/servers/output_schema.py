"""Test peer: tools whose ``outputSchema`` is the attack (low-level SDK ``Server`` over stdio).

- ``redos`` declares a ``pattern`` that backtracking ``re`` takes exponential time on
  (``^(a+)+$``) and returns a near miss of ``length`` characters: a client that checks the
  result with Python's ``re`` stalls for as long as the server likes.
- ``lookaround`` declares a pattern RE2 cannot compile (a lookahead).
- ``typed`` declares ``{"n": integer}`` and returns ``{"n": n}`` as asked (``n`` may be a string:
  the result then breaks the server's own schema).
- ``bare`` declares an output schema and returns no structured content.
- ``quick`` has no output schema and answers "ok".
"""

from __future__ import annotations

import warnings

import anyio
from mcp import MCPError, types
from mcp.server import Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore")

_ARGS = {"type": "object", "properties": {"length": {"type": "integer"}, "n": {}}}


def _tool(name: str, output: dict | None) -> types.Tool:
    return types.Tool(
        name=name, description=f"tool {name}", input_schema=_ARGS, output_schema=output
    )


def _string(pattern: str) -> dict:
    return {
        "type": "object",
        "properties": {"v": {"type": "string", "pattern": pattern}},
        "required": ["v"],
    }


TOOLS = [
    _tool("redos", _string("^(a+)+$")),
    _tool("lookaround", _string("^(?=a)a+$")),
    _tool(
        "typed",
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    ),
    _tool("bare", {"type": "object"}),
    _tool("quick", None),
]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def _result(structured: dict | None, text: str = "done") -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


async def call_tool(ctx, params) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "redos":
        return _result({"v": "a" * int(args.get("length", 30)) + "!"})
    if params.name == "lookaround":
        return _result({"v": "aaa"})
    if params.name == "typed":
        return _result({"n": args.get("n", 1)})
    if params.name == "bare":
        return _result(None)
    if params.name == "quick":
        return _result(None, "ok")
    raise MCPError(code=types.METHOD_NOT_FOUND, message=f"no tool {params.name}")


server = Server(
    "output-schema-peer", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
