"""Every verb by a table of bad inputs: a clean refusal, never a traceback, nothing changed.

For each case, with and without ``--json``: the exit code is 1 or 2 (3 for a
denial), the same both times; without
``--json`` stderr is exactly one line that names the culprit (the file, option,
field or unknown name) and stdout is empty; with ``--json`` stdout is one
``{"ok": false, "error": …}`` object naming it; no output holds "Traceback" or
more than a few KB (a huge value is not echoed back); and no file under the
test's directory (inputs, workspace, manifests) or in RINGFENCE_HOME was created,
changed or removed. The inputs: a missing file, a directory, a binary file, bad
JSON, an empty file, a file that opens but cannot be read (``/proc/self/mem``,
EIO even for root; only ever read), a 150,000-character value, unknown names, a
directory that is no git repository and one with no commit; ``ENV_CASES`` put
the bad value in the environment instead (``DOCKER_HOST``, ``RINGFENCE_*``).

The calls go through ``ringfence.cli._main.main`` in-process: the same parser and
the same exception boundary as the installed command (``RINGFENCE_DEBUG`` unset,
so a genuine bug would show up here as an "unexpected error" line, which fails
the culprit check). The (sub)commands come from the real parser: one without a
case here fails :func:`test_every_command_has_bad_input_cases`. ``serve`` must
refuse before it serves: its serving functions are replaced by a tripwire, so a
case that got that far fails as an "unexpected error" instead of taking over
the test's stdin/stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import (
    isolated,  # noqa: F401  (autouse fixture)
    uncovered,
)

from ringfence.cli._main import main

HUGE = "z" * 150_000
# A file that exists and opens but cannot be read, even by root (read at offset 0: EIO).
# Only ever an input that is read: nothing may open it for writing.
UNREADABLE = "/proc/self/mem"


@dataclass(frozen=True)
class Inputs:
    base: Path
    missing: Path
    dir: Path
    binary: Path
    badjson: Path
    empty: Path
    ws: Path
    manifest: Path
    repo: Path

    def fill(self, text: str) -> str:
        return text.format(
            missing=self.missing,
            dir=self.dir,
            binary=self.binary,
            badjson=self.badjson,
            empty=self.empty,
            ws=self.ws,
            manifest=self.manifest,
            repo=self.repo,
            huge=HUGE,
            unreadable=UNREADABLE,
        )


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Inputs:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    monkeypatch.chdir(ws)
    adir = tmp_path / "a-directory"
    adir.mkdir()
    (adir / "inside.txt").write_text("x\n")
    binary = tmp_path / "binary.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    badjson = tmp_path / "bad.json"
    badjson.write_text('{"unterminated": [1, 2\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    manifest = tmp_path / "mcp.toml"
    manifest.write_text(
        '[[server]]\nname = "keep"\ntransport = "stdio"\ncommand = "/bin/true"\n\n'
        '[[server]]\nname = "cc"\ntransport = "http"\nurl = "https://mcp.example.com/mcp"\n'
        'auth = "oauth"\noauth_grant = "client_credentials"\nclient_id = "x"\n'
        'client_secret_env = "CC_SECRET"\n\n'
        '[[server]]\nname = "oa"\ntransport = "http"\nurl = "https://mcp.example.com/mcp"\n'
        'auth = "oauth"\n'
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)

    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError("serve got past its checks and started serving")

    monkeypatch.setattr("ringfence.serve.serve_stdio", tripwire)
    monkeypatch.setattr("ringfence.serve.serve_http", tripwire)
    return Inputs(
        tmp_path, tmp_path / "missing.file", adir, binary, badjson, empty, ws, manifest, repo
    )


# ``mcp add`` of a stdio server, up to the manifest path.
MCP_ADD_STDIO = ["mcp", "add", "x", "--transport", "stdio", "--command", "/bin/true", "--manifest"]
# (argv template, culprit template): the culprit must appear in the one-line error.
S = ["--workspace", "{ws}", "--backend", "local", "--approve", "no"]
# For the gated verbs whose bad input is only found once the call is approved (undo).
YES = ["--workspace", "{ws}", "--backend", "local", "--approve", "yes"]
CASES: list[tuple[list[str], str]] = [
    # call
    (["call", "no_such_tool", *S], "no_such_tool"),
    (["call", "read_file", "--args", "{{not json", *S], "--args"),
    (["call", "read_file", "--args", "[1, 2]", *S], "--args"),
    (["call", "read_file", "--args", "@{missing}", *S], "{missing}"),
    (["call", "read_file", "--args", "@{dir}", *S], "{dir}"),
    (["call", "read_file", "--args", "@{binary}", *S], "{binary}"),
    (["call", "read_file", "--args", "@{unreadable}", *S], "{unreadable}"),
    (["call", "read_file", "--policy", "{unreadable}", *S], "{unreadable}"),
    (["call", "read_file", "--args", "@{badjson}", *S], "--args"),
    (["call", "read_file", "--args", '{{"path": "notes.txt", "offset": "{huge}"}}', *S], "offset"),
    (["call", "read_file", "--args", '{{"path": "notes.txt"}}', "--events", "{dir}", *S], "{dir}"),
    (["call", "read_file", "--events", "{binary}", *S], "{binary}"),
    (["call", "read_file", "--events", "{badjson}", *S], "{badjson}"),
    (["call", "read_file", "--policy", "{missing}", *S], "{missing}"),
    (["call", "read_file", "--policy", "{dir}", *S], "{dir}"),
    (["call", "read_file", "--policy", "{binary}", *S], "{binary}"),
    (["call", "read_file", "--policy", "{badjson}", *S], "{badjson}"),
    (["call", "read_file", "--deny", "run_shell(", *S], "run_shell("),
    (["call", "read_file", "--workspace", "{missing}"], "{missing}"),
    (["call", "read_file", "--workspace", "{binary}"], "{binary}"),
    (["call", "write_file", "--dry-run", "{dir}", *S], "{dir}"),
    (["call", "write_file", "--dry-run", "{badjson}", *S], "{badjson}"),
    (["call", "read_file", "--dry-run", "{empty}", *S], "{empty}"),
    (["call", "read_file", "--dry-run", "{unreadable}", *S], "{unreadable}"),
    (["call", "read_file", "--posture", "no_such_posture"], "no_such_posture"),
    (["call", "read_file", "--backend", "no_such_backend"], "no_such_backend"),
    (["call", "read_file", "--change-sets", "--workspace", "{ws}", "--backend", "host"], "host"),
    (["call", "mcp.no_such_server.tool", *S], "mcp.no_such_server.tool"),
    # tools list
    (["tools", "list", "--events", "{dir}", *S], "{dir}"),
    (["tools", "list", "--policy", "{binary}", *S], "{binary}"),
    (["tools", "list", "--workspace", "{missing}"], "{missing}"),
    (["tools", "stubs", "--events", "{dir}", *S], "{dir}"),
    (["tools", "stubs", "--policy", "{binary}", *S], "{binary}"),
    (["tools", "stubs", "--workspace", "{missing}"], "{missing}"),
    # run-script
    (["run-script", "{missing}", *S], "{missing}"),
    (["run-script", "{dir}", *S], "{dir}"),
    (["run-script", "{binary}", *S], "{binary}"),
    (["run-script", "{unreadable}", *S], "{unreadable}"),
    (["run-script", "{empty}", "--timeout", "-5", *S], "timeout"),
    (["run-script", "{empty}", "--dry-run", "{binary}", *S], "{binary}"),
    # events verify / show
    (["events", "verify", "{missing}"], "{missing}"),
    (["events", "verify", "{dir}"], "{dir}"),
    (["events", "verify", "{binary}"], "{binary}"),
    (["events", "verify", "{badjson}"], "{badjson}"),
    (["events", "verify", "{unreadable}"], "{unreadable}"),
    (["events", "verify", "{empty}", "--public-key", "{unreadable}"], "{unreadable}"),
    (["events", "verify", "{empty}", "--public-key", "{missing}"], "{missing}"),
    (["events", "verify", "{empty}", "--public-key", "{dir}"], "{dir}"),
    (["events", "verify", "{empty}", "--public-key", "{binary}"], "--public-key"),
    (["events", "verify", "{empty}", "--public-key", "{badjson}"], "--public-key"),
    (["events", "show", "{missing}"], "{missing}"),
    (["events", "show", "{dir}"], "{dir}"),
    (["events", "show", "{binary}"], "{binary}"),
    (["events", "show", "{badjson}"], "{badjson}"),
    (["events", "show", "{unreadable}"], "{unreadable}"),
    (["events", "show", "{empty}", "--trace", "no_such_trace"], "no_such_trace"),
    (["events", "show", "{missing}", "--trace", "t"], "{missing}"),
    (["events", "show", "{empty}", "--trace", "{huge}"], "characters)"),
    # plan
    (["plan", "show", "{missing}"], "{missing}"),
    (["plan", "show", "{dir}"], "{dir}"),
    (["plan", "show", "{binary}"], "{binary}"),
    (["plan", "show", "{badjson}"], "{badjson}"),
    (["plan", "show", "{unreadable}"], "{unreadable}"),
    (["plan", "apply", "{missing}", *S], "{missing}"),
    (["plan", "apply", "{dir}", *S], "{dir}"),
    (["plan", "apply", "{binary}", *S], "{binary}"),
    (["plan", "apply", "{badjson}", *S], "{badjson}"),
    (["plan", "apply", "{unreadable}", *S], "{unreadable}"),
    # policy
    (["policy", "check", "{missing}"], "{missing}"),
    (["policy", "accept", "--workspace", "{missing}"], "{missing}"),
    (["policy", "accept", "--workspace", "{binary}"], "{binary}"),
    (["policy", "check", "{dir}"], "{dir}"),
    (["policy", "check", "{binary}"], "{binary}"),
    (["policy", "check", "{badjson}"], "{badjson}"),
    (["policy", "check", "{unreadable}"], "{unreadable}"),
    (["policy", "show", "--policy", "{unreadable}"], "{unreadable}"),
    (["policy", "show", "--policy", "{missing}"], "{missing}"),
    (["policy", "show", "--policy", "{dir}"], "{dir}"),
    (["policy", "explain", "read_file", "--args", "{{nope", *S], "--args"),
    (["policy", "explain", "read_file", "--args", "@{binary}", *S], "{binary}"),
    (["policy", "explain", "read_file", "--args", "@{missing}", *S], "{missing}"),
    (["policy", "explain", "read_file", "--args", "@{dir}", *S], "{dir}"),
    (["policy", "explain", "read_file", "--args", "[1, 2]", *S], "--args"),
    (["policy", "explain", "read_file", "--policy", "{badjson}", *S], "{badjson}"),
    (["policy", "explain", "read_file", "--deny", "run_shell(", *S], "run_shell("),
    (["policy", "explain", "read_file", "--workspace", "{missing}"], "{missing}"),
    # checkpoints, undo
    (["checkpoints", "list", "--workspace", "{missing}"], "{missing}"),
    (["recover", "--workspace", "{missing}"], "{missing}"),
    (["recover", "--workspace", "{binary}"], "{binary}"),
    (["checkpoints", "list", "--workspace", "{binary}"], "{binary}"),
    (["checkpoints", "show", "no_such_id", "--workspace", "{ws}"], "no_such_id"),
    (["checkpoints", "show", "../../etc", "--workspace", "{ws}"], "../../etc"),
    (["checkpoints", "show", "{huge}", "--workspace", "{ws}"], "characters)"),
    (["checkpoints", "show", "x", "--workspace", "{missing}"], "{missing}"),
    (["undo", "no_such_id", *S], "no_such_id"),
    (["undo", "{huge}", *S], "characters)"),
    (["undo", "--last", "0", *S], "last"),
    (["undo", "--last", "{huge}", *S], "--last"),
    (["undo", "--workspace", "{missing}"], "{missing}"),
    (["undo", "--events", "{dir}", *S], "{dir}"),
    # worktree
    (["worktree", "list", "--workspace", "{missing}"], "{missing}"),
    (["worktree", "list", "--workspace", "{ws}"], "{ws}"),
    (["worktree", "diff", "no_such_worktree", "--workspace", "{repo}"], "no_such_worktree"),
    (["worktree", "diff", "../up", "--workspace", "{repo}"], "../up"),
    (["worktree", "diff", "x", "--workspace", "{ws}"], "{ws}"),
    (["worktree", "remove", "no_such_worktree", "--workspace", "{repo}"], "no_such_worktree"),
    (["worktree", "remove", "{huge}", "--workspace", "{repo}"], "characters)"),
    (["worktree", "remove", "x", "--workspace", "{binary}"], "{binary}"),
    (["tools", "list", "--worktree", "wt", "--workspace", "{ws}"], "{ws}"),
    (["call", "read_file", "--worktree", "wt", "--workspace", "{repo}"], "{repo}"),
    (["call", "read_file", "--worktree", "../up", "--workspace", "{repo}"], "../up"),
    # mcp
    (["mcp", "list", "--manifest", "{dir}"], "{dir}"),
    (["mcp", "list", "--manifest", "{binary}"], "{binary}"),
    (["mcp", "list", "--manifest", "{badjson}"], "{badjson}"),
    (["mcp", "list", "--manifest", "{unreadable}"], "{unreadable}"),
    ([*MCP_ADD_STDIO, "{dir}"], "{dir}"),
    ([*MCP_ADD_STDIO, "{binary}"], "{binary}"),
    (
        ["mcp", "add", "x", "--transport", "carrier-pigeon", "--manifest", "{manifest}"],
        "carrier-pigeon",
    ),
    (
        ["mcp", "add", "x", "--transport", "http", "--url", "{huge}", "--manifest", "{manifest}"],
        "url",
    ),
    (["mcp", "add", "x", "--elicitation", "sometimes", "--manifest", "{manifest}"], "sometimes"),
    (
        [*MCP_ADD_STDIO[:-1], "--timeout-seconds", "nan", "--manifest", "{manifest}"],
        "timeout_seconds",
    ),
    (["mcp", "remove", "no_such_server", "--manifest", "{manifest}"], "no_such_server"),
    (["mcp", "remove", "keep", "--manifest", "{badjson}"], "{badjson}"),
    (["mcp", "inspect", "no_such_server", "--manifest", "{manifest}"], "no_such_server"),
    (["mcp", "inspect", "keep", "--manifest", "{dir}"], "{dir}"),
    (["mcp", "inspect", "keep", "--manifest", "{binary}"], "{binary}"),
    (
        ["mcp", "inspect", "keep", "--timeout-seconds", "-1", "--manifest", "{manifest}"],
        "--timeout-seconds",
    ),
    (
        ["mcp", "inspect", "keep", "--timeout-seconds", "nan", "--manifest", "{manifest}"],
        "--timeout-seconds",
    ),
    (
        ["mcp", "inspect", "keep", "--workspace", "{missing}", "--manifest", "{manifest}"],
        "{missing}",
    ),
    (["mcp", "login", "no_such_server", "--manifest", "{manifest}"], "no_such_server"),
    (["mcp", "login", "keep", "--no-browser", "--manifest", "{manifest}"], "keep"),
    (["mcp", "login", "cc", "--no-browser", "--manifest", "{manifest}"], "cc"),
    (["mcp", "login", "keep", "--manifest", "{badjson}"], "{badjson}"),
    (["mcp", "login", "oa", "--port", "99999", "--manifest", "{manifest}"], "--port"),
    (["mcp", "login", "oa", "--port", "{huge}", "--manifest", "{manifest}"], "--port"),
    (["mcp", "logout", "no_such_server", "--manifest", "{manifest}"], "no_such_server"),
    (["mcp", "logout", "keep", "--manifest", "{dir}"], "{dir}"),
    (["mcp", "logout", "{huge}", "--manifest", "{manifest}"], "characters)"),
    (["mcp", "import", "{missing}", "--manifest", "{manifest}"], "{missing}"),
    (["mcp", "import", "{dir}", "--manifest", "{manifest}"], "{dir}"),
    (["mcp", "import", "{binary}", "--manifest", "{manifest}"], "{binary}"),
    (["mcp", "import", "{badjson}", "--manifest", "{manifest}"], "{badjson}"),
    (["mcp", "import", "{unreadable}", "--manifest", "{manifest}"], "{unreadable}"),
    # plugin, skills
    (["plugin", "add", "{missing}"], "{missing}"),
    (["plugin", "add", "{binary}"], "{binary}"),
    (["plugin", "add", "{dir}"], "ringfence-plugin.toml"),
    (["plugin", "add"], "--package"),
    (["plugin", "add", "--package", "no_such_distribution"], "no_such_distribution"),
    (["plugin", "add", "{dir}", "--config", "{badjson}"], "ringfence-plugin.toml"),
    (["plugin", "list", "--config", "{badjson}"], "{badjson}"),
    (["plugin", "list", "--config", "{binary}"], "{binary}"),
    (["plugin", "list", "--config", "{dir}"], "{dir}"),
    (["plugin", "show", "no_such_plugin"], "no_such_plugin"),
    (["plugin", "show", "{huge}"], "characters)"),
    (["plugin", "trust", "no_such_plugin"], "no_such_plugin"),
    (["plugin", "trust", "x", "--config", "{unreadable}"], "{unreadable}"),
    (["plugin", "remove", "no_such_plugin"], "no_such_plugin"),
    (["skills", "list", "--config", "{badjson}"], "{badjson}"),
    (["skills", "show", "no_such_skill"], "no_such_skill"),
    # serve (each refused before it would read stdin)
    (["serve", "--events", "{dir}", *S], "{dir}"),
    (["serve", "--transport", "carrier-pigeon"], "carrier-pigeon"),
    (["serve", "--expose", "no_such_group", *S], "no_such_group"),
    (["serve", "--port", "{huge}"], "--port"),
    (["serve", "--transport", "http", "--port", "99999", *S], "--port"),
    (["serve", "--approval-timeout", "-1", *S], "--approval-timeout"),
    (["serve", "--approval-timeout", "nan", *S], "--approval-timeout"),
    (["serve", "--headless", "maybe", *S], "maybe"),
    (["serve", "--policy", "{binary}", *S], "{binary}"),
    (["serve", "--workspace", "{missing}"], "{missing}"),
    (["serve", "--expose", "{huge}", *S], "--expose"),
    (["serve", "--dry-run", "{dir}", *S], "{dir}"),
    (["serve", "--dry-run", "{badjson}", *S], "{badjson}"),
    (["serve", "--events", "{binary}", *S], "{binary}"),
    (["serve", "--worktree", "wt", *S], "{ws}"),
    # review (each refused before it would serve)
    (["review", "--watch", "{missing}", "--workspace", "{ws}"], "{missing}"),
    (["review", "--port", "{huge}"], "--port"),
    (["review", "--approve", "yes", "--workspace", "{ws}"], "--approve"),
    (["review", "--approval-timeout", "nan", "--workspace", "{ws}"], "--approval-timeout"),
    (["undo", "abc123", "--last", "2", *YES], "last"),
    (["undo", *YES], "undo"),
    (["undo", "abc123", *YES], "abc123"),
    # images, doctor, bench
    (["images", "build", "no_such_image"], "no_such_image"),
    (["images", "build", "--no-such-option"], "--no-such-option"),
    (["images", "list", "no_such_argument"], "no_such_argument"),
    (["doctor", "--backend", "no_such_backend"], "no_such_backend"),
    (["bench", "no_such_scenario"], "no_such_scenario"),
    (["bench", "{huge}"], "characters)"),
    (["bench", "--plot", "{dir}", "no_such_scenario"], "{dir}"),
    (["bench", "--output", "{dir}", "no_such_scenario"], "{dir}"),
    (["tools", "list", "--posture", "no_such_posture"], "no_such_posture"),
    (["run-script", "{empty}", "--timeout", "{huge}", *S], "--timeout"),
    (["plan", "apply", "{empty}", *S], "{empty}"),
    (["no_such_verb"], "no_such_verb"),
]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root with its kind, mode and content hash."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"
            out[str(path.relative_to(root))] = f"{st.st_mode:o}:{digest}"
    return out


def ids() -> list[str]:
    return [" ".join(a[:3]) + f" [{i}]" for i, (a, _) in enumerate(CASES)]


def test_every_command_has_bad_input_cases() -> None:
    assert uncovered(argv for argv, _ in CASES) == []


# Bad input from the environment: (variables, argv template, culprit template).
ENV_CASES: list[tuple[dict[str, str], list[str], str]] = [
    ({"DOCKER_HOST": "unix://{missing}"}, ["images", "list"], "{missing}"),
    ({"DOCKER_HOST": "tcp://127.0.0.1:99999"}, ["images", "list"], "tcp://127.0.0.1:99999"),
    ({"DOCKER_HOST": "unix://{missing}"}, ["images", "build", "busybox"], "{missing}"),
    (
        {"DOCKER_HOST": "unix://{missing}"},
        [
            "call",
            "run_shell",
            "--args",
            '{{"command": "true"}}',
            "--backend",
            "docker",
            "--approve",
            "yes",
            "--workspace",
            "{ws}",
        ],
        "{missing}",
    ),
    (
        {"RINGFENCE_POSTURE": "no_such_posture"},
        ["tools", "list", "--workspace", "{ws}"],
        "no_such_posture",
    ),
    (
        {"RINGFENCE_EXECUTION_BACKEND": "no_such_backend"},
        ["call", "read_file", "--workspace", "{ws}"],
        "no_such_backend",
    ),
    ({"RINGFENCE_WORKSPACE_ROOTS": "{missing}"}, ["tools", "list"], "{missing}"),
    ({"RINGFENCE_WORKSPACE_ROOTS": "{missing}"}, ["checkpoints", "list"], "{missing}"),
    (
        {"RINGFENCE_SERVE_TOKEN": "short"},
        ["serve", "--transport", "http", *S],
        "RINGFENCE_SERVE_TOKEN",
    ),
]


def refused_cleanly(
    argv: list[str], name: str, inputs: Inputs, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ringfence *argv`` (and with --json) refuses naming ``name``; nothing on disk changed."""
    before = snapshot(inputs.base), snapshot(home)

    code = main(argv)
    out, err = capsys.readouterr()
    denied = code == 3 and err.startswith("ringfence: denied:")
    assert code in (1, 2) or denied, (argv[:4], code, out, err)
    assert out == "", out[:500]
    assert err.count("\n") == 1 and err.startswith("ringfence: "), err[:2000]
    assert not err.startswith("ringfence: ringfence"), err[:200]  # the prefix once
    assert "Traceback" not in err and "unexpected error" not in err, err[:2000]
    assert name in err, (name, err[:2000])
    assert len(err) < 1500, len(err)

    json_code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert json_code == code, (argv[:4], json_code, out, err)
    body = json.loads(out)
    assert set(body) == {"ok", "error"} and body["ok"] is False, body
    assert name in json.dumps(body["error"], ensure_ascii=False), (name, body)
    assert "Traceback" not in out + err and "unexpected error" not in out
    assert len(out) < 4000, len(out)

    assert (snapshot(inputs.base), snapshot(home)) == before


@pytest.mark.parametrize(("template", "culprit"), CASES, ids=ids())
def test_bad_input_is_refused_cleanly(
    template: list[str],
    culprit: str,
    inputs: Inputs,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [inputs.fill(a) for a in template]
    refused_cleanly(argv, inputs.fill(culprit), inputs, ringfence_home, capsys)


@pytest.mark.parametrize(
    ("env", "template", "culprit"), ENV_CASES, ids=[" ".join(c[1][:2]) for c in ENV_CASES]
)
def test_bad_environment_is_refused_cleanly(
    env: dict[str, str],
    template: list[str],
    culprit: str,
    inputs: Inputs,
    ringfence_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for variable, value in env.items():
        monkeypatch.setenv(variable, inputs.fill(value))
    argv = [inputs.fill(a) for a in template]
    refused_cleanly(argv, inputs.fill(culprit), inputs, ringfence_home, capsys)
