"""The manifest: validation with file/line/key, no half-loading, in-place edits; URL rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ringfence.mcp_host import (
    Policy,
    ServerConfig,
    Transport,
    Trust,
    load_manifest,
    load_manifests,
    parse_manifest,
)
from ringfence.mcp_host._elicitation import credential_fields
from ringfence.mcp_host._urls import check_url, display_url
from ringfence.mcp_host.manifest._load import remove_server, save_server
from ringfence.runtime import InvalidArguments

GOOD = """\
# my servers
tool_discovery = false

[[server]]
name = "files"
transport = "stdio"
command = "/usr/local/bin/mcp-server-filesystem"
args = ["$WORKSPACE"]
inherit_env = ["GITHUB_TOKEN"]

[server.env]
LOG_LEVEL = "info"

# the remote one
[[server]]
name = "remote"
transport = "http"
url = "https://mcp.example.com/mcp?tenant=acme"
api_key_env = "REMOTE_KEY"
approved_capabilities = ["tools", "prompts", "resources"]
allow_tools = ["search_*"]
deny_tools = ["search_private"]
sampling_policy = "allow"
sampling_allowed_models = ["small"]
"""


def test_a_good_manifest_loads_whole() -> None:
    m = parse_manifest(GOOD, "mcp.toml")
    files, remote = m.servers
    assert files.transport is Transport.STDIO and files.args == ("$WORKSPACE",)
    assert files.env == {"LOG_LEVEL": "info"} and files.inherit_env == ("GITHUB_TOKEN",)
    assert files.approved_capabilities == {"tools", "prompts"}  # the default ceiling
    assert files.trust is Trust.UNTRUSTED and files.call_timeout_seconds == 60
    assert files.sampling_policy is Policy.DENY and files.elicitation_policy is Policy.DENY
    assert remote.allow_tools == ("search_*",) and remote.deny_tools == ("search_private",)
    assert files.origin == "mcp.toml:4" and remote.origin == "mcp.toml:15"
    assert files.expanded("/ws").args == ("/ws",)


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\ncall_timeout_seconds = "10"\n',
            5,
            "call_timeout_seconds",
            "number",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "carrier-pigeon"\ncommand = "x"\n',
            3,
            "transport",
            "stdio, http, sse",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\ndeny_tool = ["x"]\n',
            5,
            "deny_tool",
            "unknown key",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "http"\nurl = "http://example.com/mcp"\n',
            4,
            "url",
            "https",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "http"\nurl = "https://u:p@example.com/mcp"\n',
            4,
            "url",
            "credentials",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\nroots = ["relative/dir"]\n',
            5,
            "roots",
            "absolute",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\napproved_capabilities = ["tools", "everything"]\n',
            5,
            "approved_capabilities",
            "unknown capability",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\nsampling_policy = "allow"\n',
            1,
            "sampling_allowed_models",
            "models",
        ),
        (
            '[[server]]\nname = "bad name!"\ntransport = "stdio"\ncommand = "x"\n',
            2,
            "name",
            "letters",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "http"\nurl = "https://h/mcp"\n\n[server.headers_env]\nHost = "X"\n',
            7,
            "headers_env.Host",
            "transport",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "http"\nurl = "https://h/mcp"\n\n[server.headers_env]\nMcp-Session-Id = "X"\n',
            7,
            "headers_env.Mcp-Session-Id",
            "transport",
        ),
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\n\n[[server]]\nname = "A"\ntransport = "stdio"\ncommand = "y"\n',
            7,
            "name",
            "collides",
        ),
        ('[[server]]\nname = "a"\ntransport = "stdio"\n', 1, "command", "command"),
        (
            '[[server]]\nname = "a"\ntransport = "stdio"\ncommand = "x"\nurl = "https://h"\n',
            5,
            "url",
            "only applies",
        ),
    ],
)
def test_errors_name_file_line_and_key(text: str, line: int, key: str, words: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        parse_manifest(text, "/home/me/.ringfence/mcp.toml")
    error = info.value
    assert error.field == key
    assert error.message.startswith(f"/home/me/.ringfence/mcp.toml:{line}: ")
    assert words in error.message
    assert error.details["line"] == line


def test_toml_syntax_errors_name_the_line() -> None:
    with pytest.raises(InvalidArguments) as info:
        parse_manifest('[[server]]\nname = "a"\ntransport = stdio\n', "m.toml")
    assert info.value.message.startswith("m.toml:3: not valid TOML")


def test_an_error_in_one_server_loads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(GOOD + '\n[[server]]\nname = "broken"\ntransport = "stdio"\n')
    with pytest.raises(InvalidArguments):
        load_manifest(path)


def test_urls_never_appear_in_url_errors() -> None:
    with pytest.raises(InvalidArguments) as info:
        check_url("http://evil.example.com/mcp?token=s3cret")
    assert "s3cret" not in info.value.message and "evil.example.com" not in info.value.message


def test_url_rules() -> None:
    assert check_url("https://example.com/mcp")
    for loopback in (
        "http://127.0.0.1:9/mcp",
        "http://localhost/mcp",
        "http://[::1]:8/mcp",
        "http://127.8.9.1/",
    ):
        assert check_url(loopback) == loopback
    for bad in (
        "ftp://example.com/",
        "http://10.0.0.1/mcp",
        "https://user@example.com/",
        "https:///nohost",
        "https://example.com/mcp?<query not shown>",
        "https://example.com/mcp?a=1 ",
    ):
        with pytest.raises(InvalidArguments):
            check_url(bad)


def test_display_url_hides_query_and_fragment() -> None:
    assert display_url("https://h.example:8443/mcp?token=abc#frag") == (
        "https://h.example:8443/mcp?<query not shown>#<fragment not shown>"
    )
    assert display_url("https://h.example/mcp") == "https://h.example/mcp"


def test_save_and_remove_edit_in_place(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(GOOD)
    new = ServerConfig(
        name="extra",
        transport=Transport.STDIO,
        command="/bin/srv",
        args=("--x",),
        trust=Trust.TRUSTED,
    )
    m = save_server(new, path)
    assert [s.name for s in m.servers] == ["files", "remote", "extra"]
    text = path.read_text()
    assert "# my servers" in text and "# the remote one" in text  # comments survive
    assert load_manifest(path).get("extra").trust is Trust.TRUSTED

    replaced = ServerConfig(name="files", transport=Transport.STDIO, command="/opt/other")
    save_server(replaced, path)
    m = load_manifest(path)
    assert [s.name for s in m.servers] == ["files", "remote", "extra"]  # replaced where it was
    assert m.get("files").command == "/opt/other" and m.get("files").env == {}

    remove_server("remote", path)
    m = load_manifest(path)
    assert [s.name for s in m.servers] == ["files", "extra"]
    assert "# my servers" in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(InvalidArguments):
        remove_server("remote", path)


def test_a_broken_file_is_not_edited(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text("this is = = not toml")
    with pytest.raises(InvalidArguments):
        save_server(ServerConfig(name="x", transport=Transport.STDIO, command="/bin/x"), path)
    assert path.read_text() == "this is = = not toml"


def test_the_user_manifest_lives_in_ringfence_home(ringfence_home: Path) -> None:
    save_server(ServerConfig(name="x", transport=Transport.STDIO, command="/bin/x"))
    assert (ringfence_home / "mcp.toml").exists()
    assert [s.name for s in load_manifests().servers] == ["x"]


def test_workspace_manifest_joins_and_may_not_shadow(ringfence_home: Path, tmp_path: Path) -> None:
    save_server(ServerConfig(name="x", transport=Transport.STDIO, command="/bin/x"))
    ws = tmp_path / "ws"
    (ws / ".ringfence").mkdir(parents=True)
    (ws / ".ringfence" / "mcp.toml").write_text(
        '[[server]]\nname = "y"\ntransport = "stdio"\ncommand = "$WORKSPACE/bin/y"\n'
    )
    m = load_manifests(workspace=ws)
    assert [s.name for s in m.servers] == ["x", "y"]
    assert m.get("y").expanded(ws).command == os.path.join(str(ws), "bin/y")
    assert [s.name for s in load_manifests().servers] == ["x"]  # only when asked for
    (ws / ".ringfence" / "mcp.toml").write_text(
        '[[server]]\nname = "x"\ntransport = "stdio"\ncommand = "/evil"\n'
    )
    with pytest.raises(InvalidArguments) as info:
        load_manifests(workspace=ws)
    assert "also defined" in info.value.message


def test_credential_fields() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "apiKey": {"type": "string"},
            "pin": {"type": "string", "title": "PIN"},
            "note": {"type": "string", "description": "Enter your password here"},
            "favorite": {"type": "integer", "description": "do not give us your pin"},
        },
    }
    assert credential_fields(schema) == ["apiKey", "pin", "note"]
