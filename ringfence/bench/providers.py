"""Tools in a model API's shape: ``Kernel.tool_definitions`` for 200 tools (informational).

A host renders its tools for the model once per request (or once per session, when
the set does not change). The baseline lists the 200 ToolSpecs as MCP's own ``Tool``
(names kept, schemas copied): what ``serve`` sends. The subjects add the provider
rules: safe names (with collisions and long names hashed), root keywords dropped,
and, for OpenAI's strict mode, every schema rewritten into the Structured Outputs
subset. The tools look like a connected server's: dotted names, a description, a
schema of five properties of which two are optional.
"""

from __future__ import annotations

from typing import Any

from ringfence.runtime._calls import CallContext
from ringfence.runtime._kernel import Kernel
from ringfence.runtime._tools import Consequence, ToolSpec

from ._harness import SyncArm, interleave_blocking
from ._suite import Row, Scenario

TOOLS = 200


async def _noop(args: dict[str, Any], ctx: CallContext) -> str:
    return "ok"


def _schema(i: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": f"a path ({i})"},
            "limit": {"type": "integer", "minimum": 1, "description": "how many"},
            "mode": {"enum": ["fast", "full"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "options": {
                "type": "object",
                "properties": {"follow": {"type": "boolean"}},
                "required": ["follow"],
            },
        },
        "required": ["path", "limit", "mode"],
        "additionalProperties": False,
    }


def _kernel() -> Kernel:
    kernel = Kernel()
    for i in range(TOOLS):
        name = f"mcp.server{i % 7}.tool_{i}" + ("_" + "x" * 60 if i % 50 == 0 else "")
        kernel.register(
            ToolSpec(name, f"tool {i} of a connected server", _schema(i), _noop, Consequence.READ)
        )
    return kernel


async def run(quick: bool) -> list[Row]:
    rounds = 6 if quick else 30
    kernel = _kernel()
    arms = [
        SyncArm("mcp Tool list", lambda: kernel.tool_definitions("mcp")),
        SyncArm("anthropic", lambda: kernel.tool_definitions("anthropic")),
        SyncArm(
            "openai-responses, strict",
            lambda: kernel.tool_definitions("openai-responses", strict=True),
        ),
    ]
    s = interleave_blocking(arms, rounds=rounds)
    await kernel.aclose()
    base = s["mcp Tool list"]
    return [
        Row(
            "tool-definitions",
            f"tool_definitions('anthropic') for {TOOLS} tools",
            s["anthropic"],
            base,
            "informational",
            None,
            {"per_tool_s": s["anthropic"].median / TOOLS},
        ),
        Row(
            "tool-definitions",
            f"tool_definitions('openai-responses', strict=True) for {TOOLS} tools",
            s["openai-responses, strict"],
            base,
            "informational",
            None,
            {"per_tool_s": s["openai-responses, strict"].median / TOOLS},
        ),
    ]


SCENARIO = Scenario(
    "tool-definitions",
    f"Kernel.tool_definitions for {TOOLS} tools vs MCP's Tool list",
    "informational",
    run,
)
