"""Operator experience through the ``ringfence`` command: help, --version, the one --json
shape, --args @FILE/-, suggestions for unknown tools, the approver check, ``events show``.

Most tests call ``ringfence.cli._main.main`` in-process (the same parser and boundary
as the installed command); the few that need a real process, stdin or argv limits
run ``python -m ringfence``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    isolated,  # noqa: F401  (autouse fixture)
    ringfence_process,
    uncovered,
)

import ringfence
from ringfence import create_kernel
from ringfence.cli._main import build_parser, main
from ringfence.runtime import ApprovalAnswer, ApprovalRequest, ScriptedApprover


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(capsys, *argv, "--json")
    body = json.loads(out)  # exactly one JSON document on stdout
    assert_shape(body)
    assert "Traceback" not in err
    return code, body


def assert_shape(body: Any) -> None:
    """The documented --json shape: {"ok", "result"|"error", "warnings"?}."""
    assert isinstance(body, dict), body
    assert isinstance(body.get("ok"), bool), body
    key = "result" if body["ok"] else "error"
    assert set(body) - {"warnings"} == {"ok", key}, body
    if not body["ok"]:
        assert isinstance(body["error"]["code"], str) and body["error"]["message"], body
    if "warnings" in body:
        assert body["warnings"] and all(isinstance(w, str) for w in body["warnings"])


# --- help and version --------------------------------------------------------------------


def test_version_prints_the_package_version() -> None:
    result = ringfence_process("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"ringfence {ringfence.__version__}"


def test_top_level_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 ok", "1 the tool failed", "2 usage error", "3 denied by policy or approver"):
        assert code in text


def _parsers(parser: argparse.ArgumentParser, prog: str = "ringfence"):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{prog} {name}")


def test_every_option_and_argument_has_a_help_line() -> None:
    missing = [
        f"{prog}: {'/'.join(a.option_strings) or a.dest}"
        for prog, parser in _parsers(build_parser())
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
        and not (a.help or "").strip()
    ]
    assert missing == []


def test_parse_errors_are_one_line_and_json_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "call")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "tool" in err and "Traceback" not in err
    code, body = run_json(capsys, "serve", "--transport", "carrier-pigeon")
    assert code == 2 and body["error"]["code"] == "invalid_arguments"
    assert "carrier-pigeon" in body["error"]["message"]


# --- one --json shape for every verb -----------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit (a worktree session needs a HEAD to branch from)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "tracked.txt").write_text("one\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for argv in (["init", "-q"], ["add", "tracked.txt"], ["commit", "-q", "-m", "one"]):
        subprocess.run([*git, *argv], check=True)
    return root


# What a case may expect: an exit code, or any of several (images list needs Docker).
Expected = int | tuple[int, ...]


def test_every_verb_prints_the_one_json_shape(
    ws: Path, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every (sub)command of the real parser, with --json: one {"ok", "result"|"error"} object.

    Each has a success case, or (serve, images build, mcp login: they would serve,
    build for minutes, or need an OAuth server) its documented refusal. Arguments
    may name ``{checkpoint}`` and ``{trace}``: taken from earlier results.
    """
    events = tmp_path / "events.jsonl"
    plan = tmp_path / "plan.json"
    common = ["--workspace", str(ws), "--backend", "local", "--approve", "yes"]
    manifest = ["--manifest", str(tmp_path / "mcp.toml")]
    script = tmp_path / "script.py"
    script.write_text("print('hi')\nresult = 1\n")
    client_config = tmp_path / "claude.json"
    client_config.write_text(json.dumps({"mcpServers": {"imp": {"command": "/bin/true"}}}))
    status_server = str(Path(__file__).parents[1] / "mcp_host" / "servers" / "unapproved.py")
    in_repo = ["--workspace", str(repo)]
    plugin = tmp_path / "plugin"
    (plugin / "skills" / "s").mkdir(parents=True)
    (plugin / "ringfence-plugin.toml").write_text('name = "p"\nversion = "1"\nskills = "skills"\n')
    (plugin / "skills" / "s" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nhi\n")
    plugins = ["--config", str(tmp_path / "plugins.toml")]
    cases: list[tuple[list[str], Expected]] = [
        (["tools", "list", *common], 0),
        (["tools", "stubs", *common], 0),
        (["call", "read_file", "--args", '{"path": "notes.txt"}', *common], 0),
        (["call", "read_file", "--args", '{"path": "nope"}', *common], 1),
        (
            [
                "call",
                "write_file",
                "--args",
                '{"path": "a", "content": "x"}',
                "--dry-run",
                str(plan),
                *common,
            ],
            0,
        ),
        (["plan", "show", str(plan)], 0),
        (["plan", "apply", str(plan), *common, "--events", str(events)], 0),
        (["events", "verify", str(events)], 0),
        (["events", "show", str(events)], 0),
        (["events", "show", str(events), "--trace", "{trace}"], 0),
        (["checkpoints", "list", "--workspace", str(ws)], 0),
        (["recover", "--workspace", str(ws)], 0),
        (["checkpoints", "show", "{checkpoint}", "--workspace", str(ws)], 0),
        (["undo", "--last", "1", *common], 0),
        (
            [
                "call",
                "write_file",
                "--args",
                '{"path": "w.txt", "content": "x"}',
                "--worktree",
                "wt1",
                *in_repo,
                "--backend",
                "local",
                "--approve",
                "yes",
            ],
            0,
        ),
        (["worktree", "list", *in_repo], 0),
        (["worktree", "diff", "wt1", *in_repo], 0),
        (["worktree", "remove", "wt1", "--force", *in_repo], 0),
        (["policy", "show", "--workspace", str(ws)], 0),
        (["policy", "check", "--workspace", str(ws)], 0),
        (["policy", "accept", "--workspace", str(ws)], 0),
        (["policy", "explain", "read_file", "--args", '{"path": "x"}', *common], 0),
        (["mcp", "list", *manifest], 0),
        (["mcp", "add", "demo", "--transport", "stdio", "--command", "/bin/true", *manifest], 0),
        (
            [
                "mcp",
                "add",
                "status",
                "--transport",
                "stdio",
                "--command",
                sys.executable,
                "--arg",
                status_server,
                *manifest,
            ],
            0,
        ),
        (
            [
                "mcp",
                "add",
                "oa",
                "--transport",
                "http",
                "--url",
                "https://mcp.example.com/mcp",
                "--auth",
                "oauth",
                *manifest,
            ],
            0,
        ),
        (["mcp", "inspect", "status", *manifest], 0),
        (["mcp", "inspect", "demo", "--timeout-seconds", "5", *manifest], 1),  # exits at once
        (["mcp", "login", "demo", "--no-browser", *manifest], 2),  # stdio: needs no login
        (["mcp", "logout", "oa", *manifest], 0),
        (["mcp", "import", str(client_config), *manifest], 0),
        (["mcp", "remove", "demo", *manifest], 0),
        (["serve", "--transport", "http", "--port", "99999", *common], 2),
        (["review", "--port", "99999", "--workspace", str(ws)], 2),
        (["plugin", "add", str(plugin), *plugins], 0),
        (["plugin", "list", *plugins], 0),
        (["plugin", "show", "p", *plugins], 0),
        (["plugin", "trust", "p", *plugins], 0),
        (["skills", "list", *plugins], 0),
        (["skills", "show", "p:s", *plugins], 0),
        (["plugin", "remove", "p", *plugins], 0),
        (["images", "list"], (0, 1)),  # 1 (unavailable) where Docker is not running
        (["images", "build", "no_such_image"], 2),
        (["doctor", "--backend", "local"], 0),
        (["bench", "--list"], 0),
        (["run-script", str(script), "--timeout", "20", *common], 0),
    ]
    assert uncovered(argv for argv, _ in cases) == []
    found: dict[str, str] = {}
    for template, expected in cases:
        argv = [a.format(**found) if "{" in a and not a.startswith('{"') else a for a in template]
        code, body = run_json(capsys, *argv)
        allowed = expected if isinstance(expected, tuple) else (expected,)
        assert code in allowed, (argv, body)
        assert body["ok"] is (code == 0), (argv, body)
        if argv[:2] == ["events", "show"] and "trace" not in found:
            found["trace"] = body["result"]["sessions"][0]["calls"][0]["trace_id"]
        if argv[:2] == ["checkpoints", "list"]:
            found["checkpoint"] = body["result"][0]["id"]
    assert not (ws / "a").exists()  # undone
    # A tampered file: ok false, the report under error.details.
    events.write_text(events.read_text().replace('"write_file"', '"wrote_file"', 1))
    code, body = run_json(capsys, "events", "verify", str(events))
    assert code == 1 and body["error"]["details"]["report"]["problems"]


def test_tools_list_cuts_descriptions_at_a_sentence(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "tools", "list", "--workspace", str(ws), "--backend", "local")
    assert code == 0
    for line in out.splitlines():
        summary = line.removesuffix(" (asks first)")
        assert summary.endswith((".", "…")), line
    listing = next(x for x in out.splitlines() if x.startswith("list_directory"))
    assert listing.rstrip().endswith("sorted by name.")


# --- arguments: @FILE, stdin, long values ------------------------------------------------


def test_args_from_a_file_beyond_the_os_argument_limit(ws: Path, tmp_path: Path) -> None:
    content = "x" * (200 * 1024)  # one argv string may hold at most 128 KiB on Linux
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"path": "big.txt", "content": content}))
    result = ringfence_process("call", "write_file", "--args", f"@{args}", "--workspace", str(ws),
                               "--approve", "yes", "--json", cwd=ws)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (ws / "big.txt").read_text() == content


