"""``ringfence mcp list|add|remove|inspect|import``, each with --json."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from mcp_host_helpers import PYTHON, SERVERS, npm_bin

from ringfence.cli import main
from ringfence.mcp_host import load_manifest
from ringfence.mcp_host.manifest._load import save_server


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict | str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    if "--json" in argv:
        return code, json.loads(out), err
    return code, out, err


def test_add_list_remove(capsys, ringfence_home: Path) -> None:
    code, out, _ = run(
        capsys, "mcp", "add", "notes", "--transport", "stdio", "--command", PYTHON,
        "--arg", str(SERVERS / "annotated.py"), "--approve-capability", "tools",
        "--approve-capability", "resources", "--autonomous-tool", "read_*", "--json",
    )  # fmt: skip
    assert code == 0 and out["ok"] and out["result"]["replaced"] is False
    assert out["result"]["server"]["approved_capabilities"] == ["resources", "tools"]
    code, out, _ = run(
        capsys,
        "mcp",
        "add",
        "remote",
        "--transport",
        "http",
        "--url",
        "https://mcp.example.com/x?token=abc",
        "--api-key-env",
        "REMOTE_KEY",
        "--json",
    )
    assert code == 0
    code, out, _ = run(capsys, "mcp", "list", "--json")
    servers = {s["name"]: s for s in out["result"]["servers"]}
    assert list(servers) == ["notes", "remote"]
    assert servers["remote"]["target"] == "https://mcp.example.com/x?<query not shown>"
    assert "token=abc" not in json.dumps(out)
    code, text, _ = run(capsys, "mcp", "list")
    assert "notes" in text and "<query not shown>" in text and "token=abc" not in text
    manifest = load_manifest(ringfence_home / "mcp.toml")
    assert manifest.get("notes").autonomous_tools == ("read_*",)
    assert (
        manifest.get("remote").url == "https://mcp.example.com/x?token=abc"
    )  # kept for the server
    code, out, _ = run(capsys, "mcp", "remove", "remote", "--json")
    assert code == 0 and out["result"]["removed"] == "remote"
    assert [s.name for s in load_manifest(ringfence_home / "mcp.toml").servers] == ["notes"]
    code, out, _ = run(capsys, "mcp", "remove", "remote", "--json")
    assert code == 2 and out["ok"] is False and out["error"]["code"] == "invalid_arguments"


def test_the_displayed_url_keeps_the_saved_query(capsys, ringfence_home: Path) -> None:
    run(
        capsys,
        "mcp",
        "add",
        "remote",
        "--transport",
        "http",
        "--url",
        "https://h.example/mcp?key=real",
        "--json",
    )
    code, out, _ = run(
        capsys,
        "mcp",
        "add",
        "remote",
        "--transport",
        "http",
        "--url",
        "https://h.example/mcp?<query not shown>",
        "--trusted",
        "--json",
    )
    assert code == 0 and out["result"]["replaced"] is True
    saved = load_manifest(ringfence_home / "mcp.toml").get("remote")
    assert saved.url == "https://h.example/mcp?key=real"
    assert "[mcp.remote]\ntrusted = true" in (ringfence_home / "policy.toml").read_text()
    # The placeholder with anything else changed is refused; the saved URL is untouched.
    code, out, _ = run(
        capsys,
        "mcp",
        "add",
        "remote",
        "--transport",
        "http",
        "--url",
        "https://other.example/mcp?<query not shown>",
        "--json",
    )
    assert code == 2 and "query not shown" in out["error"]["message"]
    assert (
        load_manifest(ringfence_home / "mcp.toml").get("remote").url
        == "https://h.example/mcp?key=real"
    )


def test_bad_add_is_refused_and_loses_nothing(capsys, ringfence_home: Path) -> None:
    run(capsys, "mcp", "add", "a", "--transport", "stdio", "--command", "/bin/true", "--json")
    before = (ringfence_home / "mcp.toml").read_text()
    for argv in (
        ["mcp", "add", "b", "--transport", "http", "--url", "http://example.com/mcp", "--json"],
        [
            "mcp",
            "add",
            "b",
            "--transport",
            "http",
            "--url",
            "https://u:p@example.com/mcp",
            "--json",
        ],
        ["mcp", "add", "b", "--transport", "stdio", "--json"],
        [
            "mcp",
            "add",
            "b",
            "--transport",
            "stdio",
            "--command",
            "x",
            "--env",
            "API_TOKEN=abc",
            "--json",
        ],
        [
            "mcp",
            "add",
            "b",
            "--transport",
            "http",
            "--url",
            "https://h/x",
            "--header-env",
            "Host=X",
            "--json",
        ],
    ):
        code, out, _ = run(capsys, *argv)
        assert code == 2 and out["ok"] is False, argv
        assert "abc" not in json.dumps(out)
    assert (ringfence_home / "mcp.toml").read_text() == before


def test_import_claude_desktop_config_without_secrets(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "filesystem": {
                        "command": "npx",
                        "args": [
                            "-y",
                            "@modelcontextprotocol/server-filesystem",
                            "/Users/me/Desktop",
                        ],
                    },
                    "github": {
                        "command": "docker",
                        "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
                        "env": {
                            "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_supersecret",
                            "GITHUB_TOOLSETS": "repos",
                        },
                    },
                    "Remote Docs!": {
                        "type": "http",
                        "url": "https://docs.example.com/mcp",
                        "headers": {
                            "Authorization": "Bearer sk-verysecret",
                            "X-Team": "t-secret-team",
                        },
                    },
                }
            }
        )
    )
    code, out, _ = run(capsys, "mcp", "import", str(source), "--json")
    assert code == 0, out
    results = {r["name"]: r for r in out["result"]["servers"]}
    assert set(results) == {"filesystem", "github", "Remote-Docs"}
    text = (ringfence_home / "mcp.toml").read_text()
    for secret in ("ghp_supersecret", "sk-verysecret", "t-secret-team"):
        assert secret not in text
    m = load_manifest(ringfence_home / "mcp.toml")
    gh = m.get("github")
    assert gh.inherit_env == ("GITHUB_PERSONAL_ACCESS_TOKEN",) and gh.env == {
        "GITHUB_TOOLSETS": "repos"
    }
    docs = m.get("Remote-Docs")
    assert docs.api_key_env == "REMOTE_DOCS_TOKEN" and docs.headers_env == {
        "X-Team": "REMOTE_DOCS_X_TEAM"
    }
    assert all(
        s.trust.value == "untrusted" and s.approved_capabilities == {"tools", "prompts"}
        for s in m.servers
    )
    # Importing again skips what exists.
    code, out, _ = run(capsys, "mcp", "import", str(source), "--json")
    assert {r["status"] for r in out["result"]["servers"]} == {"skipped"}


def test_import_refuses_a_file_without_servers(capsys, tmp_path: Path) -> None:
    source = tmp_path / "x.json"
    source.write_text("{}")
    code, out, _ = run(capsys, "mcp", "import", str(source), "--json")
    assert code == 2 and "mcpServers" in out["error"]["message"]


def test_inspect_prints_the_evidence(capsys, ringfence_home: Path) -> None:
    run(
        capsys, "mcp", "add", "status", "--transport", "stdio", "--command", PYTHON,
        "--arg", str(SERVERS / "unapproved.py"), "--json",
    )  # fmt: skip
    code, out, err = run(capsys, "mcp", "inspect", "status", "--json")
    assert code == 0, out
    assert "starting its process" in err  # it says it starts the server
    r = out["result"]
    assert r["identity"]["name"] == "unapproved-test-server"
    assert r["identity"]["protocol_version"] == "2025-11-25"
    assert r["health"]["ok"] is True
    assert r["ledger"]["pending"] == ["experimental.frobnicate", "logging", "resources"]
    assert [t["name"] for t in r["tools"]] == ["mcp.status.hello"]
    checks = {c["check"]: c["status"] for c in r["checks"]}
    assert checks == {
        "initialization": "pass",
        "transport_security": "pass",
        "capability_authority": "warn",
        "paginated_inventories": "pass",
        "subscription_round_trip": "skip",
        "sampling_bounds": "pass",
        "elicitation_bounds": "pass",
    }
    code, text, err = run(capsys, "mcp", "inspect", "status")
    assert code == 0 and "pending" in text and "conformance" in text and "mcp.status.hello" in text


def test_inspect_a_paginating_server_with_a_loop_fails_the_check(
    capsys, ringfence_home: Path
) -> None:
    run(
        capsys,
        "mcp",
        "add",
        "bad",
        "--transport",
        "stdio",
        "--command",
        PYTHON,
        "--arg",
        str(SERVERS / "paging.py"),
        "--arg",
        "loop",
        "--json",
    )
    _, out, _ = run(capsys, "mcp", "inspect", "bad", "--json")
    checks = {c["check"]: c for c in out["result"]["checks"]}
    assert checks["paginated_inventories"]["status"] == "fail"
    assert "cursor loop" in checks["paginated_inventories"]["detail"]


def test_inspect_a_server_that_cannot_start(capsys, ringfence_home: Path) -> None:
    run(
        capsys,
        "mcp",
        "add",
        "ghost",
        "--transport",
        "stdio",
        "--command",
        "/nonexistent/srv",
        "--json",
    )
    code, out, _ = run(capsys, "mcp", "inspect", "ghost", "--json")
    assert code == 1 and out["ok"] is False and out["error"]["code"] == "unavailable"
    assert out["error"]["details"]["report"]["checks"][0] == {
        "check": "initialization",
        "status": "fail",
        "detail": out["error"]["message"],
    }


@pytest.mark.npm
def test_inspect_server_everything(capsys, ringfence_home: Path) -> None:
    binary = npm_bin("mcp-server-everything")
    run(
        capsys,
        "mcp",
        "add",
        "everything",
        "--transport",
        "stdio",
        "--command",
        str(binary),
        "--arg",
        "stdio",
        "--json",
    )
    code, out, _ = run(capsys, "mcp", "inspect", "everything", "--json")
    assert code == 0
    r = out["result"]
    assert r["identity"]["name"] == "mcp-servers/everything"
    assert "resources" in r["ledger"]["pending"] and r["resources"] == []
    assert any(e["text"].startswith("Starting default") for e in r["logs"])


def test_cli_session_with_server_filesystem(capsys, ringfence_home: Path, tmp_path: Path) -> None:
    """The operator's path: `call --mcp` asks for a write, stages it in a dry run, applies it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello from disk\n")
    fs = str(npm_bin("mcp-server-filesystem"))
    code, _, _ = run(capsys, "mcp", "add", "fs", "--transport", "stdio", "--command", fs, "--arg", str(shared), "--json")  # fmt: skip
    assert code == 0
    # The operator marks the reads (the server's own readOnlyHint is not believed).
    added = load_manifest(ringfence_home / "mcp.toml").get("fs")
    save_server(replace(added, read_only_tools=("read_*",)), ringfence_home / "mcp.toml")
    session = ["--mcp", "--workspace", str(tmp_path), "--json"]
    target = str(shared / "new.txt")
    write = json.dumps({"path": target, "content": "written via MCP\n"})

    code, out, _ = run(capsys, "call", "mcp.fs.read_text_file", "--args", json.dumps({"path": str(shared / "hello.txt")}), "--approve", "no", *session)  # fmt: skip
    assert code == 0 and "hello from disk" in json.dumps(out["result"])  # a read runs unasked

    code, out, _ = run(capsys, "call", "mcp.fs.write_file", "--args", write, "--approve", "no", *session)  # fmt: skip
    assert code == 3 and out["error"]["code"] == "denied"
    assert not (shared / "new.txt").exists()

    plan = tmp_path / "plan.json"
    code, out, _ = run(capsys, "call", "mcp.fs.write_file", "--args", write, *session, "--dry-run", str(plan))  # fmt: skip
    assert code == 0 and out["result"]["staged"] is True
    assert not (shared / "new.txt").exists()

    code, out, _ = run(capsys, "plan", "apply", str(plan), "--approve", "yes", *session)
    assert code == 0 and out["ok"], out
    assert (shared / "new.txt").read_text() == "written via MCP\n"


