"""A program's leading options do not hide its subcommand from a deny rule.

``git --git-dir=.git push``, ``git -C . push``, ``git --no-pager push``: the rule
``run_shell(git push *)`` names what git does, and git does a push. Oracle: git itself —
its trace (``GIT_TRACE=1``) names the built-in it runs after reading its global options.
Property-based over git's global options, for both judges: the Gate's (the command line,
``decide``) and the exec check's (the argv of an exec, as the confined supervisor matches
it). Through the interface: the command line refused, and no push reached the remote.
And git's aliases (or an autocorrected typo), which git expands in the same process: the
exec check refuses a git command that is none of git's own while a rule names git commands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ringfence.backends.confined._execcheck import ExecRules as SupervisorRules
from ringfence.backends.confined._execrules import exec_rules
from ringfence.cli._main import main
from ringfence.runtime import Policy, Posture, Rules, ToolSpec, Verdict
from ringfence.runtime.policy._decide import decide

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("not run")


SHELL = ToolSpec("run_shell", "", {"type": "object"}, _never, residual=True, exec_checked=True)
POLICY = Policy.from_strings(deny=["run_shell(git push *)", "run_shell(git fetch *)"])
RULES = Rules(policy=POLICY)
DENIED = {"push", "fetch"}

# git's global options (git(1)), each with the value it takes, if any.
GLOBALS = [
    ("-C", "."),
    ("--git-dir=.git",),
    ("--git-dir", ".git"),
    ("--work-tree=.",),
    ("--work-tree", "."),
    ("--no-pager",),
    ("-P",),
    ("-p",),
    ("-c", "x.y=z"),
    ("--no-replace-objects",),
    ("--literal-pathspecs",),
    ("--glob-pathspecs",),
    ("--noglob-pathspecs",),
    ("--icase-pathspecs",),
    ("--no-optional-locks",),
    ("--namespace=n",),
    ("--namespace", "n"),
    ("--config-env=x.y=HOME",),
]
SUBCOMMANDS = ["push", "fetch", "status", "log", "diff", "remote"]
TRACE = re.compile(r"trace: built-in: git (\S+)")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose origin does not exist: a push or fetch fails at once, after git
    has traced the built-in it runs."""
    path = tmp_path_factory.mktemp("git-options")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(
        ["git", "-C", str(path), "remote", "add", "origin", str(path / "no-such-remote")],
        check=True,
    )
    return path


