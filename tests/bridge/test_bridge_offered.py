"""A script reaches only the tools offered to whoever started it (``Kernel.offering``).

A model handed some of a kernel's tools (``tool_definitions(names=…)`` and
``answer_tool_call(tools=…)``), or an MCP client served ``--expose native``
(tests/serve/test_serve_connectors.py), runs ``run_tool_script``: its calls of the
kernel's other tools are ``not_found``, recorded and never run, and its ``tools``
namespace does not name them. Before, a model given ``read_file`` and
``run_tool_script`` wrote files and ran commands through the script.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel_helpers import event_records

from ringfence._embed import create_kernel
from ringfence.runtime import ApprovalAnswer, ScriptedApprover

YES = ScriptedApprover(lambda r: ApprovalAnswer.once())

SCRIPT = """
out = {}
for name, args in [("write_file", {"path": "planted.txt", "content": "x"}),
                   ("run_shell", {"command": "touch shell-planted.txt"})]:
    try:
        out[name] = call_tool(name, **args)
    except ToolError as e:
        out[name] = e.code
out["namespace"] = [hasattr(tools, "write_file"), hasattr(tools, "run_shell")]
out["read"] = tools.read_file(path="hello.txt")
result = out
"""


async def test_a_script_reaches_only_the_tools_the_model_was_offered(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\n")
    events = tmp_path / "events.jsonl"
    async with create_kernel(roots=[ws], approver=YES, events_path=events) as kernel:
        offered = kernel.tool_definitions("anthropic", names=["read_file", "run_tool_script"])
        call = {
            "type": "tool_use",
            "id": "t1",
            "name": "run_tool_script",
            "input": {"script": SCRIPT},
        }
        answer = await kernel.answer_tool_call(call, tools=offered)
        assert not answer.get("is_error"), answer
        value = json.loads(answer["content"])["result"]
        assert value["write_file"] == "not_found", value
        assert value["run_shell"] == "not_found", value
        assert value["namespace"] == [False, False]
        assert value["read"] == "hello\n"
        # the same kernel, outside any offer (a host's own call): the tools are there
        direct = await kernel.invoke("write_file", {"path": "direct.txt", "content": "y"})
        assert direct.ok, direct.error
    records = event_records(events)
    assert not (ws / "planted.txt").exists()
    assert not (ws / "shell-planted.txt").exists()
    refused = {
        r["call_id"]
        for r in records
        if r["kind"] == "proposed"
        and r["tool"] in ("write_file", "run_shell")
        and r.get("origin") == "script"
    }
    assert len(refused) == 2
    assert not [r for r in records if r.get("call_id") in refused and r["kind"] == "started"]


async def test_a_tools_own_nested_call_is_not_limited_by_the_offer(tmp_path: Path) -> None:
    """In a dry run, ``run_shell`` stages what its command wrote as its own nested
    ``apply_changes`` call: the tool's choice, not the caller's, so a script offered only
    ``run_shell`` gets its command staged, not refused for a tool it never named."""
    ws = tmp_path / "ws"
    ws.mkdir()
    async with create_kernel(
        roots=[ws], approver=YES, dry_run=True, backend="local", change_sets=True
    ) as kernel:
        offered = kernel.tool_definitions("anthropic", names=["run_shell", "run_tool_script"])
        script = "result = tools.run_shell(command='echo hi > made.txt')['changes']"
        call = {"type": "tool_use", "id": "t1", "name": "run_tool_script", "input": {"script": script}}  # fmt: skip
        answer = await kernel.answer_tool_call(call, tools=offered)
    assert not answer.get("is_error"), answer
    changes = json.loads(answer["content"])["result"]
    assert changes["staged"] is True, changes
    assert not (ws / "made.txt").exists()
