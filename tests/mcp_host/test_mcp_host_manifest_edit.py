"""``ringfence mcp add|remove`` edit ``mcp.toml`` in place: tomlkit, a declared model, atomic writes."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.mcp_host import Sandbox, load_manifest, parse_manifest
from ringfence.runtime import InvalidArguments


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


STYLED = """\
# my servers, by hand
tool_discovery = false   # keep the inventory small

[[server]]
name   = 'a'              # literal strings, odd spacing
transport = "stdio"
command = "/bin/a"
args = [
  \"\"\"
[[server]]
name = "b"
\"\"\",   # a multi-line argument that looks like a table
  "--flag",
]

[server.env]
LOG_LEVEL = "info"

# b: the second one
[[server]]
name = "b"
transport = "stdio"
command = "/bin/b"

# c: the last one
[[server]]
name = "c"
transport = "stdio"
command = "/bin/c"
"""


def test_an_argument_with_a_control_character_round_trips(capsys, tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    weird = "a\x7fb\x00c\x1b[0m\"'\\\n\t\u2028"
    code, out = run(
        capsys, "mcp", "add", "x", "--transport", "stdio", "--command", "/bin/x",
        "--arg", weird, "--env", "MODE=\x7f", "--manifest", str(path),
    )  # fmt: skip
    assert code == 0, out
    tomllib.loads(path.read_text())  # the file still parses
    server = load_manifest(path).get("x")
    assert server.args == (weird,) and server.env == {"MODE": "\x7f"}
    code, out = run(capsys, "mcp", "list", "--manifest", str(path))
    assert code == 0 and [s["name"] for s in out["result"]["servers"]] == ["x"]


def test_remove_skips_a_multiline_string_that_looks_like_a_table(capsys, tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(STYLED)
    code, out = run(capsys, "mcp", "remove", "b", "--manifest", str(path))
    assert code == 0, out
    m = load_manifest(path)
    assert [s.name for s in m.servers] == ["a", "c"]
    assert m.get("a").args == ('[[server]]\nname = "b"\n', "--flag")
    # Only b's block went; its leading comment and c's stay, every other byte too.
    text = path.read_text()
    assert text == STYLED.replace(
        '[[server]]\nname = "b"\ntransport = "stdio"\ncommand = "/bin/b"\n', ""
    )
    code, out = run(capsys, "mcp", "remove", "a", "--manifest", str(path))
    assert code == 0, out
    assert [s.name for s in load_manifest(path).servers] == ["c"]
    assert path.read_text().startswith("# my servers, by hand\ntool_discovery = false   # keep")
    assert "# c: the last one\n[[server]]" in path.read_text()


def test_add_and_remove_keep_comments_and_layout(capsys, tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(STYLED)
    code, out = run(
        capsys, "mcp", "add", "d", "--transport", "stdio", "--command", "/bin/d",
        "--manifest", str(path),
    )  # fmt: skip
    assert code == 0, out
    assert path.read_text().startswith(STYLED)  # appended; nothing before it changed
    code, out = run(capsys, "mcp", "remove", "d", "--manifest", str(path))
    assert code == 0, out
    assert path.read_text() == STYLED + "\n"  # the separating blank line is all that is left
    # Replacing b rewrites b's block in place and nothing else.
    code, out = run(
        capsys, "mcp", "add", "b", "--transport", "stdio", "--command", "/opt/b",
        "--manifest", str(path),
    )  # fmt: skip
    assert code == 0 and out["result"]["replaced"] is True
    old_b = '[[server]]\nname = "b"\ntransport = "stdio"\ncommand = "/bin/b"\n'
    new_b = (
        '[[server]]\nname = "b"\ntransport = "stdio"\ncommand = "/opt/b"\n'
        'approved_capabilities = ["prompts", "tools"]\n'
    )
    assert path.read_text() == STYLED.replace(old_b, new_b) + "\n"
    assert [s.name for s in load_manifest(path).servers] == ["a", "b", "c"]
    assert load_manifest(path).get("b").command == "/opt/b"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "verb", [["add", "z", "--transport", "stdio", "--command", "/bin/z"], ["remove", "b"]]
)
def test_a_malformed_file_is_refused_by_file_line_key_and_not_changed(
    capsys, tmp_path: Path, verb: list[str]
) -> None:
    path = tmp_path / "mcp.toml"
    # The fake [[server]] inside a's argument must not shift b's line numbers.
    bad = STYLED.replace(
        'command = "/bin/b"\n', 'command = "/bin/b"\ncall_timeout_seconds = "10"\n'
    )
    path.write_text(bad)
    line = bad.splitlines().index('call_timeout_seconds = "10"') + 1
    code, out = run(capsys, "mcp", *verb, "--manifest", str(path))
    assert code == 2 and out["error"]["code"] == "invalid_arguments"
    message = out["error"]["message"]
    assert message.startswith(f"{path}:{line}: server 'b': call_timeout_seconds: must be a number")
    assert path.read_text() == bad


def test_an_unknown_key_after_a_fake_table_names_its_real_line() -> None:
    text = STYLED.replace('command = "/bin/c"\n', 'command = "/bin/c"\ntimeout = 5\n')
    line = text.splitlines().index("timeout = 5") + 1
    with pytest.raises(InvalidArguments) as info:
        parse_manifest(text, "m.toml")
    assert info.value.message.startswith(f"m.toml:{line}: server 'c': timeout: unknown key")
    assert info.value.field == "timeout" and info.value.details["line"] == line


def test_the_sandbox_keys_are_declared_and_checked(capsys, tmp_path: Path) -> None:
    head = '[[server]]\nname = "s"\ntransport = "stdio"\ncommand = "/bin/s"\n'
    s = parse_manifest(head + 'sandbox = "local"\nsandbox_writable = true\n', "m").servers[0]
    assert s.sandbox is Sandbox.LOCAL and s.sandbox_writable and not s.sandbox_network
    plain = parse_manifest(head, "m").servers[0]
    assert (
        plain.sandbox is Sandbox.NONE and not plain.sandbox_network and not plain.sandbox_writable
    )
    for extra, key, words in (
        ('sandbox = "docker"\n', "sandbox", "must be one of none, local"),
        ("sandbox_network = true\n", "sandbox_network", 'only applies with sandbox = "local"'),
        ('sandbox = "local"\nsandbox_writable = "yes"\n', "sandbox_writable", "true or false"),
    ):
        with pytest.raises(InvalidArguments) as info:
            parse_manifest(head + extra, "m")
        assert info.value.field == key and words in info.value.message
        assert info.value.details["line"] == (head + extra).count("\n")
    remote = (
        '[[server]]\nname = "r"\ntransport = "http"\nurl = "https://h/mcp"\nsandbox = "local"\n'
    )
    with pytest.raises(InvalidArguments, match="m:5: server 'r': sandbox: only applies to stdio"):
        parse_manifest(remote, "m")
    path = tmp_path / "mcp.toml"
    code, out = run(
        capsys, "mcp", "add", "s", "--transport", "stdio", "--command", "/bin/s",
        "--sandbox", "local", "--sandbox-network", "--manifest", str(path),
    )  # fmt: skip
    assert code == 0, out
    saved = load_manifest(path).get("s")
    assert saved.sandbox is Sandbox.LOCAL and saved.sandbox_network and not saved.sandbox_writable
    code, out = run(
        capsys, "mcp", "add", "t", "--transport", "stdio", "--command", "/bin/t",
        "--sandbox-writable", "--manifest", str(path),
    )  # fmt: skip
    assert code == 2 and "sandbox_writable" in out["error"]["message"]
    assert "t" not in load_manifest(path)


@pytest.mark.parametrize("flag", ["--autonomous-tool", "--read-only-tool", "--allow-tool"])
def test_an_empty_tool_name_is_refused_naming_the_key(capsys, tmp_path: Path, flag: str) -> None:
    path = tmp_path / "mcp.toml"
    code, out = run(
        capsys, "mcp", "add", "x", "--transport", "stdio", "--command", "/bin/x",
        flag, "t", flag, "", "--manifest", str(path),
    )  # fmt: skip
    assert code == 2 and out["error"]["code"] == "invalid_arguments", out
    key = {"--autonomous-tool": "autonomous_tools", "--read-only-tool": "read_only_tools"}
    assert f"{key.get(flag, 'allow_tools')}: item 2 is empty" in out["error"]["message"]
    assert not path.exists()


# `mcp add` of a stdio server named x, as the policy-file tests give it.
ADD_X = ("mcp", "add", "x", "--transport", "stdio", "--command", "/bin/x")


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user policy file of a ringfence home of the test's own (not written yet)."""
    monkeypatch.setenv("RINGFENCE_HOME", str(tmp_path))
    return tmp_path / "policy.toml"


