"""Baseline peer: a bare MCP Python SDK server with read_file and list_directory over stdio.

The same low-level ``mcp.server.Server`` and ``serve_loop`` as ``ringfence serve``,
no Gate, no confinement, no events: it returns what ringfence returns for the
same file (the text) and the same directory (the entries as JSON, sorted by
name, as structured content), so the difference is ringfence's own work.

Run: ``python sdk_files.py ROOT``; paths are taken relative to ROOT.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."

TOOLS = [
    types.Tool(
        name="read_file",
        description="Read a text file.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
    types.Tool(
        name="list_directory",
        description="List a directory.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
]


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    path = os.path.join(ROOT, (params.arguments or {})["path"])
    if params.name == "read_file":
        with open(path, encoding="utf-8", errors="replace") as f:
            return types.CallToolResult(content=[types.TextContent(text=f.read())])
    with os.scandir(path) as it:
        entries = sorted(({"name": e.name, "type": _kind(e)} for e in it), key=lambda e: e["name"])
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(entries, ensure_ascii=False))],
        structured_content={"result": entries},
    )


async def main() -> None:
    server: Server[Any] = Server("sdk-files", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await serve_loop(
            server,
            read_stream,
            write_stream,
            lifespan_state={},
            init_options=server.create_initialization_options(),
        )


if __name__ == "__main__":
    anyio.run(main)
