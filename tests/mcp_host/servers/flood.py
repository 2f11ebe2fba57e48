"""Test peer: a server that floods its client with notifications (low-level SDK ``Server``).

Advertises resources with ``subscribe`` and ``listChanged``. The tool ``flood`` sends
``count`` notifications of ``method`` (``notifications/resources/list_changed`` by default)
and then answers "flooded"; the server could as well send them unasked, at any time.
``python flood.py slow``: lists 60 resources and answers each subscription after 0.4 s.
"""

from __future__ import annotations

import sys
import warnings

import anyio
from mcp import types
from mcp.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore")
SLOW = sys.argv[1:] == ["slow"]

_ARGS = {
    "type": "object",
    "properties": {"count": {"type": "integer"}, "method": {"type": "string"}},
    "required": ["count"],
}


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name="flood", description="floods", input_schema=_ARGS)]
    )


async def call_tool(ctx, params) -> types.CallToolResult:
    args = params.arguments or {}
    method = args.get("method", "notifications/resources/list_changed")
    for _ in range(int(args["count"])):
        if method == "notifications/tools/list_changed":
            await ctx.session.send_tool_list_changed()
        else:
            await ctx.session.send_resource_list_changed()
    return types.CallToolResult(content=[types.TextContent(type="text", text="flooded")])


async def list_resources(ctx, params) -> types.ListResourcesResult:
    if SLOW:
        return types.ListResourcesResult(
            resources=[
                types.Resource(name=f"r{i}", uri=f"status://r{i}", mime_type="text/plain")
                for i in range(60)
            ]
        )
    return types.ListResourcesResult(
        resources=[types.Resource(name="now", uri="status://now", mime_type="text/plain")]
    )


async def subscribe(ctx, params) -> types.EmptyResult:
    if SLOW and isinstance(params, types.SubscribeRequestParams):
        await anyio.sleep(0.4)  # each well inside one call's deadline
    return types.EmptyResult()


server = Server(
    "flood-test-server",
    version="0.1",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=subscribe,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        options = server.create_initialization_options(
            notification_options=NotificationOptions(resources_changed=True, tools_changed=True)
        )
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