def git_runs(repo: Path, argv: list[str]) -> str | None:
    """The built-in git says it runs for ``git argv`` (its own trace), or None."""
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_TRACE": "1", "LC_ALL": "C"}
    env |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}
    done = subprocess.run(
        ["git", *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=20
    )
    found = TRACE.search(done.stderr)
    return found.group(1) if found else None


command_lines = st.tuples(
    st.lists(st.sampled_from(GLOBALS), max_size=4).map(lambda g: [w for o in g for w in o]),
    st.sampled_from(SUBCOMMANDS),
    st.sampled_from([[], ["origin"], ["-v"], ["origin", "HEAD:refs/heads/x"]]),
)


@settings(
    max_examples=int(os.environ.get("ORACLE_EXAMPLES", "120")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(command_lines)
def test_a_deny_rule_sees_the_subcommand_git_runs(
    repo: Path, line: tuple[list[str], str, list[str]]
) -> None:
    options, sub, rest = line
    argv = [*options, sub, *rest]
    runs = git_runs(repo, argv)
    if runs is None:  # git refused the line before choosing a built-in
        return
    command = shlex.join(["git", *argv])
    gate = decide(SHELL, Posture.ALLOW_REVERSIBLE, RULES, {"command": command}).verdict
    rules = exec_rules(POLICY, {"command": command})
    assert rules is not None
    at_exec = SupervisorRules(rules.payload).match(["git"], argv)
    if runs in DENIED:
        assert gate is Verdict.DENY, (command, runs)
        assert at_exec is not None, (argv, runs)
    else:  # the options' values here are never a subcommand's name: no over-match either
        assert gate is not Verdict.DENY, (command, runs)
        assert at_exec is None, (argv, runs)


def _workspace_with_origin(tmp_path: Path) -> Path:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    git = ["git", "-C", str(ws), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "remote", "add", "origin", str(remote)], check=True)
    return ws


def _run(
    ws: Path, command: str, capsys: pytest.CaptureFixture[str], env: dict[str, str] | None = None
) -> tuple[int, dict]:
    """``ringfence call run_shell`` under ``run_shell(git push *)``, approving (the network
    makes it ask): the exit code and the printed JSON."""
    arguments: dict[str, object] = {"command": command} | ({"env": env} if env else {})
    code = main(["call", "run_shell", "--args", json.dumps(arguments),
                 "--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes",
                 "--deny", "run_shell(git push *)", "--network", "--json"])  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def _nothing_pushed(tmp_path: Path) -> None:
    """The origin (beside the workspace) has no branch: no push reached it."""
    remote = tmp_path / "remote.git"
    branches = subprocess.run(
        ["git", "-C", str(remote), "branch", "--list"], capture_output=True, text=True, check=True
    )
    assert branches.stdout == ""


@needs_bwrap
@pytest.mark.parametrize(
    "command",
    [
        "git --git-dir=.git push origin HEAD:refs/heads/a",
        "git -C . push origin HEAD:refs/heads/b",
        "git --no-pager push origin HEAD:refs/heads/c",
        "git -c x.y=z push origin HEAD:refs/heads/d",
        # the Gate sees a computed word; the exec check sees the push itself
        'o=--no-pager; git "$o" push origin HEAD:refs/heads/e',
    ],
)
def test_the_command_line_refuses_a_push_behind_global_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    ws = _workspace_with_origin(tmp_path)
    code, out = _run(ws, command, capsys)
    refused = code != 0 or out["result"]["exit_code"] != 0
    assert refused, out
    assert "denied" in json.dumps(out) or "Permission denied" in json.dumps(out), out
    _nothing_pushed(tmp_path)


# -- aliases: git runs them in-process -----------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize(
    "command",
    [
        "GIT_TRACE=1 git -c alias.p=push p origin HEAD:refs/heads/f",
        "GIT_TRACE=1 git -c help.autocorrect=immediate pushh origin HEAD:refs/heads/g",
        "export GIT_CONFIG_GLOBAL=./gc; git config --global alias.p push; "
        "GIT_TRACE=1 git p origin HEAD:refs/heads/h",
        "GIT_TRACE=1 GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0=push "
        "git p origin HEAD:refs/heads/i",
    ],
)
def test_a_git_alias_cannot_run_a_denied_git_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """git expands an alias (or autocorrects a typo) in the same process: the exec check saw
    `git p`, and git ran its push. Oracle: git's own trace, which names the built-in it runs;
    now git never starts, and the refusal names the rule."""
    ws = _workspace_with_origin(tmp_path)
    code, out = _run(ws, command, capsys)
    assert code == 0, out  # the command ran and failed: the exec was refused
    result = out["result"]
    assert result["exit_code"] == 126 and "git: Permission denied" in result["stderr"], out
    assert "built-in: git push" not in result["stderr"], out
    _nothing_pushed(tmp_path)


@needs_bwrap
def test_an_external_git_command_where_the_command_writes_counts_for_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `git-p` the command wrote could be gone by the time git looks for it (then git runs
    the alias `p`): only git's exec path and read-only `PATH` directories make `p` git's own."""
    ws = _workspace_with_origin(tmp_path)
    command = (
        "mkdir b && printf '#!/bin/sh\\necho external\\n' > b/git-p && chmod +x b/git-p && "
        "git -c alias.p=push p origin HEAD:refs/heads/j"
    )
    code, out = _run(ws, command, capsys, env={"PATH": f"{ws}/b:/usr/local/bin:/usr/bin:/bin"})
    assert code == 0, out
    result = out["result"]
    assert result["exit_code"] == 126 and "git: Permission denied" in result["stderr"], out
    assert "external" not in result["stdout"], out
    _nothing_pushed(tmp_path)


@needs_bwrap
def test_git_commands_of_its_own_still_run_under_a_rule_over_git(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = _workspace_with_origin(tmp_path)
    code, out = _run(ws, "git -C . --no-pager log --oneline; git submodule status", capsys)
    assert code == 0 and out["result"]["exit_code"] == 0, out
    assert out["result"]["stdout"].endswith(" x\n"), out


# -- short options as a set: `rm -rf *` -------------------------------------------------------

FLAGS = Policy.from_strings(deny=["run_shell(rm -rf *)", "run_shell(tar -xz *)"])


@pytest.mark.parametrize(
    ("command", "denied"),
    [
        ("rm -rf x", True),
        ("rm -fr x", True),
        ("rm -r -f x", True),
        ("rm -f -r x", True),
        ("rm -rfv x", True),
        ("rm -v -rf x", True),
        ("rm -vfr a b", True),
        ("tar -zx -f a.tgz", True),
        ("rm -r x", False),
        ("rm -f x", False),
        ("rm -- -rf", False),  # after --, -rf is a file name
        ("ls -rf", False),
    ],
)
def test_a_deny_rules_short_options_match_in_any_order_and_cluster(
    command: str, denied: bool
) -> None:
    gate = decide(SHELL, Posture.ALLOW_REVERSIBLE, Rules(policy=FLAGS), {"command": command})
    argv = shlex.split(command)
    rules = exec_rules(FLAGS, {"command": command})
    assert rules is not None
    at_exec = SupervisorRules(rules.payload).match([argv[0]], argv[1:])
    assert (gate.verdict is Verdict.DENY) is denied, command
    assert (at_exec is not None) is denied, argv


@needs_bwrap
def test_the_command_line_refuses_rm_fr_under_a_rm_rf_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    (ws / "victim").mkdir(parents=True)
    (ws / "victim" / "keep.txt").write_text("keep\n")
    for command in ("rm -fr victim", "rm -r -f victim", 'f=-f; rm -r "$f" victim'):
        code = main(["call", "run_shell", "--args", json.dumps({"command": command}),
                     "--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes",
                     "--deny", "run_shell(rm -rf *)", "--json"])  # fmt: skip
        out = json.loads(capsys.readouterr().out)
        assert code != 0 or out["result"]["exit_code"] != 0, (command, out)
        assert (ws / "victim" / "keep.txt").read_text() == "keep\n", command
