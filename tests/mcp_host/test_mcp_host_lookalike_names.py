"""A look-alike tool name cannot take a tool out from under the rules written for it.

When two of a server's tools sanitize to one registered name, each gets a suffix (so a
look-alike never takes over a name, nor the grants and allow rules that name it). But a deny
or ask rule written for the name the tool had (``mcp.la.delete_all``) stopped matching it the
moment the server listed ``Delete-All`` too: under ``autonomous = mcp.la.*`` the renamed
``delete_all`` ran unasked past ``deny mcp.la.delete_all``, and past ``ask`` under allow-all.
A rule written for that name now still denies or asks for every tool renamed from it, the
look-alike included (which of them it was written for cannot be told); it never allows one
(real SDK peer ``servers/lookalike_tools.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.runtime import Kernel, Posture, Rules


def _renamed(kernel: Kernel) -> str:
    """The registered name of the real delete_all, renamed beside its look-alike."""
    found = [
        s.name
        for s in kernel.tools()
        if s.meta.get("server") == "la" and s.meta.get("remote_name") == "delete_all"
    ]
    assert len(found) == 1 and found[0].startswith("mcp.la.delete_all_"), found
    return found[0]


async def test_a_deny_rule_still_denies_a_tool_a_look_alike_renamed(
    make_kernel, state: Path
) -> None:
    rules = Rules(deny=("mcp.la.delete_all",), autonomous=("mcp.la.*",))
    m = manifest(py_server("la", "lookalike_tools.py", "twin", state=state))
    kernel = make_kernel(rules=rules)
    async with kernel, connect_servers(kernel, m):
        name = _renamed(kernel)
        twin = next(s.name for s in kernel.tools() if s.meta.get("remote_name") == "Delete-All")
        for tool in (name, twin):
            out = await kernel.invoke(tool, {})
            assert out.error is not None and out.error.code == "denied", out
            assert "mcp.la.delete_all" in out.error.message, out.error.message
        # The other tools of the server are as autonomous as the rule makes them.
        assert kernel.approver.requests == []
    assert not (state / "deleted").exists()  # neither ran
    assert not (state / "twin").exists()


@pytest.mark.parametrize("argument_rule", [False, True])
async def test_an_ask_rule_still_asks_for_a_tool_a_look_alike_renamed(
    make_kernel, state: Path, argument_rule: bool
) -> None:
    ask = "mcp.la.delete_all(scope=*)" if argument_rule else "mcp.la.delete_all"
    m = manifest(py_server("la", "lookalike_tools.py", "twin", state=state))
    kernel = make_kernel(rules=Rules(ask=(ask,)), posture=Posture.ALLOW_ALL)
    async with kernel, connect_servers(kernel, m):
        out = await kernel.invoke(_renamed(kernel), {"scope": "all"})
        assert out.error is not None and out.error.code == "denied", out  # nobody to ask
        assert len(kernel.approver.requests) == 1
    assert not (state / "deleted").exists()


async def test_the_rule_applies_as_before_without_a_look_alike(make_kernel, state: Path) -> None:
    rules = Rules(deny=("mcp.la.delete_all",), autonomous=("mcp.la.*",))
    m = manifest(py_server("la", "lookalike_tools.py", state=state))
    kernel = make_kernel(rules=rules)
    async with kernel, connect_servers(kernel, m):
        out = await kernel.invoke("mcp.la.delete_all", {})
        assert out.error is not None and out.error.code == "denied", out
    assert not (state / "deleted").exists()
