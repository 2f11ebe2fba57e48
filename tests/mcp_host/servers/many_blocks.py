"""Test peer: results made of many small content blocks (low-level SDK ``Server`` over stdio).

``images`` returns ``count`` image blocks, each a few distinct bytes (so each is its own
attachment); ``links`` returns ``count`` resource links. Far under the message limit, each
block costs the client an attachment (a spool file) or a link entry in the result.
``fat_links`` returns ``count`` links whose name, title, description and URI each hold ``size``
characters more; ``fat_blob_uris`` ``count`` embedded blobs whose URIs do. The
prompt ``images`` is ``count`` messages of one such image each, and ``texts`` ``count``
messages of one short text each (a prompt's blocks come one per message).
"""

from __future__ import annotations

import base64
import warnings

import anyio
from mcp import MCPError, types
from mcp.server import Server
from mcp.server.stdio import stdio_server

warnings.simplefilter("ignore")

_ARGS = {
    "type": "object",
    "properties": {"count": {"type": "integer"}, "size": {"type": "integer"}},
    "required": ["count"],
}


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=f"many {name}", input_schema=_ARGS)
            for name in ("images", "links", "fat_links", "fat_blob_uris")
        ]
    )


async def call_tool(ctx, params) -> types.CallToolResult:
    count = int((params.arguments or {})["count"])
    if params.name == "images":
        blocks = [
            types.ImageContent(
                type="image",
                data=base64.b64encode(i.to_bytes(4, "big")).decode(),
                mime_type="image/png",
            )
            for i in range(count)
        ]
    elif params.name == "links":
        blocks = [
            types.ResourceLink(type="resource_link", name=f"n{i}", uri=f"file:///r/{i}")
            for i in range(count)
        ]
    elif params.name == "fat_links":
        size = int((params.arguments or {}).get("size", 0))
        blocks = [
            types.ResourceLink(
                type="resource_link",
                name=f"n{i}" + "n" * size,
                title="t" * size,
                description="d" * size,
                uri=f"file:///r/{i}/" + "u" * size,
            )
            for i in range(count)
        ]
    elif params.name == "fat_blob_uris":
        size = int((params.arguments or {}).get("size", 0))
        blocks = [
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri=f"file:///b/{i}/" + "u" * size, blob=_image(i).data, mime_type="image/png"
                ),
            )
            for i in range(count)
        ]
    else:
        raise MCPError(code=types.METHOD_NOT_FOUND, message=f"no tool {params.name}")
    return types.CallToolResult(content=[types.TextContent(type="text", text="here"), *blocks])


def _image(i: int) -> types.ImageContent:
    return types.ImageContent(
        type="image", data=base64.b64encode(i.to_bytes(4, "big")).decode(), mime_type="image/png"
    )


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    count = types.PromptArgument(name="count", required=True)
    return types.ListPromptsResult(
        prompts=[types.Prompt(name=name, arguments=[count]) for name in ("images", "texts")]
    )


async def get_prompt(ctx, params) -> types.GetPromptResult:
    count = int((params.arguments or {})["count"])
    if params.name == "images":
        blocks: list[types.ContentBlock] = [_image(i) for i in range(count)]
    else:
        blocks = [types.TextContent(type="text", text=f"t{i}") for i in range(count)]
    return types.GetPromptResult(
        messages=[types.PromptMessage(role="user", content=block) for block in blocks]
    )


server = Server(
    "many-blocks",
    version="0.1",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
