"""The frictions a new user hit (issue 31, item 3), each performed through the command line.

Every test here failed on the main of the time the issue was filed; the name says what
now holds.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from cli_helpers import (  # isolated: autouse
    isolated,  # noqa: F401
    ringfence_process,
    run_on_pty,
)

from ringfence.mcp_host import parse_manifest


def rf(*args: str, cwd: Path, home: Path, env: dict[str, str] | None = None):
    """``ringfence *args`` as a real process, no terminal (stdin a pipe), its own home."""
    return ringfence_process(
        *args,
        cwd=cwd,
        env={"RINGFENCE_HOME": str(home), **(env or {})},
        unset=("RINGFENCE_WORKSPACE_ROOTS", "RINGFENCE_POSTURE"),
        stdin="",
    )


# -- 1. a refused plan apply does not burn the plan -------------------------------------------


def test_a_refused_plan_apply_leaves_the_plan_to_apply_again(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    plan = tmp_path / "plan.json"
    args = json.dumps({"path": "one.txt", "content": "x"})
    staged = rf("call", "write_file", "--args", args, "--workspace", str(work),
                "--dry-run", str(plan), cwd=work, home=home)  # fmt: skip
    assert staged.returncode == 0, staged.stderr
    # no terminal, no --approve: asking means no; the call does not run
    refused = rf("plan", "apply", str(plan), "--workspace", str(work), cwd=work, home=home)
    assert refused.returncode == 3, refused.stderr
    assert not (work / "one.txt").exists()
    assert "not spent" in refused.stderr and "--approve yes" in refused.stderr
    # ... and did not spend the plan: approved, it applies
    applied = rf("plan", "apply", str(plan), "--workspace", str(work), "--approve", "yes",
                 cwd=work, home=home)  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert (work / "one.txt").read_text() == "x"
    # once: the call that ran spent it
    again = rf("plan", "apply", str(plan), "--workspace", str(work), "--approve", "yes",
               cwd=work, home=home)  # fmt: skip
    assert again.returncode != 0 and "already applied" in again.stderr


# -- 3. the docs' examples load as written; errors name the real cause ------------------------

REPO = Path(__file__).resolve().parents[2]
# The worked examples moved from the README to the docs site (whose every block
# tests/docs/ runs); a policy file is checked here as a user would, with `policy check`.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def toml_blocks() -> list[str]:
    return [b for page in PAGES for b in re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)]


def test_the_readme_s_toml_examples_load_as_written(tmp_path: Path) -> None:
    blocks = toml_blocks()
    assert len(blocks) >= 3
    for i, block in enumerate(blocks):
        if re.search(r'^version = "', block, re.M) and re.search(r"^name = ", block, re.M):
            continue  # a ringfence-plugin.toml: it names files of its plugin's folder
        if re.search(r"^\[\[server\]\]", block, re.M):  # an mcp.toml
            parse_manifest(block, f"README block {i}")
            continue

        policy = tmp_path / f"policy-{i}.toml"
        policy.write_text(block)
        checked = rf("policy", "check", str(policy), cwd=tmp_path, home=tmp_path / "home")
        assert checked.returncode == 0, (block, checked.stderr)


def test_a_placeholder_digest_is_named_as_the_cause(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'version = 1\n[trust]\nprojects = [\n  "/srv/ok",\n'
        '  { path = "/srv/app", sha256 = "<printed by ringfence policy show>" },\n]\n'
    )
    checked = rf("policy", "check", str(policy), cwd=tmp_path, home=tmp_path / "home")
    assert checked.returncode != 0
    assert f"{policy}:5: trust.projects[1]" in checked.stderr
    assert (
        "64 hex digits" in checked.stderr and "policy show --workspace /srv/app" in checked.stderr
    )
    assert "Traceback" not in checked.stderr


# -- 8. a headless denial names the fix, and the fix it names works ------------------------------


def test_a_headless_denial_names_the_flags_that_let_it_run(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    args = json.dumps({"path": "a.txt", "content": "x"})
    denied = rf("call", "write_file", "--args", args, "--workspace", str(work), cwd=work, home=home)
    assert denied.returncode == 3 and not (work / "a.txt").exists()
    for fix in ("--approve yes", "--posture allow-reversible", "--allow 'write_file(path=a.txt)'"):
        assert fix in denied.stderr, denied.stderr
    # the rule it names is one that lets exactly this call run
    allowed = rf("call", "write_file", "--args", args, "--workspace", str(work),
                 "--allow", "write_file(path=a.txt)", cwd=work, home=home)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert (work / "a.txt").read_text() == "x"


# -- 10. the smaller ones -----------------------------------------------------------------------


def _closed_reader(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``ringfence *args | head -0``: the reader is gone before anything is written."""
    env = {**os.environ, "RINGFENCE_HOME": str(home)}
    env.pop("RINGFENCE_WORKSPACE_ROOTS", None)
    read, write = os.pipe()
    os.close(read)  # nobody will read stdout
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ringfence", *args],
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
    finally:
        os.close(write)
    _, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