def test_args_from_stdin(ws: Path) -> None:
    result = ringfence_process("call", "read_file", "--args", "-", "--workspace", str(ws), "--json",
                               stdin='{"path": "notes.txt"}', cwd=ws)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "hello" in json.dumps(json.loads(result.stdout)["result"])


def test_args_file_errors_name_the_file(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    code, body = run_json(capsys, "call", "read_file", "--args", f"@{missing}")
    assert code == 2 and body["error"]["field"] == "--args"
    assert str(missing) in body["error"]["message"]
    code, body = run_json(capsys, "call", "read_file", "--args", f"@{tmp_path}")
    assert code == 2 and str(tmp_path) in body["error"]["message"]


def test_args_from_an_endless_file_are_refused_at_the_bound(ws: Path) -> None:
    """``--args @/dev/zero`` is refused naming --args and the bound, having read at most that
    much: it was read whole first (memory filled until the process died). A real process
    under a 2 GiB address-space limit, so an unbounded read fails there, not the machine."""
    import resource

    from ringfence.cli._output import MAX_INPUT_BYTES

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "ringfence", "call", "write_file", "--args", "@/dev/zero",
         "--workspace", str(ws), "--json"],
        capture_output=True, text=True, timeout=120, preexec_fn=limit, check=False,
    )  # fmt: skip
    body = json.loads(done.stdout)
    assert done.returncode == 2 and body["error"]["field"] == "--args", body
    assert f"{MAX_INPUT_BYTES:,} bytes" in body["error"]["message"]
    assert sorted(p.name for p in ws.iterdir()) == ["notes.txt"]


