"""Test peer: advertises resources (with subscribe), logging and an experimental capability.

With the default approvals (tools, prompts) its resources are *pending*: a
test checks they are neither listed nor read by looking at the calls this
server records in ``$RF_STATE_DIR/unapproved-calls.log``. When resources are
approved and subscriptions enabled, subscribing triggers an immediate
``notifications/resources/updated`` (a subscription round trip).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore")
STATE = Path(os.environ.get("RF_STATE_DIR", "."))


def _record(what: str) -> None:
    with open(STATE / "unapproved-calls.log", "a", encoding="utf-8") as f:
        f.write(what + "\n")


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name="hello",
                description="says hello",
                input_schema={"type": "object"},
                annotations=types.ToolAnnotations(read_only_hint=True),
            )
        ]
    )


async def call_tool(ctx, params) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text="hello")])


async def list_resources(ctx, params) -> types.ListResourcesResult:
    _record("resources/list")
    return types.ListResourcesResult(
        resources=[
            types.Resource(name="status", uri="status://now", mime_type="text/plain"),
            types.Resource(name="secret", uri="status://secret", mime_type="text/plain"),
        ]
    )


async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
    _record("resources/templates/list")
    return types.ListResourceTemplatesResult(
        resource_templates=[types.ResourceTemplate(name="log", uri_template="status://log/{day}")]
    )


async def read_resource(ctx, params) -> types.ReadResourceResult:
    _record(f"resources/read {params.uri}")
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(
                uri=params.uri, mime_type="text/plain", text="all systems go"
            )
        ]
    )


async def subscribe(ctx, params) -> types.EmptyResult:
    _record(f"resources/subscribe {params.uri}")

    async def later() -> None:
        await anyio.sleep(0.05)
        await ctx.session.send_resource_updated(params.uri)

    ctx.lifespan_context["tg"].start_soon(later)
    return types.EmptyResult()


async def unsubscribe(ctx, params) -> types.EmptyResult:
    return types.EmptyResult()


async def set_level(ctx, params) -> types.EmptyResult:
    return types.EmptyResult()


from contextlib import asynccontextmanager  # noqa: E402


@asynccontextmanager
async def lifespan(server):
    async with anyio.create_task_group() as tg:
        yield {"tg": tg}
        tg.cancel_scope.cancel()


server = Server(
    "unapproved-test-server",
    version="0.1",
    lifespan=lifespan,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=unsubscribe,
    on_set_logging_level=set_level,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(
            read,
            write,
            server.create_initialization_options(experimental_capabilities={"frobnicate": {}}),
        )


if __name__ == "__main__":
    anyio.run(main)
