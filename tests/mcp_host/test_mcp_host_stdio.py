"""The annotated SDK test peer over stdio: consequences, the Gate, results, resources, prompts."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_host_helpers import events_of, manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.runtime import ApprovalAnswer, Consequence, Kernel, MemorySink, Posture, Rules


async def test_tools_register_with_consequence_from_annotations(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        assert not connectors.failures
        specs = {s.name: s for s in kernel.tools()}
        assert specs["mcp.notes.read_note"].consequence is Consequence.READ  # read_only_tools
        assert specs["mcp.notes.append_note"].consequence is Consequence.REVERSIBLE
        assert specs["mcp.notes.delete_note"].consequence is Consequence.IRREVERSIBLE
        assert specs["mcp.notes.undeclared"].consequence is Consequence.IRREVERSIBLE
        assert specs["mcp.notes.read_note"].source == "mcp:notes"
        assert specs["mcp.notes.read_note"].meta["remote_name"] == "read_note"
        c = connectors["notes"]
        assert c.identity["protocol_version"] == "2025-11-25"
        assert c.identity["name"] == "annotated-test-server"
        assert c.identity["version"] == "1.2.3"
    # Closing the connectors takes their tools out of the registry.
    assert not [s for s in kernel.tools() if s.name.startswith("mcp.")]


async def test_trust_never_lowers_consequence(make_kernel, state: Path) -> None:
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='trust = "trusted"', reads=())
    )
    async with make_kernel() as kernel, connect_servers(kernel, m):
        specs = {s.name: s for s in kernel.tools()}
        assert specs["mcp.notes.undeclared"].consequence is Consequence.IRREVERSIBLE
        assert specs["mcp.notes.delete_note"].consequence is Consequence.IRREVERSIBLE
        # Only a trusted server's readOnlyHint is believed.
        assert specs["mcp.notes.read_note"].consequence is Consequence.READ


async def test_operator_lists_beat_annotations(make_kernel, state: Path) -> None:
    extra = 'read_only_tools = ["undeclared"]\nirreversible_tools = ["liar", "read_note"]'
    m = manifest(py_server("notes", "annotated.py", state=state, extra=extra))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        specs = {s.name: s for s in kernel.tools()}
        assert specs["mcp.notes.undeclared"].consequence is Consequence.READ
        # readOnlyHint cannot lower what the operator marked irreversible.
        assert specs["mcp.notes.liar"].consequence is Consequence.IRREVERSIBLE
        assert specs["mcp.notes.read_note"].consequence is Consequence.IRREVERSIBLE
        outcome = await kernel.invoke("mcp.notes.liar", {"path": "x"})
        assert outcome.error is not None and outcome.error.code == "denied"
    assert not (state / "liar.log").exists()


async def test_ask_posture_asks_for_writes_and_not_for_reads(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    kernel = make_kernel([ApprovalAnswer.deny("no"), ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, m):
        denied = await kernel.invoke("mcp.notes.delete_note", {"name": "a"})
        assert denied.error is not None and denied.error.code == "denied"
        assert not (state / "deleted.log").exists()
        ok = await kernel.invoke("mcp.notes.delete_note", {"name": "a"})
        assert ok.ok, ok.error
        assert (state / "deleted.log").read_text() == "a\n"
        read = await kernel.invoke("mcp.notes.read_note", {"name": "a"})
        assert read.ok and read.decision.rule == "posture:ask"
        assert [r.tool for r in kernel.approver.requests] == ["mcp.notes.delete_note"] * 2


async def test_dry_run_stages_instead_of_calling(make_kernel, state: Path, tmp_path: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    kernel = make_kernel(dry_run=True, plan_path=tmp_path / "plan.json")
    async with kernel, connect_servers(kernel, m):
        out = await kernel.invoke("mcp.notes.append_note", {"name": "n", "text": "t"})
        assert out.staged and out.value["staged"] is True
        assert not (state / "note-n.txt").exists()
        # Reads still run under dry run.
        assert (await kernel.invoke("mcp.notes.read_note", {"name": "n"})).ok
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [c["tool"] for c in plan["calls"]] == ["mcp.notes.append_note"]


async def test_autonomous_tools_run_without_asking(make_kernel, state: Path) -> None:
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='autonomous_tools = ["append_*"]')
    )
    kernel = make_kernel()
    async with kernel, connect_servers(kernel, m):
        out = await kernel.invoke("mcp.notes.append_note", {"name": "n", "text": "t"})
        assert out.ok, out.error
        assert out.decision.rule.startswith("autonomous:")
        assert (state / "note-n.txt").read_text() == "t\n"
        assert kernel.approver.requests == []
        # Only the named tools: delete_note still asks (and the empty approver denies).
        assert (await kernel.invoke("mcp.notes.delete_note", {"name": "n"})).error.code == "denied"
    assert kernel.rules.autonomous == ()  # removed again with the connectors


async def test_kernel_deny_rule_beats_annotations(state: Path, sink: MemorySink) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with (
        Kernel(rules=Rules(deny=("mcp.notes.read_*",)), events_sink=sink) as kernel,
        connect_servers(kernel, m),
    ):
        out = await kernel.invoke("mcp.notes.read_note", {"name": "x"})
        assert out.error is not None and out.error.code == "denied"


async def test_bad_arguments_never_reach_the_server(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    kernel = make_kernel(posture=Posture.ALLOW_ALL)
    async with kernel, connect_servers(kernel, m) as connectors:
        out = await kernel.invoke("mcp.notes.undeclared", {"value": "not a number"})
        assert out.error is not None and out.error.code == "invalid_arguments"
        assert out.error.field == "value"
        out = await kernel.invoke("mcp.notes.undeclared", {})
        assert out.error.code == "invalid_arguments"
        assert not (state / "undeclared.log").exists()
        assert not connectors["notes"].diagnostics.failures
        assert (await kernel.invoke("mcp.notes.undeclared", {"value": 7})).ok
        assert (state / "undeclared.log").read_text() == "7\n"


async def test_results_are_framed_capped_and_binary_is_an_attachment(
    make_kernel, state: Path, tmp_path: Path
) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state, extra="max_output_bytes = 1000"))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        out = await kernel.call("mcp.notes.inject", {})
        text = out["text"]
        assert out["trust"] == "untrusted"
        first, *_, last = text.splitlines()
        assert first.startswith("[begin untrusted external content ") and "notes" in first
        nonce = first.split()[4]
        assert last == f"[end untrusted external content {nonce}]"
        assert nonce != "000000000000"  # the server's forged end line does not match

        big = await kernel.call("mcp.notes.big", {"size": 50_000})
        assert big["truncated"] is True
        assert len(big["text"].encode()) < 1500
        assert "ringfence cut" in big["text"]

        img = await kernel.call("mcp.notes.image", {})
        (att,) = img["attachments"]
        assert att["type"] == "image" and att["mime_type"] == "image/png"
        assert att["ref"].startswith("attachment:sha256:")
        assert Path(att["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "iVBOR" not in json.dumps(img)  # no base64 in the result


async def test_trusted_results_are_not_framed(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state, extra='trust = "trusted"'))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        out = await kernel.call("mcp.notes.pid", {})
        assert out["trust"] == "trusted" and out["text"].isdigit()


async def test_tool_errors_come_back_as_tool_error(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        out = await kernel.invoke("mcp.notes.fail", {"reason": "because"})
        assert out.error is not None and out.error.code == "tool_error"
        assert "untrusted" in out.error.message


async def test_allow_and_deny_lists_filter_tools(make_kernel, state: Path) -> None:
    extra = 'allow_tools = ["read_*", "delete_*", "pid"]\ndeny_tools = ["delete_*"]'
    m = manifest(py_server("notes", "annotated.py", state=state, extra=extra))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        names = sorted(
            s.name for s in kernel.tools() if s.name.startswith("mcp.notes.") and "__" not in s.name
        )
        assert names == ["mcp.notes.pid", "mcp.notes.read_note"]
        assert {"remote_name": "delete_note", "reason": "allow_tools/deny_tools"} in connectors[
            "notes"
        ].dropped_tools
        assert (
            await kernel.invoke("mcp.notes.delete_note", {"name": "x"})
        ).error.code == "not_found"


async def test_an_explicitly_empty_allowlist_fails_closed(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state, extra="allow_tools = []"))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        assert [
            s.name for s in kernel.tools() if s.name.startswith("mcp.notes.") and "__" not in s.name
        ] == []


async def test_resources_and_prompts_when_approved(make_kernel, state: Path) -> None:
    extra = 'approved_capabilities = ["tools", "prompts", "resources"]\ndeny_resources = ["note://private/*"]'
    m = manifest(py_server("notes", "annotated.py", state=state, extra=extra))
    kernel = make_kernel([ApprovalAnswer.once(), ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, m) as connectors:
        c = connectors["notes"]
        assert [r["uri"] for r in c.resources] == ["note://public/readme"]
        assert c.resources[0]["ref"].startswith("mcp-resource:notes:")
        spec = kernel.registry.get("mcp.notes.__read_resource")
        assert spec.consequence is Consequence.REVERSIBLE
        assert spec.input_schema["properties"]["uri"]["enum"] == ["note://public/readme"]
        # A denied resource is not readable: the schema refuses it before the server is asked.
        bad = await kernel.invoke("mcp.notes.__read_resource", {"uri": "note://private/keys"})
        assert bad.error.code == "invalid_arguments"
        out = await kernel.call("mcp.notes.__read_resource", {"uri": "note://public/readme"})
        assert out["provenance"] == "mcp:notes resource" and out["taint"] == "external"
        assert "public readme" in out["text"] and out["ref"] == c.resources[0]["ref"]
        prompt = await kernel.call(
            "mcp.notes.__get_prompt", {"name": "greet", "arguments": {"who": "Ada"}}
        )
        assert "Say hello to Ada." in prompt["messages"][0]["text"]
        assert prompt["messages"][0]["role"] == "user"


async def test_pending_resources_are_not_registered(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        c = connectors["notes"]
        assert "resources" in c.ledger.pending
        assert c.resources == [] and "mcp.notes.__read_resource" not in kernel.registry
        # Prompts are approved by default.
        assert "mcp.notes.__get_prompt" in kernel.registry


async def test_events_record_connection_and_calls(
    make_kernel, sink: MemorySink, state: Path
) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        await kernel.call("mcp.notes.pid", {})
    (connected,) = events_of(sink, "mcp_connected")
    assert connected["server"] == "notes" and connected["protocol_version"] == "2025-11-25"
    assert "tools" in connected["ledger"]["active"]
    assert [e["tool"] for e in events_of(sink, "finished")] == ["mcp.notes.pid"]


async def test_server_stderr_is_captured_not_printed(make_kernel, state: Path, capfd) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        await kernel.call("mcp.notes.pid", {})
        logs = connectors["notes"].diagnostics.logs
    assert any("annotated-test-server starting" in entry["text"] for entry in logs)
    assert "annotated-test-server starting" not in capfd.readouterr().err


async def test_opting_into_the_sdks_newer_negotiation(make_kernel, state: Path) -> None:
    m = manifest(py_server("notes", "annotated.py", state=state, extra='protocol_mode = "auto"'))
    async with make_kernel() as kernel, connect_servers(kernel, m) as connectors:
        c = connectors["notes"]
        # An SDK-2 server negotiates the newer revision in auto mode; it is recorded, not assumed.
        assert c.identity["protocol_version"] == "2026-07-28"
        assert c.ledger.allows("tools")
        assert (await kernel.invoke("mcp.notes.pid", {})).ok
