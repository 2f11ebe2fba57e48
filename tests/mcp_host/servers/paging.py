"""Test peer: a low-level SDK Server that paginates, with a misbehaving mode.

``python paging.py MODE``:
  normal  23 tools in pages of 5, including three whose names collide after sanitizing;
          prompts and resources paginate too
  loop    tools/list hands back the same cursor forever (a cursor loop)
  endless tools/list hands out a fresh cursor forever (no end)
  flood   one page with 300 tools (item limit)
  heavy   12 pages, each one tool with a 6 MB description (size limit)
  cursors pages of one tool, each with a fresh 2 MB cursor, without end (size limit)
  slow    tools/list pages of one tool without end, each answered after 0.4 s (time limit)
  stall   tools/list (the time it answered goes to $RF_STATE_DIR/listed) and
          resources/list answer at once; prompts/list, resources/templates/list and every
          resources/subscribe never answer (each took a call's deadline of its own)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"
PAGE = 5

NAMES = [f"tool_{i:02d}" for i in range(20)] + ["Read File!", "read_file", "read-file"]


def _tool(name: str) -> types.Tool:
    return types.Tool(
        name=name,
        description=f"tool {name}",
        input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )


def _page(items: list, cursor: str | None) -> tuple[list, str | None]:
    start = int(cursor) if cursor else 0
    end = start + PAGE
    return items[start:end], (str(end) if end < len(items) else None)


async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    cursor = params.cursor if params else None
    if MODE == "loop":
        return types.ListToolsResult(
            tools=[_tool(f"loop_{cursor or 'start'}")], next_cursor="again"
        )
    if MODE == "slow":
        n = int(cursor or 0)
        await anyio.sleep(0.4)  # each page well inside one call's deadline
        return types.ListToolsResult(tools=[_tool(f"slow_{n}")], next_cursor=str(n + 1))
    if MODE == "endless":
        n = int(cursor or 0)
        return types.ListToolsResult(tools=[_tool(f"endless_{n}")], next_cursor=str(n + 1))
    if MODE == "heavy":
        n = int(cursor or 0)
        tool = _tool(f"heavy_{n}")
        tool.description = f"heavy {n} " + "d" * 6_000_000
        return types.ListToolsResult(tools=[tool], next_cursor=str(n + 1) if n < 11 else None)
    if MODE == "cursors":
        n = int((cursor or "0").split("-")[0])
        return types.ListToolsResult(
            tools=[_tool(f"paged_{n}")], next_cursor=f"{n + 1}-" + "c" * 2_000_000
        )
    if MODE == "stall":
        listed = Path(os.environ["RF_STATE_DIR"]) / "listed"
        listed.with_suffix(".part").write_text(repr(time.time()))
        listed.with_suffix(".part").replace(listed)  # whole or not at all
        return types.ListToolsResult(tools=[_tool("stall")], next_cursor=None)
    if MODE == "flood":
        return types.ListToolsResult(
            tools=[_tool(f"flood_{i}") for i in range(300)], next_cursor=None
        )
    page, nxt = _page([_tool(n) for n in NAMES], cursor)
    return types.ListToolsResult(tools=page, next_cursor=nxt)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"called {params.name}")]
    )


PROMPTS = [types.Prompt(name=f"prompt_{i}", description=f"prompt {i}") for i in range(7)]
RESOURCES = [
    types.Resource(name=f"r{i}", uri=f"page://item/{i}", mime_type="text/plain") for i in range(12)
]


async def _stall() -> None:
    await anyio.sleep(3600)  # never, as far as a session start can wait


async def list_prompts(ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    if MODE == "stall":
        await _stall()
    page, nxt = _page(PROMPTS, params.cursor if params else None)
    return types.ListPromptsResult(prompts=page, next_cursor=nxt)


async def list_resources(
    ctx, params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    if MODE == "stall":
        return types.ListResourcesResult(resources=RESOURCES[:3], next_cursor=None)
    page, nxt = _page(RESOURCES, params.cursor if params else None)
    return types.ListResourcesResult(resources=page, next_cursor=nxt)


async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
    if MODE == "stall":
        await _stall()
    return types.ListResourceTemplatesResult(resource_templates=[])


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(
                uri=params.uri, mime_type="text/plain", text=f"content of {params.uri}"
            )
        ]
    )


async def subscribe(ctx, params) -> types.EmptyResult:
    if MODE == "stall":
        await _stall()
    return types.EmptyResult()


server = Server(
    "paging-test-server",
    version="0.1",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_prompts=list_prompts,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=subscribe,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
