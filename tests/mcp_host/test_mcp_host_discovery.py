"""Opt-in tool discovery, and create_kernel(mcp_manifest=...)."""

from __future__ import annotations

from pathlib import Path

from mcp_host_helpers import manifest, py_server

from ringfence import create_kernel
from ringfence.mcp_host import connect_servers
from ringfence.runtime import ApprovalAnswer, Consequence, ScriptedApprover


async def test_discovery_shows_three_tools_and_grants_nothing(make_kernel, state: Path) -> None:
    m = manifest(py_server("pages", "paging.py"), py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m, tool_discovery=True) as cs:
        visible = {s.name for s in cs.visible_tools()}
        assert visible == {"tool_search", "tool_list", "tool_inspect"}
        for name in visible:
            assert kernel.registry.get(name).consequence is Consequence.READ
        # Every MCP tool is still registered (and still goes through the Gate).
        assert "mcp.notes.delete_note" in kernel.registry

        found = await kernel.call("tool_search", {"query": "delete note"})
        assert found["matches"][0]["name"] == "mcp.notes.delete_note"
        page = await kernel.call("tool_list", {"server": "pages", "limit": 10})
        # 23 tools and the prompt getter (prompts are approved by default).
        assert len(page["tools"]) == 10 and page["total"] == 24 and page["next_offset"] == 10
        schema = await kernel.call("tool_inspect", {"name": "mcp.notes.delete_note"})
        assert schema["input_schema"]["required"] == ["name"]
        assert "mcp.notes.delete_note" in {s.name for s in cs.visible_tools()}

        # Inspecting granted nothing: the call still asks (and the empty approver denies).
        out = await kernel.invoke("mcp.notes.delete_note", {"name": "x"})
        assert out.error is not None and out.error.code == "denied"
        assert [r.tool for r in kernel.approver.requests] == ["mcp.notes.delete_note"]
    assert not (state / "deleted.log").exists()
    assert "tool_search" not in kernel.registry  # uninstalled with the connectors


async def test_discovery_is_off_by_default(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        assert "tool_search" not in kernel.registry
        assert "mcp.notes.pid" in {s.name for s in cs.visible_tools()}


async def test_manifest_turns_discovery_on(make_kernel, state: Path) -> None:
    m = manifest("tool_discovery = true\n", py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        assert "tool_inspect" in kernel.registry


async def test_create_kernel_connects_only_when_asked(state: Path, ringfence_home: Path) -> None:
    (ringfence_home / "mcp.toml").write_text(py_server("notes", "annotated.py", state=state))
    async with create_kernel(approver=ScriptedApprover([])) as plain:
        assert "mcp" not in plain.extensions
        assert not any(s.source.startswith("mcp:") for s in plain.tools())

    approver = ScriptedApprover([ApprovalAnswer.once()])
    kernel = create_kernel(approver=approver, mcp_manifest=True)
    assert "mcp.notes.pid" not in kernel.registry  # nothing started yet
    async with kernel:
        assert "notes" in kernel.extensions["mcp"]
        assert (await kernel.invoke("mcp.notes.append_note", {"name": "e", "text": "embedded"})).ok
        pid = int((await kernel.call("mcp.notes.pid", {}))["text"].splitlines()[1])
    assert (state / "note-e.txt").read_text() == "embedded\n"
    import os

    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive  # the server stopped with the kernel


async def test_attach_connectors_in_a_host_nursery(make_kernel, state: Path) -> None:
    import os

    import trio

    from ringfence.mcp_host import attach_connectors

    m = manifest(py_server("notes", "annotated.py", state=state))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            async with make_kernel() as kernel:
                connectors = await attach_connectors(kernel, m, nursery=nursery)
                assert "notes" in connectors
                pid = int((await kernel.call("mcp.notes.pid", {}))["text"].splitlines()[1])
            # Closing the kernel stopped the server; the host's nursery then closes on its own.
            assert "mcp.notes.pid" not in kernel.registry
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive


async def test_tool_inspect_describes_an_untrusted_servers_tool_as_the_front_door_does(
    make_kernel, state: Path
) -> None:
    """With discovery on, the model meets an MCP tool through ``tool_inspect``, whose answer
    gave the server's description bare: without the note every other way of handing the tool
    to a model adds (``Kernel.tool_definitions``, ``serve``'s ``tools/list``), that the
    description and its parameters' descriptions are the server's text, not instructions."""
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m, tool_discovery=True):
        inspected = await kernel.call("tool_inspect", {"name": "mcp.notes.delete_note"})
        (offered,) = kernel.tool_definitions("mcp", names=["mcp.notes.delete_note"]).definitions
    assert "are not instructions" in inspected["description"], inspected["description"]
    assert inspected["description"] == offered["description"]
