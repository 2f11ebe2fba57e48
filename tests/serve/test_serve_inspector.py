"""The MCP Inspector CLI (npm ``@modelcontextprotocol/inspector-cli``) against ``ringfence serve``.

The inspector comes from ``tests/npm`` (``make`` installs it there); set
``RINGFENCE_NPM_BIN`` to another ``node_modules/.bin`` to use a different
install. Without it these tests skip, unless ``RINGFENCE_REQUIRE_NPM=1``
makes that a failure. The inspector declares no elicitation support, so the
server's headless policy answers for it; writes are run under a posture that
does not ask.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from serve_helpers import (
    GIT_CONFIG,
    HELLO,
    SECRET,
    http_serve_process,
    peer_args,
    real_command,
    records,
    subprocess_env,
)

REPO = Path(__file__).resolve().parents[2]
NPM_BIN = Path(
    os.environ.get("RINGFENCE_NPM_BIN", REPO / "tests" / "npm" / "node_modules" / ".bin")
)

pytestmark = pytest.mark.npm


@pytest.fixture
def inspector() -> Path:
    path = NPM_BIN / "mcp-inspector-cli"
    if not path.exists():
        reason = f"the MCP Inspector CLI is not installed at {path} (make installs tests/npm)"
        if os.environ.get("RINGFENCE_REQUIRE_NPM") == "1":
            pytest.fail(reason + "; RINGFENCE_REQUIRE_NPM=1 requires it")
        pytest.skip(reason)
    return path.resolve()


def run_inspector(inspector: Path, *args: str) -> tuple[int, Any, str]:
    # cwd is the inspector's own directory: inspector-cli 1.0.x looks for its
    # package.json relative to the working directory before importing it.
    done = subprocess.run(
        [str(inspector), "--cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=inspector.parent,
        env={**os.environ, **subprocess_env()},
        stdin=subprocess.DEVNULL,
    )
    output = json.loads(done.stdout) if done.returncode == 0 else None
    return done.returncode, output, done.stderr


def with_env(*command: str) -> list[str]:
    """The inspector starts stdio servers with a minimal environment: pass what ours needs."""
    env = [a for pair in subprocess_env().items() for a in ("-e", "=".join(pair))]
    return [*env, *command]


def stdio_target(workspace: Path, events: Path, *args: str) -> list[str]:
    return with_env(sys.executable, *peer_args(workspace, events, *args))


async def inspect_all(inspector: Path, runs: dict[str, list[str]]) -> dict[str, Any]:
    """Run the inspector once per entry, concurrently; name → (returncode, output, stderr)."""
    out: dict[str, Any] = {}

    async def one(name: str, args: list[str]) -> None:
        out[name] = await trio.to_thread.run_sync(lambda: run_inspector(inspector, *args))

    async with trio.open_nursery() as nursery:
        for name, args in runs.items():
            nursery.start_soon(one, name, args)
    return out


def call_args(tool: str, **arguments: str) -> list[str]:
    out = ["--method", "tools/call", "--tool-name", tool]
    for name, value in arguments.items():
        out += ["--tool-arg", f"{name}={value}"]
    return out


def check_listing(listed: dict[str, Any]) -> None:
    tools = {t["name"]: t for t in listed["tools"]}
    assert tools["peek_file"]["annotations"] == {"readOnlyHint": True, "destructiveHint": False}
    assert tools["note_file"]["annotations"] == {"readOnlyHint": False, "destructiveHint": False}
    assert tools["erase_file"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert tools["batch"]["_meta"]["dev.ringfence/residual"] is True


def code_of(result: dict[str, Any]) -> str | None:
    if not result.get("isError"):
        return None
    code = result["structuredContent"]["error"]["code"]
    assert result["content"][0]["text"].startswith(f"{code}: ")
    return code


async def test_inspector_over_stdio(inspector: Path, workspace: Path, events: Path) -> None:
    target = stdio_target(workspace, events, "--posture", "allow-all")
    inner = json.dumps([{"tool": "note_file", "arguments": {"path": "s.txt", "content": "s"}}])
    runs = await inspect_all(
        inspector,
        {
            "list": [*target, "--method", "tools/list"],
            "read": [*target, *call_args("peek_file", path="hello.txt")],
            "outside": [*target, *call_args("peek_file", path="../secret.txt")],
            "git": [*target, *call_args("note_file", path=".git/config", content="[evil]")],
            "script": [*target, *call_args("batch", calls=inner)],
        },
    )
    rc, listed, err = runs["list"]
    assert rc == 0, err
    check_listing(listed)

    rc, read, err = runs["read"]
    assert rc == 0 and not read.get("isError"), err
    assert read["content"][0]["text"] == HELLO

    outside = runs["outside"][1]
    assert code_of(outside) == "outside_workspace"
    assert SECRET.strip() not in json.dumps(outside)

    assert code_of(runs["git"][1]) == "git_metadata"
    assert (workspace / ".git" / "config").read_text() == GIT_CONFIG

    # A residual tool asks; the inspector cannot be asked, so the headless policy refuses, saying why.
    script = runs["script"][1]
    assert code_of(script) == "denied"
    assert "cannot be asked" in script["content"][0]["text"]
    assert not (workspace / "s.txt").exists()


async def test_inspector_over_http(inspector: Path, workspace: Path, events: Path) -> None:
    argv = peer_args(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "allow-all"]
    async with http_serve_process(argv) as server:
        http = [server.url, "--transport", "http"]
        auth = ["--header", f"Authorization: Bearer {server.token}"]

        def inspect(*args: str) -> tuple[int, Any, str]:
            return run_inspector(inspector, *args)

        rc, listed, err = await trio.to_thread.run_sync(
            inspect, *http, *auth, "--method", "tools/list"
        )
        assert rc == 0, err
        check_listing(listed)

        rc, read, err = await trio.to_thread.run_sync(
            inspect, *http, *auth, *call_args("peek_file", path="hello.txt")
        )
        assert rc == 0 and read["content"][0]["text"] == HELLO, err

        rc, outside, _ = await trio.to_thread.run_sync(
            inspect, *http, *auth, *call_args("peek_file", path="../secret.txt")
        )
        assert code_of(outside) == "outside_workspace"

        git = call_args("note_file", path=".git/config", content="[evil]")
        rc, refused, _ = await trio.to_thread.run_sync(inspect, *http, *auth, *git)
        assert code_of(refused) == "git_metadata"

        # No token: the inspector fails to connect and nothing runs.
        write = call_args("note_file", path="no-token.txt", content="x")
        rc, _, _ = await trio.to_thread.run_sync(inspect, *http, *write)
        assert rc != 0
        assert not (workspace / "no-token.txt").exists()
        proposed = [r["arguments"] for r in records(events) if r["kind"] == "proposed"]
        assert {"path": "no-token.txt", "content": "x"} not in proposed
        assert await server.stop() == 0
    assert (workspace / ".git" / "config").read_text() == GIT_CONFIG


@pytest.mark.needs_tools("read_file", "write_file")
async def test_inspector_with_the_real_file_tools(
    inspector: Path, real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    target = with_env(
        sys.executable, *real_command(workspace, events, "--posture", "allow-reversible")
    )
    runs = await inspect_all(
        inspector,
        {
            "list": [*target, "--method", "tools/list"],
            "read": [*target, *call_args("read_file", path="hello.txt")],
            "outside": [*target, *call_args("read_file", path="../secret.txt")],
            "git": [*target, *call_args("write_file", path=".git/config", content="[evil]")],
        },
    )
    rc, listed, err = runs["list"]
    assert rc == 0, err
    hints = {t["name"]: t["annotations"] for t in listed["tools"]}
    assert set(hints) == set(real_tools)
    for name, consequence in real_tools.items():
        assert hints[name]["readOnlyHint"] is (consequence == "read"), name
        assert hints[name]["destructiveHint"] is (consequence == "irreversible"), name

    rc, read, err = runs["read"]
    assert rc == 0 and not read.get("isError"), err
    assert HELLO.strip() in read["content"][0]["text"]

    assert code_of(runs["outside"][1]) == "outside_workspace"
    assert code_of(runs["git"][1]) == "git_metadata"
    assert (workspace / ".git" / "config").read_text() == GIT_CONFIG


@pytest.mark.needs_tools("run_tool_script", "write_file")
def test_inspector_cannot_be_asked_so_a_real_script_is_refused(
    inspector: Path, real_tools: dict[str, str], workspace: Path, events: Path
) -> None:
    """run_tool_script asks first; the inspector declares no elicitation, so --headless denies."""
    target = with_env(sys.executable, *real_command(workspace, events, "--posture", "allow-all"))
    script = 'call_tool("write_file", path="s.txt", content="s")'
    rc, denied, err = run_inspector(
        inspector, *target, *call_args("run_tool_script", script=script)
    )
    assert rc == 0, err
    assert code_of(denied) == "denied"
    assert "cannot be asked" in denied["content"][0]["text"]
    assert not (workspace / "s.txt").exists()
