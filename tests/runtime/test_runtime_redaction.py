"""Redaction by name (issue 11, item 16): the wider rules, configurable names, a script's
literals before its ``proposed`` event, and credentials in ``mcp list`` / ``mcp inspect``."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from ringfence import create_kernel
from ringfence.cli import main
from ringfence.runtime import CallContext, Consequence, Kernel, MemorySink, ToolSpec
from ringfence.runtime._redact import MARKER, is_secret_name

ECHO_SCHEMA = {"type": "object", "properties": {"env": {"type": "object"}, "url": {}}}


def echo_tool() -> ToolSpec:
    """Returns (and records in its own event) every value it was given: a leaky tool."""

    async def run(args: dict[str, Any], ctx: CallContext) -> str:
        values = [*args.get("env", {}).values(), args.get("url", "")]
        ctx.emit("notice", text=f"saw {values}")
        return f"the tool saw {values}"

    return ToolSpec("echo", "echo", ECHO_SCHEMA, run, consequence=Consequence.READ)


async def echo_through_kernel(kernel: Kernel, sink: MemorySink, args: dict[str, Any]) -> str:
    kernel.register(echo_tool())
    value = await kernel.call("echo", args)
    return value + "\n" + "\n".join(sink.lines)


NEW_NAMES = [
    "passwd",
    "pwd",
    "passphrase",
    "credential",
    "secrets",
    "jwt",
    "session",
    "DB_PASS",
    "MYSQL_PWD",
    "SECRET_KEY_BASE",
    "DATABASE_URL",
    "dbPassword",
    "client-passphrase",
]


@pytest.mark.parametrize("name", NEW_NAMES)
async def test_each_new_name_is_redacted_in_results_and_events(name: str) -> None:
    secret = f"s3cr-{secrets.token_hex(6)}"
    sink = MemorySink()
    async with Kernel(posture="allow-all", events_sink=sink) as kernel:
        everything = await echo_through_kernel(kernel, sink, {"env": {name: secret}})
    assert secret not in everything
    assert MARKER in everything


async def test_url_userinfo_is_redacted_under_any_name() -> None:
    password = f"pw-{secrets.token_hex(6)}"
    sink = MemorySink()
    async with Kernel(posture="allow-all", events_sink=sink) as kernel:
        url = f"postgres://ada:{password}@db.internal:5432/app"
        everything = await echo_through_kernel(kernel, sink, {"url": url, "env": {"X": url}})
    assert password not in everything
    assert "db.internal:5432/app" in everything  # only the credential goes


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "cwd", "max_tokens", "pass_through", "path"])
async def test_ordinary_names_stay_visible(name: str) -> None:
    value = f"/work/ordinary-{secrets.token_hex(4)}"
    sink = MemorySink()
    async with Kernel(posture="allow-all", events_sink=sink) as kernel:
        everything = await echo_through_kernel(kernel, sink, {"env": {name: value}})
    assert value in everything and MARKER not in everything


async def test_placeholder_values_are_not_registered() -> None:
    sink = MemorySink()
    async with Kernel(posture="allow-all", events_sink=sink) as kernel:
        everything = await echo_through_kernel(kernel, sink, {"env": {"session": "true"}})
    assert "'true'" in everything and MARKER not in everything


async def test_operator_names_from_the_kernel(tmp_path: Path) -> None:
    by_kernel, by_glob = f"k-{secrets.token_hex(6)}", f"e-{secrets.token_hex(6)}"
    events = tmp_path / "events.jsonl"
    (tmp_path / "ws").mkdir()
    async with create_kernel(
        roots=[tmp_path / "ws"],
        posture="allow-all",
        events_path=events,
        secret_names=["*_seal", "vault_*"],
    ) as kernel:
        env = {"MY_SEAL": by_kernel, "VAULT_ROLE": by_glob, "PLAIN": "ordinary-text"}
        kernel.register(echo_tool())
        everything = await kernel.call("echo", {"env": env})
    everything += events.read_text()
    assert by_kernel not in everything and by_glob not in everything
    assert "ordinary-text" in everything


def test_the_library_does_not_read_ringfence_secret_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line reads the variable (Settings) and passes it as ``secret_names``."""
    monkeypatch.setenv("RINGFENCE_SECRET_NAMES", " *_SIGIL , vault_*")
    assert not is_secret_name("vault_thing") and not is_secret_name("LAUNCH_SIGIL")
    assert is_secret_name("vault_thing", ["vault_*"])


SCRIPT = """
token = "{indirect}"
out = call_tool(
    "run_shell",
    command="echo A=$DEPLOY_TOKEN B=$API_PASSWD",
    env={{"DEPLOY_TOKEN": token, "API_PASSWD": "{literal}"}},
)
result = out
"""


async def test_a_script_literal_never_reaches_the_events_file(tmp_path: Path) -> None:
    literal, indirect = f"lit-{secrets.token_hex(8)}", f"ind-{secrets.token_hex(8)}"
    events = tmp_path / "events.jsonl"
    ws = tmp_path / "ws"
    ws.mkdir()
    async with create_kernel(
        roots=[ws], posture="unrestricted", events_path=events, backend="local"
    ) as kernel:
        value = await kernel.call(
            "run_tool_script", {"script": SCRIPT.format(literal=literal, indirect=indirect)}
        )
    text = events.read_text()
    assert '"proposed"' in text and "run_tool_script" in text
    assert "A=" + MARKER in json.dumps(value)  # the command ran and its output was redacted
    assert literal not in text and indirect not in text
    assert literal not in json.dumps(value) and indirect not in json.dumps(value)


def test_mcp_list_and_add_mask_credentials_in_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    token, key, password = (f"{p}-{secrets.token_hex(8)}" for p in ("tok", "key", "pw"))
    code = main(
        [
            "mcp", "add", "leaky", "--transport", "stdio", "--command", sys.executable,
            "--arg", "server.py", f"--arg=--token={token}", "--arg=--api-key",
            "--arg", key, f"--arg=--db=postgres://ada:{password}@db/app", "--arg=--verbose",
        ]
    )  # fmt: skip
    assert code == 0
    added, _ = capsys.readouterr()
    assert main(["mcp", "list"]) == 0
    listed, _ = capsys.readouterr()
    assert main(["mcp", "list", "--json"]) == 0
    listed_json, _ = capsys.readouterr()
    for out in (added, listed, listed_json):
        assert token not in out and key not in out and password not in out
        assert "--token=" + MARKER in out and "--verbose" in out and "db/app" in out


def test_mcp_inspect_masks_credentials_in_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    servers = Path(__file__).resolve().parents[1] / "mcp_host" / "servers"
    token = f"tok-{secrets.token_hex(8)}"
    assert main(
        [
            "mcp", "add", "status", "--transport", "stdio", "--command", sys.executable,
            "--arg", str(servers / "unapproved.py"), f"--arg=--auth-token={token}",
        ]
    ) == 0  # fmt: skip
    capsys.readouterr()
    code = main(["mcp", "inspect", "status", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out
    assert token not in out and token not in err
    assert json.loads(out)["result"]["target"].endswith("--auth-token=" + MARKER)