def test_an_error_never_echoes_a_huge_value(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"path": "notes.txt", "offset": "z" * 120_000}))
    code, out, err = run(capsys, "call", "read_file", "--args", f"@{args}", "--workspace", str(ws))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and len(err) < 1200, len(err)
    assert "offset" in err and "…" in err and "characters)" in err
    code, body = run_json(capsys, "call", "read_file", "--args", f"@{args}", "--workspace", str(ws))
    assert code == 2 and len(json.dumps(body)) < 2000
    assert "characters)" in body["error"]["message"]


# --- unknown names -----------------------------------------------------------------------


def test_unknown_tool_suggests_the_closest_names(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "call", "reed_file", "--workspace", str(ws), "--backend", "local")
    assert code == 1 and "did you mean read_file" in err
    code, body = run_json(capsys, "call", "reed_file", "--workspace", str(ws))
    assert body["error"]["code"] == "not_found"
    assert body["error"]["details"]["suggestions"][0] == "read_file"
    code, body = run_json(capsys, "call", "zzzzzz", "--workspace", str(ws))
    assert code == 1 and "did you mean" not in body["error"]["message"]


# --- the approver ------------------------------------------------------------------------


class SyncApprover:
    def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer.once("yes")


def test_a_sync_approver_is_refused_when_handed_over(ws: Path) -> None:
    with pytest.raises(TypeError, match=r"SyncApprover\.approve must be `async def`"):
        create_kernel(roots=[ws], approver=SyncApprover())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no approve"):
        create_kernel(roots=[ws], approver=object())  # type: ignore[arg-type]
    # The adapter it points to works, and an async approver is accepted as before.
    create_kernel(roots=[ws], approver=ScriptedApprover(lambda r: ApprovalAnswer.once("ok")))


# --- events show ------------------------------------------------------------------------


