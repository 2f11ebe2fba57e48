"""The real third-party reference servers from the npm registry, over stdio.

@modelcontextprotocol/server-filesystem and @modelcontextprotocol/server-everything,
pinned in tests/npm/package.json. Skipped with a reason when not installed;
RINGFENCE_REQUIRE_NPM=1 (CI) turns the skip into a failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from mcp_host_helpers import manifest, npm_bin, toml_str

from ringfence.mcp_host import connect_servers
from ringfence.runtime import ApprovalAnswer, Consequence, Kernel, Posture, ScriptedApprover
from ringfence.runtime._plan import Plan

pytestmark = [pytest.mark.npm, pytest.mark.usefixtures("everything_bin", "filesystem_bin")]


# What the operator marks read: server-filesystem's readOnlyHint is not believed on its own.
FS_READS = ("read_*", "list_*", "directory_tree", "search_files", "get_file_info")


def fs_block(root: Path, extra: str = "", reads: tuple[str, ...] = FS_READS) -> str:
    binary = npm_bin("mcp-server-filesystem")
    listed = ", ".join(toml_str(r) for r in reads)
    read_line = f"read_only_tools = [{listed}]\n" if reads else ""
    return f'[[server]]\nname = "fs"\ntransport = "stdio"\ncommand = {toml_str(binary)}\nargs = [{toml_str(root)}]\n{read_line}{extra}\n'


def everything_block(extra: str = "") -> str:
    binary = npm_bin("mcp-server-everything")
    return (
        f'[[server]]\nname = "everything"\ntransport = "stdio"\ncommand = {toml_str(binary)}\n'
        f'args = ["stdio"]\n{extra}\n'
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    (r / "hello.txt").write_text("hello from disk\n")
    return r


async def test_filesystem_consequences_follow_its_annotations(make_kernel, root: Path) -> None:
    m = manifest(fs_block(root, reads=()))
    async with make_kernel() as kernel, connect_servers(kernel, m) as cs:
        c = cs["fs"]
        assert c.identity["name"] == "secure-filesystem-server"
        assert c.identity["protocol_version"] == "2025-11-25"
        consequence = {t.remote_name: t.consequence for t in c.tools}
        # Its readOnlyHint raises nothing and lowers nothing: untrusted, so reversible.
        assert consequence["read_text_file"] is Consequence.REVERSIBLE
        assert consequence["list_directory"] is Consequence.REVERSIBLE
        assert consequence["write_file"] is Consequence.IRREVERSIBLE  # destructiveHint: true
        assert consequence["edit_file"] is Consequence.IRREVERSIBLE
        assert consequence["create_directory"] is Consequence.REVERSIBLE  # destructiveHint: false
    async with make_kernel() as kernel, connect_servers(kernel, manifest(fs_block(root))) as cs:
        consequence = {t.remote_name: t.consequence for t in cs["fs"].tools}
        assert consequence["read_text_file"] is Consequence.READ  # the operator's read_only_tools
        assert consequence["list_directory"] is Consequence.READ
        assert consequence["write_file"] is Consequence.IRREVERSIBLE  # destructiveHint: true
        assert consequence["edit_file"] is Consequence.IRREVERSIBLE
        assert consequence["create_directory"] is Consequence.REVERSIBLE  # destructiveHint: false


async def test_filesystem_write_asks_and_runs_after_approval_reads_do_not_ask(
    make_kernel, root: Path
) -> None:
    target = root / "new.txt"
    kernel = make_kernel([ApprovalAnswer.deny("not now"), ApprovalAnswer.once("go ahead")])
    async with kernel, connect_servers(kernel, manifest(fs_block(root))):
        # Reads run without asking.
        read = await kernel.invoke("mcp.fs.read_text_file", {"path": str(root / "hello.txt")})
        assert read.ok and "hello from disk" in read.value["text"]
        listing = await kernel.invoke("mcp.fs.list_directory", {"path": str(root)})
        assert listing.ok and "hello.txt" in listing.value["text"]
        assert kernel.approver.requests == []

        args = {"path": str(target), "content": "written through the gate"}
        refused = await kernel.invoke("mcp.fs.write_file", args)
        assert refused.error is not None and refused.error.code == "denied"
        assert not target.exists()

        approved = await kernel.invoke("mcp.fs.write_file", args)
        assert approved.ok, approved.error
        assert approved.decision.rule == "approved:once"
        assert target.read_text() == "written through the gate"
        asked = kernel.approver.requests
        assert [r.tool for r in asked] == ["mcp.fs.write_file"] * 2
        assert asked[0].consequence == "irreversible"


async def test_filesystem_write_is_staged_under_dry_run_and_applied_later(
    sink, root: Path, tmp_path: Path
) -> None:
    target = root / "staged.txt"
    plan_path = tmp_path / "plan.json"
    m = manifest(fs_block(root))
    approver = ScriptedApprover([])
    async with (
        Kernel(approver=approver, dry_run=True, plan_path=plan_path, events_sink=sink) as kernel,
        connect_servers(kernel, m),
    ):
        out = await kernel.invoke(
            "mcp.fs.write_file", {"path": str(target), "content": "from the plan"}
        )
        assert out.staged and not target.exists()
        assert approver.requests == []  # staging asks nobody
        # Reads still run in a dry run.
        assert (await kernel.invoke("mcp.fs.read_text_file", {"path": str(root / "hello.txt")})).ok
    assert not target.exists()

    # A later session applies the plan: each call re-enters the Gate and asks.
    approver = ScriptedApprover([ApprovalAnswer.once("apply it")])
    async with Kernel(approver=approver) as kernel, connect_servers(kernel, m):
        outcomes = await kernel.apply_plan(Plan.load(plan_path))
        assert [o.ok for o in outcomes] == [True]
    assert target.read_text() == "from the plan"
    assert [r.tool for r in approver.requests] == ["mcp.fs.write_file"]


async def test_filesystem_sees_only_the_configured_roots(
    make_kernel, tmp_path: Path, root: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    extra = f"roots = [{toml_str(shared)}]"
    async with (
        make_kernel() as kernel,
        connect_servers(kernel, manifest(fs_block(root, extra))) as cs,
    ):
        # server-filesystem asks for roots after initialization and applies them asynchronously;
        # it offers no signal for that, so ask it until its answer changes (bounded).
        with trio.fail_after(10):
            while True:
                out = await kernel.call("mcp.fs.list_allowed_directories", {})
                if str(shared) in out["text"]:
                    break
                await trio.sleep(0.01)
        # It replaced its argument directories with the client's roots.
        assert str(root) not in out["text"]
        assert any(n["method"] == "roots/list" for n in cs["fs"].diagnostics.notifications)
        outside = await kernel.invoke("mcp.fs.read_text_file", {"path": str(root / "hello.txt")})
        assert outside.error is not None


async def test_everything_identity_ledger_and_inventories(make_kernel) -> None:
    extra = 'approved_capabilities = ["tools", "prompts", "resources"]'
    kernel = make_kernel(posture=Posture.ALLOW_REVERSIBLE)
    async with kernel, connect_servers(kernel, manifest(everything_block(extra))) as cs:
        c = cs["everything"]
        assert c.identity["name"] == "mcp-servers/everything"
        assert c.identity["protocol_version"] == "2025-11-25"
        assert {"logging", "completions"} <= c.ledger.pending
        assert c.ledger.active == {"tools", "prompts", "resources"}
        tools = {t.remote_name: t for t in c.tools}
        assert tools["echo"].consequence is Consequence.REVERSIBLE  # readOnlyHint, untrusted
        assert tools["toggle-simulated-logging"].consequence is Consequence.REVERSIBLE
        assert tools["get-tiny-image"].name == "mcp.everything.get_tiny_image"
        # Client features that are not offered are not probed for: no sampling tool without sampling.
        assert "trigger-sampling-request" not in tools

        img = await kernel.call("mcp.everything.get_tiny_image", {})
        assert img["attachments"][0]["type"] == "image"
        assert Path(img["attachments"][0]["path"]).read_bytes().startswith(b"\x89PNG")

        uris = [r["uri"] for r in c.resources]
        doc = next(u for u in uris if u.endswith("architecture.md"))
        res = await kernel.call("mcp.everything.__read_resource", {"uri": doc})
        assert res["taint"] == "external" and res["trust"] == "untrusted" and res["text"]
        assert c.templates and all("uri_template" in t for t in c.templates)

        prompt = await kernel.call("mcp.everything.__get_prompt", {"name": "simple-prompt"})
        assert prompt["messages"] and prompt["messages"][0]["trust"] == "untrusted"


async def test_everything_sees_only_the_minimal_environment(make_kernel, monkeypatch) -> None:
    monkeypatch.setenv("RF_EVERYTHING_SECRET_TOKEN", "everything-secret-value-1234")
    block = everything_block('read_only_tools = ["get-env"]')
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block)):
        out = await kernel.call("mcp.everything.get_env", {})
        text = out["text"]
        body = text[text.index("\n") + 1 : text.rindex("\n")]
        env = json.loads(body)
        assert "RF_EVERYTHING_SECRET_TOKEN" not in env
        assert set(env) <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
