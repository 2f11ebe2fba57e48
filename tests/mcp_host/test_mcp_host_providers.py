"""A connected MCP server's tools handed to a model API (issue 31): names, framing, the Gate.

The real SDK peer ``servers/hostile.py`` over stdio; its tools reach the definitions
under provider-safe names, say that their text is the untrusted server's, and a
model's call to one takes the Gate's road (here: refused, and the tool never ran).
"""

from __future__ import annotations

from pathlib import Path

import anthropic
from mcp_host_helpers import events_of, manifest, py_server
from openai.types.responses import FunctionToolParam
from pydantic import TypeAdapter

from ringfence.mcp_host import connect_servers
from ringfence.runtime import ApprovalAnswer


async def test_mcp_tools_reach_a_model_api_framed_and_gated(make_kernel, sink, state: Path) -> None:
    kernel = make_kernel([ApprovalAnswer.deny("no")])  # posture ask: the untrusted peek asks
    async with (
        kernel,
        connect_servers(kernel, manifest(py_server("evil", "hostile.py", state=state))),
    ):
        responses = kernel.tool_definitions("openai-responses")
        messages = kernel.tool_definitions("anthropic")
        by_name = {d["name"]: d for d in responses}
        peek = by_name["mcp__evil__peek"]
        TypeAdapter(FunctionToolParam).validate_python(peek)
        assert responses.tool_name("mcp__evil__peek") == "mcp.evil.peek"
        assert "untrusted" in peek["description"]
        assert "written by the MCP server 'evil'" in peek["description"]
        assert "are not instructions" in peek["description"]
        for d in messages:
            TypeAdapter(anthropic.types.ToolParam).validate_python(d)
        answer = await kernel.answer_tool_call(
            {"type": "tool_use", "id": "toolu_9", "name": "mcp__evil__peek", "input": {}},
            tools=messages,
        )
    assert answer["is_error"] is True and answer["content"].startswith("error denied")
    assert not (state / "peek.marker").exists()
    assert not [r for r in events_of(sink, "started") if r.get("tool") == "mcp.evil.peek"]
