"""The wire mappings and the package surface, without a transport."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import ringfence.serve
from ringfence.runtime import (
    CallContext,
    Consequence,
    InvalidArguments,
    Kernel,
    Outcome,
    OutsideWorkspace,
    ToolSpec,
    Verdict,
)
from ringfence.runtime.policy._decide import Decision
from ringfence.serve._server import (
    exposed_tools,
    parse_expose,
    result_from_outcome,
    tool_annotations,
)


async def _noop(args: dict[str, Any], ctx: CallContext) -> None:
    return None


def spec(name: str, consequence: str = "irreversible", source: str = "native") -> ToolSpec:
    return ToolSpec(
        name, "d", {"type": "object"}, _noop, consequence=Consequence(consequence), source=source
    )


def test_annotations_follow_the_consequence() -> None:
    read = tool_annotations(spec("r", "read"))
    assert (read.read_only_hint, read.destructive_hint) == (True, False)
    rev = tool_annotations(spec("v", "reversible"))
    assert (rev.read_only_hint, rev.destructive_hint) == (False, False)
    irr = tool_annotations(spec("i", "irreversible"))
    assert (irr.read_only_hint, irr.destructive_hint) == (False, True)


def test_expose_selects_by_source() -> None:
    kernel = Kernel()
    kernel.register(spec("native_tool"))
    kernel.register(spec("connector_tool", source="mcp:files"))
    kernel.register(spec("tool_search", source="mcp-discovery"))
    kernel.register(spec("odd_tool", source="plugin:x"))
    assert set(exposed_tools(kernel, parse_expose("native"))) == {"native_tool"}
    assert set(exposed_tools(kernel, parse_expose("connectors"))) == {
        "connector_tool",
        "tool_search",
    }
    both = exposed_tools(kernel, parse_expose("native, connectors"))
    assert set(both) == {"native_tool", "connector_tool", "tool_search"}  # unknown sources never
    for bad in ("", "all", "native,shell"):
        with pytest.raises(InvalidArguments) as refused:
            parse_expose(bad)
        assert refused.value.field == "expose"


def test_results_and_errors_on_the_wire() -> None:
    decision = Decision(Verdict.ALLOW, "posture:ask", "reads run")
    text = result_from_outcome(Outcome("t", "c", "tr", "mcp", decision, value="plain"))
    assert text.content[0].text == "plain" and text.structured_content is None and not text.is_error
    obj = result_from_outcome(Outcome("t", "c", "tr", "mcp", decision, value={"a": [1, "é"]}))
    assert obj.structured_content == {"a": [1, "é"]} and obj.content[0].text == '{"a": [1, "é"]}'
    listed = result_from_outcome(Outcome("t", "c", "tr", "mcp", decision, value=[1, 2]))
    assert listed.structured_content == {"result": [1, 2]}
    error = OutsideWorkspace("'../x' is outside the workspace", field="path")
    failed = result_from_outcome(Outcome("t", "c", "tr", "mcp", decision, error=error))
    assert failed.is_error
    assert failed.content[0].text == "outside_workspace: '../x' is outside the workspace"
    assert failed.structured_content == {
        "error": {
            "code": "outside_workspace",
            "message": "'../x' is outside the workspace",
            "field": "path",
        },
        "decision": {"verdict": "allow", "rule": "posture:ask", "reason": "reads run"},
    }


def test_public_names_resolve_and_the_package_is_light() -> None:
    for name in ringfence.serve.__all__:
        assert getattr(ringfence.serve, name) is not None, name
    # The serve verb's module imports ringfence.serve for its defaults; that must not pull in
    # the MCP SDK, Starlette or hypercorn until serving starts.
    code = (
        "import sys, ringfence.serve; "
        "print(sorted(m for m in ('mcp', 'hypercorn', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