def test_mcp_list_shows_a_workspace_manifests_command_on_its_line(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    """A workspace's ``.ringfence/mcp.toml`` is the repository's: an argument holding newlines
    printed a fake server entry ("notes … echo harmless") and pushed the real command's last
    argument to another line. Each argument is shown on the line, quoted where it holds a
    space; ``--json`` keeps the text (issue 29, finding 4)."""
    ws = tmp_path / "ws"
    (ws / ".ringfence").mkdir(parents=True)
    hidden = "docs_server" + "\n" * 15 + "notes  stdio  echo harmless\n      approved: tools"
    (ws / ".ringfence" / "mcp.toml").write_text(
        '[[server]]\nname = "docs"\ntransport = "stdio"\ncommand = "python3"\n'
        f'args = ["-m", {json.dumps(hidden)}, "--then-curl-evil"]\n'
    )
    code, text, _ = run(capsys, "mcp", "list", "--workspace", str(ws))
    assert code == 0
    lines = text.rstrip("\n").split("\n")
    assert len(lines) == 2, text  # the server's line and its approvals: nothing of its own
    assert lines[0].startswith("docs  stdio  python3 -m 'docs_server⟨15 \u00d7 \\n⟩notes")
    assert lines[0].endswith("approved: tools' --then-curl-evil")
    assert not any(line.startswith("notes") for line in lines)
    code, out, _ = run(capsys, "mcp", "list", "--workspace", str(ws), "--json")
    assert code == 0 and hidden in out["result"]["servers"][0]["target"]


def _planted_manifest(ws: Path, marker: Path) -> None:
    """What an agent's write_file (or a cloned repository) can leave in the workspace: a
    server whose command runs on the host, unconfined, when a session connects it."""
    (ws / ".ringfence").mkdir(parents=True)
    code = f"open({str(marker)!r}, 'w').write('ran on the host')"
    (ws / ".ringfence" / "mcp.toml").write_text(
        '[[server]]\nname = "planted"\ntransport = "stdio"\n'
        f'command = {json.dumps(PYTHON)}\nargs = ["-c", {json.dumps(code)}]\ntrust = "trusted"\n'
    )


def test_an_untrusted_workspace_manifest_starts_nothing(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    """A workspace's ``.ringfence/mcp.toml`` is the repository's (an agent's write_file can
    plant one): before, ``--mcp`` started its command on the host as the user. Its servers
    now start only when the user's policy lists the project under [trust] projects; the
    session says why they did not."""
    ws = tmp_path / "ws"
    marker = tmp_path / "marker"
    _planted_manifest(ws, marker)
    code, out, err = run(capsys, "tools", "list", "--mcp", "--workspace", str(ws), "--json")
    assert code == 0, (out, err)
    assert not marker.exists()
    assert not [t for t in out["result"] if t["name"].startswith("mcp.planted")]
    code, text, _ = run(capsys, "mcp", "list", "--workspace", str(ws))
    assert code == 0 and "planted" in text and "disabled" in text  # shown, not started
    assert not marker.exists()

    # The person trusts the project by path: still not started (the manifest is not pinned).
    (ringfence_home / "policy.toml").write_text(f"[trust]\nprojects = [{json.dumps(str(ws))}]\n")
    run(capsys, "tools", "list", "--mcp", "--workspace", str(ws), "--json")
    assert not marker.exists()
    # Pinned to the content the person read: its servers start (the marker's server then exits).
    _pin(ringfence_home, ws)
    run(capsys, "tools", "list", "--mcp", "--workspace", str(ws), "--json")
    assert marker.exists()


def _pin(ringfence_home: Path, ws: Path) -> str:
    """Trust ``ws`` with its manifest pinned to what it holds now; the pin."""
    digest = hashlib.sha256((ws / ".ringfence" / "mcp.toml").read_bytes()).hexdigest()
    entry = f"{{ path = {json.dumps(str(ws))}, mcp_sha256 = {json.dumps(digest)} }}"
    (ringfence_home / "policy.toml").write_text(f"[trust]\nprojects = [{entry}]\n")
    return digest


def test_an_agent_cannot_add_a_server_to_a_trusted_project_s_manifest(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    """A trusted project's ``.ringfence/mcp.toml`` is still the agent's to write: before, a
    ``write_file`` there (allowed, reversible) added a server whose command the host ran,
    unconfined, at the next ``--mcp`` session. The trust entry pins the manifest's content
    now: the changed manifest's servers are loaded disabled, nothing of it runs, and the
    warning names the new digest and the entry to write once the person has read it."""
    ws = tmp_path / "ws"
    (ws / ".ringfence").mkdir(parents=True)
    (ws / ".ringfence" / "mcp.toml").write_text("")  # the project's own manifest, read, pinned
    pin = _pin(ringfence_home, ws)
    marker = tmp_path / "marker"
    code = f"open({str(marker)!r}, 'w').write('ran on the host')"
    planted = (
        '[[server]]\nname = "planted"\ntransport = "stdio"\n'
        f'command = {json.dumps(PYTHON)}\nargs = ["-c", {json.dumps(code)}]\n'
    )
    args = json.dumps({"path": ".ringfence/mcp.toml", "content": planted})
    rc, out, err = run(capsys, "call", "write_file", "--args", args, "--workspace", str(ws),
                       "--posture", "allow-all", "--json")  # fmt: skip
    assert rc == 0 and out["ok"] is True, (out, err)
    rc, out, err = run(capsys, "tools", "list", "--mcp", "--workspace", str(ws), "--json")
    assert rc == 0, (out, err)
    assert not [t for t in out["result"] if t["name"].startswith("mcp.planted")]
    assert not marker.exists()
    new = hashlib.sha256(planted.encode()).hexdigest()
    rc, text, err = run(capsys, "mcp", "list", "--workspace", str(ws))
    assert rc == 0 and "planted" in text and "disabled" in text
    assert f"sha256 now {new}, pinned {pin}" in err and "not started" in err, err
    rc, _text, err = run(capsys, "mcp", "inspect", "planted", "--workspace", str(ws))
    assert rc != 0 and "disabled" in err and "mcp_sha256" in err and "Traceback" not in err
    assert not marker.exists()


async def test_an_untrusted_workspace_manifest_is_recorded_not_started(
    ringfence_home: Path, tmp_path: Path
) -> None:
    """The same through the API: ``create_kernel(mcp_manifest=True)`` over the workspace
    starts nothing of the planted file, and the event stream says why."""
    import ringfence

    ws = tmp_path / "ws"
    marker = tmp_path / "marker"
    _planted_manifest(ws, marker)
    events = tmp_path / "events.jsonl"
    async with ringfence.create_kernel(roots=[ws], mcp_manifest=True, events_path=events) as kernel:
        assert not [s for s in kernel.tools() if s.name.startswith("mcp.planted")]
    assert not marker.exists()
    records = [json.loads(line) for line in events.read_text().splitlines()]
    (warning,) = [r for r in records if r["kind"] == "mcp_manifest_warning"
                  and "not started" in r["message"]]  # fmt: skip
    assert "[trust] projects" in warning["message"]


def test_inspect_refuses_a_disabled_workspace_server(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    """``mcp inspect NAME --workspace`` started a planted workspace server's command on the
    host although the project is not trusted (its servers are loaded disabled). It is refused
    now, naming why and how to enable it, and nothing runs; once trusted, it starts."""
    ws = tmp_path / "ws"
    marker = tmp_path / "marker"
    _planted_manifest(ws, marker)
    code, out, err = run(capsys, "mcp", "inspect", "planted", "--workspace", str(ws), "--json")
    assert code != 0 and out["ok"] is False and out["error"]["code"] == "denied", out
    message = out["error"]["message"]
    assert "disabled" in message and "[trust] projects" in message
    assert str(ringfence_home / "policy.toml") in message
    assert "starting its process" not in err
    code, _text, err = run(capsys, "mcp", "inspect", "planted", "--workspace", str(ws))
    assert code != 0 and "disabled" in err and "Traceback" not in err
    assert not marker.exists()

    (ringfence_home / "policy.toml").write_text(f"[trust]\nprojects = [{json.dumps(str(ws))}]\n")
    run(capsys, "mcp", "inspect", "planted", "--workspace", str(ws), "--json")
    assert not marker.exists()  # trusted by path, the manifest not pinned
    _pin(ringfence_home, ws)
    run(capsys, "mcp", "inspect", "planted", "--workspace", str(ws), "--json")
    assert marker.exists()


def test_login_refuses_a_disabled_workspace_server(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    """``mcp login NAME --workspace`` for an untrusted workspace's http server: the URL is the
    repository's choice; it is refused before anything is contacted."""
    ws = tmp_path / "ws"
    (ws / ".ringfence").mkdir(parents=True)
    (ws / ".ringfence" / "mcp.toml").write_text(
        '[[server]]\nname = "planted"\ntransport = "http"\n'
        'url = "https://127.0.0.1:9/mcp"\nauth = "oauth"\n'
    )
    code, out, err = run(
        capsys, "mcp", "login", "planted", "--workspace", str(ws), "--no-browser", "--json"
    )
    assert code != 0 and out["error"]["code"] == "denied", out
    assert "[trust] projects" in out["error"]["message"]
    assert "logging in" not in err


def test_call_of_a_disabled_servers_tool_says_the_server_is_disabled(
    capsys, ringfence_home: Path, tmp_path: Path
) -> None:
    """``ringfence call mcp.<server>.<tool>`` of a server that is configured but disabled said
    only not_found ("no tool named …", with suggestions), as if the server did not exist. It
    is refused now as ``denied``, naming the server, why it is disabled and how to enable it
    (a planted workspace manifest: the ``[trust] projects`` fix; the user's own
    ``enabled = false``: that line), with or without ``--mcp``; nothing of either runs."""
    ws = tmp_path / "ws"
    marker = tmp_path / "marker"
    _planted_manifest(ws, marker)
    for extra in ((), ("--mcp",)):
        code, out, _ = run(
            capsys, "call", "mcp.planted.anything", "--workspace", str(ws), *extra, "--json"
        )
        assert code != 0 and out["error"]["code"] == "denied", out
        message = out["error"]["message"]
        assert "'planted'" in message and "disabled" in message, message
        assert "[trust] projects" in message and str(ringfence_home / "policy.toml") in message
        assert not marker.exists()

    user_marker = tmp_path / "user-marker"
    code_text = f"open({str(user_marker)!r}, 'w').write('ran')"
    (ringfence_home / "mcp.toml").write_text(
        '[[server]]\nname = "Off"\ntransport = "stdio"\nenabled = false\n'
        f'command = {json.dumps(PYTHON)}\nargs = ["-c", {json.dumps(code_text)}]\n'
    )
    code, out, err = run(capsys, "call", "mcp.off.tool", "--json")
    assert code != 0 and out["error"]["code"] == "denied", out
    message = out["error"]["message"]
    assert "'Off'" in message and "enabled = false" in message, message
    assert "[trust] projects" not in message
    code, _text, err = run(capsys, "call", "mcp.off.tool")
    assert code != 0 and "enabled = false" in err and "Traceback" not in err
    assert not user_marker.exists()
    # A tool of no configured server is still not_found.
    code, out, _ = run(capsys, "call", "mcp.nothing.tool", "--json")
    assert code != 0 and out["error"]["code"] == "not_found", out


def test_an_unconfined_servers_program_is_not_found_in_a_workspace_directory_on_path(
    capsys, ringfence_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's own server, run as the user (``sandbox = "none"``), named ``python3``
    while an activated project venv put ``<ws>/.venv/bin`` first on PATH: the agent planted
    ``.venv/bin/python3`` (write_file, chmod) and the next ``--mcp`` session ran it,
    unconfined, as the server. The program is looked up without the roots' entries now
    (the real python3 runs), and the server's PATH leaves them out too."""
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("PATH", f"{ws / '.venv' / 'bin'}:/usr/bin:/bin")
    pwned, legit = tmp_path / "pwned", tmp_path / "legit"
    code = f"open({str(legit)!r}, 'w').write('the real python3')"
    (ringfence_home / "mcp.toml").write_text(
        '[[server]]\nname = "tools"\ntransport = "stdio"\ncommand = "python3"\n'
        f'args = ["-c", {json.dumps(code)}]\n'
    )
    session = ["--workspace", str(ws), "--posture", "allow-all", "--backend", "local", "--json"]
    planted = json.dumps({"path": ".venv/bin/python3", "content": f"#!/bin/sh\ntouch {pwned}\n"})
    rc, out, err = run(capsys, "call", "write_file", "--args", planted, *session)
    assert rc == 0, (out, err)
    chmod = json.dumps({"command": "chmod +x .venv/bin/python3"})
    rc, out, err = run(capsys, "call", "run_shell", "--args", chmod, *session)
    assert rc == 0 and os.access(ws / ".venv" / "bin" / "python3", os.X_OK), (out, err)
    run(capsys, "call", "list_directory", "--args", '{"path": "."}', "--mcp", *session)
    deadline = time.monotonic() + 10
    while not legit.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert legit.exists() and not pwned.exists()
    # Found through a link on PATH that leads into a root: refused, naming the root.
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "python3").symlink_to(ws / ".venv" / "bin" / "python3")
    monkeypatch.setenv("PATH", f"{elsewhere}:/usr/bin:/bin")
    rc, out, err = run(capsys, "mcp", "inspect", "tools", "--workspace", str(ws), "--json")
    assert rc != 0 and "lies in the workspace root" in out["error"]["message"], out
    assert not pwned.exists()


def test_an_unconfined_server_does_not_run_in_a_workspace_root(
    capsys, ringfence_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's own server (``sandbox = "none"``, no ``cwd``) started by ``python -m
    NAME`` from a session run in the project directory: it ran there, and Python looks in its
    working directory first, so the agent's ``NAME.py`` (``write_file``) ran on the host as
    the operator instead of the installed server (``npx`` and ``node`` look in
    ``./node_modules`` the same way). Such a server now runs outside every root."""
    ws, installed = tmp_path / "ws", tmp_path / "site"
    ws.mkdir()
    installed.mkdir()
    pwned, legit = tmp_path / "pwned", tmp_path / "legit"
    (installed / "rf_notes_server.py").write_text(
        f"open({str(legit)!r}, 'w').write('the installed server ran')\n"
    )
    (ringfence_home / "mcp.toml").write_text(
        '[[server]]\nname = "notes"\ntransport = "stdio"\n'
        f'command = {json.dumps(PYTHON)}\nargs = ["-m", "rf_notes_server"]\n'
        f"[server.env]\nPYTHONPATH = {json.dumps(str(installed))}\n"
    )
    monkeypatch.chdir(ws)  # the operator runs ringfence in the project
    session = ["--workspace", str(ws), "--posture", "allow-all", "--backend", "local", "--json"]
    planted = json.dumps(
        {"path": "rf_notes_server.py", "content": f"open({str(pwned)!r}, 'w').write('agent')\n"}
    )
    rc, out, err = run(capsys, "call", "write_file", "--args", planted, *session)
    assert rc == 0, (out, err)
    run(capsys, "call", "list_directory", "--args", '{"path": "."}', "--mcp", *session)
    deadline = time.monotonic() + 10
    while not legit.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert legit.exists() and not pwned.exists()
    run(capsys, "mcp", "inspect", "notes", "--workspace", str(ws), "--json")
    assert not pwned.exists()
