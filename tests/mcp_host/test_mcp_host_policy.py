"""Per-server MCP policy in the policy files (``[mcp.<server>]``), through the command line.

Which of a server's tools are ``read`` (run unasked) and whether it is trusted now live
in the policy layers; a project can take either away but not grant it unless the user
trusts the project; the manifest's old keys still count for one release, with a warning.
Each session call starts the real in-repo SDK peer (``servers/annotated.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_host_helpers import PYTHON, SERVERS

from ringfence.cli import main

MANIFEST = f"""\
[[server]]
name = "notes"
transport = "stdio"
command = "{PYTHON}"
args = ["{SERVERS / "annotated.py"}"]
{{extra}}
[server.env]
RF_STATE_DIR = "{{state}}"
"""


@pytest.fixture(autouse=True)
def managed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "managed.toml"
    path.write_text("# no managed policy\n")
    monkeypatch.setenv("RINGFENCE_MANAGED_POLICY", str(path))
    monkeypatch.delenv("RINGFENCE_POSTURE", raising=False)
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".ringfence").mkdir(parents=True)
    return root


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


def manifest(home: Path, state: Path, extra: str = "") -> None:
    (home / "mcp.toml").write_text(MANIFEST.format(extra=extra, state=state))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


def call(capsys: pytest.CaptureFixture[str], ws: Path, tool: str, args: dict) -> tuple[int, dict]:
    """Posture ask and an approver that says no: only a ``read`` tool runs."""
    argv = ["call", f"mcp.notes.{tool}", "--args", json.dumps(args), "--mcp"]
    return run(capsys, *argv, "--workspace", str(ws), "--approve", "no")


def test_the_user_policy_names_read_tools_and_trust(
    capsys, ringfence_home: Path, ws: Path, state: Path
) -> None:
    manifest(ringfence_home, state)
    code, out = call(capsys, ws, "append_note", {"name": "a", "text": "one"})
    assert code == 3 and out["error"]["code"] == "denied"  # not read: it asks, and is refused
    assert not (state / "note-a.txt").exists()
    (ringfence_home / "policy.toml").write_text(
        '# my servers\n[mcp.notes]\nread_only_tools = ["append_*"]\ntrusted = true\n'
    )
    code, out = call(capsys, ws, "append_note", {"name": "a", "text": "one"})
    assert code == 0, out
    assert (state / "note-a.txt").read_text() == "one\n"
    # trusted: the server's readOnlyHint is believed (liar claims it), so it runs unasked too
    code, out = call(capsys, ws, "liar", {"path": "x"})
    assert code == 0, out
    assert (state / "liar.log").read_text() == "x\n"
    code, out = run(capsys, "policy", "show", "--workspace", str(ws))
    assert code == 0
    assert out["result"]["mcp"] == [
        {
            "server": "notes",
            "key": "read_only_tools",
            "value": ["append_*"],
            "layer": "user",
            "source": f"{ringfence_home / 'policy.toml'}:3",
        },
        {
            "server": "notes",
            "key": "trusted",
            "value": True,
            "layer": "user",
            "source": f"{ringfence_home / 'policy.toml'}:4",
        },
    ]
    assert main(["policy", "show", "--workspace", str(ws)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "notes: trusted = true" in x)
    assert line.split()[-2:] == ["user", f"{ringfence_home / 'policy.toml'}:4"]


def test_an_untrusted_project_cannot_grant_read_or_trust(
    capsys, ringfence_home: Path, ws: Path, state: Path
) -> None:
    manifest(ringfence_home, state)
    project = ws / ".ringfence" / "policy.toml"
    project.write_text('[mcp.notes]\nread_only_tools = ["*"]\ntrusted = true\n')
    code, out = call(capsys, ws, "append_note", {"name": "a", "text": "one"})
    assert code == 3 and out["error"]["code"] == "denied"
    code, out = call(capsys, ws, "liar", {"path": "x"})
    assert code == 3 and out["error"]["code"] == "denied"
    assert sorted(p.name for p in state.iterdir()) == []  # nothing ran
    code, out = run(capsys, "policy", "show", "--workspace", str(ws))
    shown = {m["key"]: m for m in out["result"]["mcp"]}
    assert shown["trusted"]["source"] == f"{project}:3" and shown["trusted"]["layer"] == "project"
    assert "take MCP read_only_tools/trust away" in shown["trusted"]["inactive"]
    assert "inactive" in shown["read_only_tools"]
    # Trusted by the user, the same file counts.
    (ringfence_home / "policy.toml").write_text(f'[trust]\nprojects = ["{ws}"]\n')
    code, out = call(capsys, ws, "append_note", {"name": "a", "text": "one"})
    assert code == 0, out


def test_a_project_takes_read_and_trust_away(
    capsys, ringfence_home: Path, ws: Path, state: Path
) -> None:
    # The grant is in the manifest (the old place) and in the user's policy file.
    manifest(ringfence_home, state, 'read_only_tools = ["append_note"]\ntrust = "trusted"\n')
    (ringfence_home / "policy.toml").write_text('[mcp.notes]\nread_only_tools = ["append_*"]\n')
    (ws / ".ringfence" / "policy.toml").write_text(
        "[mcp.notes]\nread_only_tools = []\ntrusted = false\n"
    )
    code, out = call(capsys, ws, "append_note", {"name": "a", "text": "one"})
    assert code == 3 and out["error"]["code"] == "denied"
    code, out = call(capsys, ws, "liar", {"path": "x"})
    assert code == 3 and out["error"]["code"] == "denied"
    assert sorted(p.name for p in state.iterdir()) == []


def test_the_managed_lock_makes_other_grants_inactive(
    capsys, ringfence_home: Path, ws: Path, state: Path, managed: Path
) -> None:
    manifest(ringfence_home, state)
    managed.write_text("lock_allow = true\n")
    (ringfence_home / "policy.toml").write_text('[mcp.notes]\nread_only_tools = ["*"]\n')
    code, out = call(capsys, ws, "append_note", {"name": "a", "text": "one"})
    assert code == 3 and not (state / "note-a.txt").exists()
    code, out = run(capsys, "policy", "show", "--workspace", str(ws))
    assert "lock_allow" in out["result"]["mcp"][0]["inactive"]


def test_old_manifest_keys_still_work_and_warn(
    capsys, ringfence_home: Path, ws: Path, state: Path
) -> None:
    manifest(ringfence_home, state, 'read_only_tools = ["append_note"]\n')
    code, out = run(capsys, "mcp", "list")
    assert code == 0
    (warning,) = out["warnings"]
    assert warning.startswith(f"{ringfence_home / 'mcp.toml'}:6: server 'notes': read_only_tools")
    assert "[mcp.notes] read_only_tools in $RINGFENCE_HOME/policy.toml" in warning
    events = ws.parent / "events.jsonl"
    code, out = call_with_events(capsys, ws, events)
    assert code == 0, out
    assert (state / "note-a.txt").read_text() == "one\n"
    kinds = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["message"] for e in kinds if e["kind"] == "mcp_manifest_warning"] == [warning]


def call_with_events(capsys, ws: Path, events: Path) -> tuple[int, dict]:
    argv = ["call", "mcp.notes.append_note", "--args", '{"name": "a", "text": "one"}', "--mcp"]
    return run(capsys, *argv, "--workspace", str(ws), "--approve", "no", "--events", str(events))


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ('[mcp.notes]\nread_only = ["x"]\n', 2, "mcp.notes.read_only", "unknown key"),
        ('[mcp.notes]\ntrusted = "yes"\n', 2, "mcp.notes.trusted", "true or false"),
        ('\n[mcp.notes]\nread_only_tools = "x"\n', 3, "mcp.notes.read_only_tools", "list"),
        ('[mcp."bad name"]\ntrusted = true\n', 1, "mcp.bad name", "server name"),
        ("mcp = 3\n", 1, "mcp", "tables"),
    ],
)
def test_a_bad_mcp_table_refuses_the_file_by_line_and_key(
    capsys, ringfence_home: Path, ws: Path, text: str, line: int, key: str, words: str
) -> None:
    policy = ringfence_home / "policy.toml"
    policy.write_text(text)
    code, out = run(capsys, "policy", "check", "--workspace", str(ws))
    assert code == 2, out
    message = out["error"]["message"]
    assert message.startswith(f"{policy}:{line}: {key}: ") and words in message