def test_trust_and_read_only_tools_go_to_the_user_policy_file(
    capsys, tmp_path: Path, policy: Path
) -> None:
    policy.write_text('# my rules\nask = ["run_shell(rm *)"]\n\n[mcp.other]\ntrusted = true\n')
    code, out = run(capsys, *ADD_X, "--trusted", "--read-only-tool", "read_*")
    assert code == 0 and out["result"]["policy"] == str(policy), out
    text = policy.read_text()
    assert text.startswith('# my rules\nask = ["run_shell(rm *)"]\n\n[mcp.other]\ntrusted = true')
    assert '[mcp.x]\ntrusted = true\nread_only_tools = ["read_*"]' in text
    manifest = (tmp_path / "mcp.toml").read_text()
    assert "trust" not in manifest and "read_only_tools" not in manifest
    code, out = run(capsys, "mcp", "list")
    assert [s["trust"] for s in out["result"]["servers"]] == ["trusted"]
    assert "warnings" not in out  # the manifest's old keys are not written, so nothing warns

    # A grant does not outlive its server: re-adding without the flags or removing clears it.
    code, out = run(capsys, *ADD_X)
    assert code == 0 and "[mcp.x]" not in policy.read_text()
    run(capsys, *ADD_X, "--trusted")
    code, out = run(capsys, "mcp", "remove", "x")
    assert code == 0 and out["result"]["policy"] == str(policy)
    code, out = run(capsys, *ADD_X)  # another server under the same name starts untrusted
    assert code == 0 and out["result"]["server"]["trust"] == "untrusted"
    code, out = run(capsys, "mcp", "list")
    assert [s["trust"] for s in out["result"]["servers"]] == ["untrusted"]
    assert "[mcp.other]\ntrusted = true" in policy.read_text()  # other servers untouched


def test_a_bad_policy_file_refuses_add_and_writes_neither_file(
    capsys, tmp_path: Path, policy: Path
) -> None:
    policy.write_text('ask = ["run_shell(rm *)"]\n[mcp.x]\ntrusted = "yes"\n')
    code, out = run(capsys, *ADD_X, "--trusted")
    assert code == 2 and out["error"]["code"] == "invalid_arguments", out
    assert f"{policy}:3" in out["error"]["message"]
    assert policy.read_text().endswith('trusted = "yes"\n')
    assert not (tmp_path / "mcp.toml").exists()