def test_events_show_is_a_timeline(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    base = ["--workspace", str(ws), "--backend", "local", "--events", str(events)]
    assert main(["call", "read_file", "--args", '{"path": "notes.txt"}', *base]) == 0
    assert main(["call", "write_file", "--args", '{"path": "w", "content": "x"}', *base,
                 "--approve", "no"]) == 3  # fmt: skip
    capsys.readouterr()
    code, out, _ = run(capsys, "events", "show", str(events))
    assert code == 0
    lines = out.splitlines()
    assert sum(line.startswith("session ") and "sealed" in line for line in lines) == 2
    read = next(line for line in lines if "read_file" in line)
    assert "by cli" in read and "allow by posture:ask" in read and " ms" in read
    assert "finished" in read
    write = next(line for line in lines if "write_file" in line)
    assert "ask by posture:ask, approver: deny" in write and "failed denied:" in write

    code, body = run_json(capsys, "events", "show", str(events))
    sessions = body["result"]["sessions"]
    call = sessions[1]["calls"][0]
    assert call["tool"] == "write_file" and call["outcome"] == "failed"
    assert call["decision"]["rule"] == "posture:ask" and call["duration_ms"] >= 0
    code, body = run_json(capsys, "events", "show", str(events), "--trace", call["trace_id"])
    assert [c["tool"] for s in body["result"]["sessions"] for c in s["calls"]] == ["write_file"]
    code, body = run_json(capsys, "events", "show", str(events), "--trace", "nope")
    assert code == 1 and body["error"]["field"] == "--trace"


@pytest.mark.parametrize("ts", ["1e308", "1e20", "9223372036854775808", "-1e300"])
def test_events_show_draws_an_impossible_time_as_its_value(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], ts: str
) -> None:
    """A record's time is anyone's who could write the file (valid JSON, however absurd): the
    timeline shows it as its value, never `unexpected error: OverflowError`."""
    events = tmp_path / "events.jsonl"
    base = ["--workspace", str(ws), "--backend", "local", "--events", str(events)]
    assert main(["call", "read_file", "--args", '{"path": "notes.txt"}', *base]) == 0
    events.write_text(re.sub(r'"ts":[0-9.e+-]+', f'"ts":{ts}', events.read_text()))
    capsys.readouterr()
    code, out, err = run(capsys, "events", "show", str(events))
    assert code == 0 and "unexpected error" not in err, err
    assert "not a date)" in out and "read_file" in out, out
    code, body = run_json(capsys, "events", "show", str(events))
    assert code == 0 and body["result"]["sessions"][0]["calls"][0]["tool"] == "read_file"


def test_events_show_of_a_script_nests_its_calls(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    script = tmp_path / "s.py"
    script.write_text("call_tool('read_file', path='notes.txt')\n")
    code = main(["run-script", str(script), "--workspace", str(ws), "--backend", "local",
                 "--approve", "yes", "--events", str(events), "--timeout", "20"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    capsys.readouterr()
    code, out, _ = run(capsys, "events", "show", str(events))
    lines = [line for line in out.splitlines() if not line.startswith("session")]
    script_line = next(line for line in lines if "run_tool_script" in line)
    nested = next(line for line in lines if "read_file" in line)
    indent = len(script_line) - len(script_line.lstrip())
    assert "by script" in nested
    # The nested call is indented under its parent.
    assert nested.index("read_file") > script_line.index("run_tool_script") >= indent


def test_debug_env_shows_the_traceback_of_an_unexpected_error(tmp_path: Path) -> None:
    plan_dir = tmp_path / "plan-dir"
    plan_dir.mkdir()
    quiet = ringfence_process("plan", "show", str(plan_dir))
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr
    assert quiet.stderr.count("\n") == 1 and str(plan_dir) in quiet.stderr
    loud = ringfence_process("plan", "show", str(plan_dir), env={"RINGFENCE_DEBUG": "1"})
    assert loud.returncode == 1 and "Traceback" in loud.stderr


def test_doctor_reports_node_and_where_oauth_tokens_are_sealed(
    capsys: pytest.CaptureFixture[str], ringfence_home: Path
) -> None:
    code, body = run_json(capsys, "doctor", "--backend", "host")
    assert code == 0, body
    checks = {c["name"]: c for c in body["result"]["checks"]}
    assert checks["node"]["ok"] is (shutil.which("node") is not None)
    store = checks["mcp token store"]["detail"]
    assert "keyring" in store or str(ringfence_home / "keys") in store