def test_a_closed_pipe_is_not_an_error_and_an_empty_list_says_so(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    empty = rf("checkpoints", "list", "--workspace", str(work), cwd=work, home=home)
    assert empty.returncode == 0 and empty.stdout == ""
    assert f"no change sets for the workspace {work}" in empty.stderr
    args = json.dumps({"path": "a.txt", "content": "x"})
    made = rf("call", "write_file", "--args", args, "--workspace", str(work), "--approve", "yes",
              cwd=work, home=home)  # fmt: skip
    assert made.returncode == 0, made.stderr
    listed = _closed_reader("checkpoints", "list", "--workspace", str(work), cwd=work, home=home)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""


def test_no_change_sets_help_does_not_read_as_the_default() -> None:
    shown = ringfence_process("call", "--help")
    help_text = " ".join(shown.stdout.split())
    start = help_text.index("--no-change-sets let")
    described = help_text[start : start + 200]
    assert "without change sets" in described
    assert "(default for the local backend:" not in described


def test_mcp_add_says_a_command_cannot_start_and_inspect_names_the_real_cause(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    missing = tmp_path / "bin" / "no-such-server"  # absolute, and absent
    added = rf("mcp", "add", "ghost", "--transport", "stdio", "--command", str(missing),
               cwd=tmp_path, home=home)  # fmt: skip
    assert added.returncode == 0, added.stderr  # saved as given (it may be installed later)
    assert f"the command '{missing}' cannot be started now" in added.stderr
    assert "does not exist" in added.stderr
    inspected = rf("mcp", "inspect", "ghost", cwd=tmp_path, home=home)
    text = inspected.stdout + inspected.stderr
    assert "does not exist" in text
    assert "configure an absolute path" not in text  # it is one already
    bare = rf("mcp", "add", "bare", "--transport", "stdio", "--command", "no-such-server-rf",
              cwd=tmp_path, home=home)  # fmt: skip
    assert "not found on the PATH" in bare.stderr and "absolute path" in bare.stderr


def test_a_port_in_use_suggests_port_zero(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        served = rf("serve", "--transport", "http", "--port", port, "--workspace", str(work),
                    cwd=work, home=tmp_path / "home")  # fmt: skip
    assert served.returncode == 2
    assert "Address already in use" in served.stderr and "--port 0" in served.stderr
    assert "Traceback" not in served.stderr


def test_a_git_config_write_is_refused_before_anyone_is_asked(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    args = json.dumps({"path": ".git/config", "content": "[core]\n\tfsmonitor = evil\n"})
    # on a terminal, answering yes: no question may come, and the write is refused
    shown = run_on_pty(
        ["call", "write_file", "--args", args, "--workspace", str(work)],
        work,
        env={"RINGFENCE_HOME": str(tmp_path / "home")},
        new_session=True,
        prompt=b"or [d]eny?",
        answer=b"o\n",
    )
    assert not shown.answered, shown.output
    assert "git_metadata" in shown.output and shown.code != 0
    assert (work / ".git" / "config").read_text() == "[core]\n"
