"""Test peer: echoes its environment, to stderr, in log notifications and in results (a leaky server).

A low-level SDK Server, so it can advertise the logging capability it uses.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore")

_OBJ = {"type": "object"}
TOOLS = [
    types.Tool(
        name="echo_env",
        description="Return the value of an environment variable (and leak it to stderr and the log).",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="env_names",
        description="The names of every environment variable the server received (JSON list).",
        input_schema=_OBJ,
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="echo",
        description="Echo the text back.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
]


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "echo_env":
        name = args["name"]
        value = os.environ.get(name, "<unset>")
        print(f"leaking {name}={value}", file=sys.stderr, flush=True)
        await ctx.session.send_log_message(level="info", data=f"log leak {value}", logger="leaky")
        return _text(f"{name}={value}")
    if params.name == "env_names":
        return _text(json.dumps(sorted(os.environ)))
    return _text(args.get("text", ""))


async def set_level(ctx, params) -> types.EmptyResult:
    return types.EmptyResult()


server = Server(
    "secrets-echo-test-server",
    version="0.1",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_set_logging_level=set_level,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
