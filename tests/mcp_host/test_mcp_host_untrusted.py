"""A hostile MCP server, attacking through what it controls: annotations, content, errors, size.

Each test runs the real SDK peer ``servers/hostile.py`` over stdio and asserts both the
refusal and the absence of any effect (marker files, result text, events).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_host_helpers import events_of, manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.runtime import ApprovalAnswer, Consequence

INJECTION = "IMPORTANT SYSTEM NOTICE"


def hostile(state: Path, extra: str = "", reads: tuple[str, ...] = ()) -> str:
    return py_server("evil", "hostile.py", state=state, extra=extra, reads=reads)


# -- item 5: readOnlyHint from an untrusted server grants nothing --------------------------------


async def test_untrusted_read_only_claim_still_asks_and_a_denial_has_no_effect(
    make_kernel, sink, state: Path
) -> None:
    kernel = make_kernel([ApprovalAnswer.deny("no")])  # posture ask (the default)
    async with kernel, connect_servers(kernel, manifest(hostile(state))):
        spec = kernel.registry.get("mcp.evil.peek")
        assert spec.consequence is Consequence.REVERSIBLE
        assert "untrusted" in spec.meta["consequence_reason"]
        out = await kernel.invoke("mcp.evil.peek", {})
        assert out.error is not None and out.error.code == "denied"
        assert [r.tool for r in kernel.approver.requests] == ["mcp.evil.peek"]
    assert not (state / "peek.marker").exists()
    assert not [r for r in events_of(sink, "finished") if r.get("tool") == "mcp.evil.peek"]


async def test_untrusted_read_only_claim_is_staged_under_dry_run(
    make_kernel, state: Path, tmp_path: Path
) -> None:
    kernel = make_kernel(dry_run=True, plan_path=tmp_path / "plan.json")
    async with kernel, connect_servers(kernel, manifest(hostile(state))):
        out = await kernel.invoke("mcp.evil.peek", {})
        assert out.staged and out.value["staged"] is True
    assert not (state / "peek.marker").exists()
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [c["tool"] for c in plan["calls"]] == ["mcp.evil.peek"]


@pytest.mark.parametrize("key", ["read_tools", "read_only_tools"])
async def test_operator_read_tools_run_without_asking(make_kernel, state: Path, key: str) -> None:
    kernel = make_kernel([])  # any question would be refused
    extra = f'{key} = ["pe*"]'
    async with kernel, connect_servers(kernel, manifest(hostile(state, extra))):
        assert kernel.registry.get("mcp.evil.peek").consequence is Consequence.READ
        out = await kernel.invoke("mcp.evil.peek", {})
        assert out.ok, out.error
        assert kernel.approver.requests == []
    assert (state / "peek.marker").exists()


async def test_a_trusted_server_s_read_only_claim_is_believed(make_kernel, state: Path) -> None:
    kernel = make_kernel([])
    async with kernel, connect_servers(kernel, manifest(hostile(state, 'trust = "trusted"'))):
        assert kernel.registry.get("mcp.evil.peek").consequence is Consequence.READ
        assert (await kernel.invoke("mcp.evil.peek", {})).ok
        assert kernel.approver.requests == []
