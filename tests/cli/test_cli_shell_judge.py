"""Issue #29's shell-policy findings, attacked through the ``ringfence`` command.

Each test runs ``ringfence call run_shell`` (or ``run-script`` on a terminal) with a policy
file and an approver that says no, and checks the verdict (``ask`` or ``deny``, never
``allow``), that nothing ran (no ``MARK`` in the workspace, no ``started`` record) and what
the event stream says.

- Finding 1: text that becomes code at run time (a backquote inside ``${…}``, escaped
  backquotes inside backquotes, ``xargs -I{} sh -c {}``) was judged ``allow`` by ``ls*`` /
  ``echo*`` under posture ``ask``; on the confined backend it now goes to the posture.
- Finding 2: on a backend without the exec check (``host`` here), a line the judge cannot
  read whole, or a program it does not know, ran unasked despite a deny rule; it now asks.
- Finding 3: a session grant ``command=ls*`` covered ``ls; touch MARK``.
- Found later: a deny rule naming a shell builtin (``printf``, ``kill``) was left to exec
  checks, which never see a builtin; now such a rule keeps unread lines asking.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import isolated, run_on_pty  # noqa: F401  (isolated: autouse fixture)

from ringfence.cli._main import main

FINDING_1 = [
    "ls ${x:-`touch MARK`}",
    "ls ${x=`touch MARK`}",
    "ls ${x:?`touch MARK`}",
    "ls ${HOME#`touch MARK`}",
    "ls ${HOME%%`touch MARK`}",
    "ls ${HOME:+`touch MARK`}",
    "ls ${x:-${y:-`touch MARK`}}",
    'ls "${HOME#$(touch MARK)}"',
    "ls `ls \\`touch MARK\\``",
    "echo 'touch MARK' | xargs -I{} sh -c {}",
    "echo 'touch MARK' | xargs -I'#' sh -c '#'",
]

# (line, the programs it needs)
FINDING_2: list[tuple[str, tuple[str, ...]]] = [
    ("echo x | xargs --replace touch MARK", ()),
    ("printf 'touch MARK' | sh -", ()),
    ("echo touch MARK | sh /dev/stdin", ()),
    ("echo touch MARK > s; sh s", ()),
    ("taskset 1 touch MARK", ("taskset",)),
    ("chrt -o 0 touch MARK", ("chrt",)),
    ("prlimit --nofile=1024 touch MARK", ("prlimit",)),
    ("setpriv --reset-env touch MARK", ("setpriv",)),
    ("unshare -r touch MARK", ("unshare",)),
    ("script -qc 'touch MARK' /dev/null", ("script",)),
    ("strace -f -o /dev/null touch MARK", ("strace",)),
    ("awk 'BEGIN{system(\"touch MARK\")}'", ("awk",)),
    ("echo x | sed 's/x/touch MARK/e'", ("sed",)),
    ("printf 'all:\\n\\ttouch MARK\\n' > mk; make -f mk", ("make",)),
    (
        "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch MARK' s.txt",
        ("tar",),
    ),
    ("git -c alias.x='!touch MARK' x", ("git",)),
    ("python3 -c 'import os; os.system(\"touch MARK\")'", ("python3",)),
    ("perl -e 'system(\"touch MARK\")'", ("perl",)),
    ("find . -maxdepth 0 -fprint MARK", ("find",)),
]

POLICY_ALLOW_ONLY = 'allow = ["run_shell(ls*)", "run_shell(echo*)"]\n'
POLICY_DENY = (
    'deny = ["run_shell(touch*)", "write_file(path=MARK)"]\n'
    'allow = ["run_shell(ls*)", "run_shell(echo*)", "run_shell(printf*)"]\n'
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "s.txt").write_text("hello\n")
    return root


def _call(
    tmp_path: Path, ws: Path, command: str, policy: str, *options: str
) -> tuple[int, list[dict]]:
    """``ringfence call run_shell`` under ``policy``, answering no: the exit code and the
    event records."""
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(policy)
    events = tmp_path / "events.jsonl"
    events.unlink(missing_ok=True)
    argv = ["call", "run_shell", "--args", json.dumps({"command": command})]
    argv += ["--workspace", str(ws), "--approve", "no", "--policy", str(policy_file)]
    argv += ["--events", str(events), "--json", *options]
    code = main(argv)
    records = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    return code, records


def _decided(records: list[dict]) -> dict:
    return next(r for r in records if r["kind"] == "decided")


def _allowed_and_ran(code: int, records: list[dict], capsys: pytest.CaptureFixture[str]) -> None:
    """The control's outcome: allowed by a rule and run to exit code 0."""
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["result"]["exit_code"] == 0, out
    assert _decided(records)["verdict"] == "allow"


def _asked_and_nothing_ran(
    ws: Path, code: int, records: list[dict], capsys: pytest.CaptureFixture[str]
) -> None:
    """The call was refused because the posture asked (answered no), not allowed by a rule;
    nothing started and no MARK was made."""
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] == "ask", decided
    assert not decided["rule"].startswith("allow"), decided
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "MARK").exists()


def _host_asks(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str], because: str
) -> None:
    """``command`` on the host backend (no exec check) under posture unrestricted and
    POLICY_DENY was asked (answered no) for a reason holding ``because``; nothing ran."""
    code, records = _call(
        tmp_path, ws, command, POLICY_DENY, "--backend", "host", "--posture", "unrestricted"
    )
    _asked_and_nothing_ran(ws, code, records, capsys)
    assert because in _decided(records)["reason"], records


def _plant_bin_ls(ws: Path) -> None:
    """The workspace's own ``bin/ls``, which touches ``MARK`` where it runs."""
    (ws / "bin").mkdir()
    (ws / "bin" / "ls").write_text("#!/bin/sh\n/usr/bin/touch MARK\n")
    (ws / "bin" / "ls").chmod(0o755)


@pytest.mark.parametrize("command", FINDING_1)
def test_text_that_becomes_code_at_run_time_is_never_allowed_by_an_allow_rule(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 1: `ls*`/`echo*` allowed these under posture ask; now the posture asks."""
    code, records = _call(
        tmp_path, ws, command, POLICY_ALLOW_ONLY, "--backend", "local", "--posture", "ask"
    )
    _asked_and_nothing_ran(ws, code, records, capsys)


# A name given to a bash builtin on the judge's whitelist, with an array subscript: bash
# evaluates the subscript as arithmetic, and `$(…)` in it runs (each was judged `allow` by
# the builtin's allow rule under posture ask, and MARK was made).
NAMED_SUBSCRIPTS = [
    "bash -c \"test -v 'a[\\$(touch MARK)]'\"",
    "bash -c \"test ! -v 'a[\\$(touch MARK)]'\"",
    "bash -c \"printf -v 'a[\\$(touch MARK)]' x\"",
    "bash -c \"printf -v'a[\\$(touch MARK)]' x\"",
    "bash -c \"sleep 0 & wait -p 'a[\\$(touch MARK)]' -n\"",
    # the same inside bash's own test syntax, and arithmetic operands of [[ … ]]
    "bash -c \"sleep 0; [ -v 'a[\\$(touch MARK)]' ]\"",
    "bash -c \"sleep 0; [[ 'a[\\$(touch MARK)]' -eq 1 ]]\"",
    # bash's named descriptor: `{name}>f` assigns the descriptor to the variable `name`
    "bash -c \"sleep 0 {a['\\$(touch MARK)']}>/dev/null\"",
]
POLICY_ALLOW_BUILTINS = (
    'allow = ["run_shell(test *)", "run_shell([ *)", "run_shell(printf *)", '
    '"run_shell(wait *)", "run_shell(sleep *)"]\n'
)


@pytest.mark.parametrize("command", NAMED_SUBSCRIPTS)
def test_a_subscript_in_a_name_given_to_a_bash_builtin_is_never_allowed_by_an_allow_rule(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`test*`/`printf*`/`wait*` allowed these under posture ask; now the posture asks."""
    code, records = _call(
        tmp_path, ws, command, POLICY_ALLOW_BUILTINS, "--backend", "local", "--posture", "ask"
    )
    _asked_and_nothing_ran(ws, code, records, capsys)


def test_a_plain_name_given_to_a_bash_builtin_is_still_read_whole(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: without a subscript the same builtins stay allowed by their rules."""
    command = "bash -c 'test -v HOME && printf -v x hi && [ -n x ]'"
    code, records = _call(
        tmp_path, ws, command, POLICY_ALLOW_BUILTINS, "--backend", "local", "--posture", "ask"
    )
    _allowed_and_ran(code, records, capsys)


@pytest.mark.parametrize("command", FINDING_1)
def test_a_deny_rule_sees_the_command_inside_that_text(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 1 with a deny rule for touch: the text is read again, and touch is denied."""
    code, records = _call(
        tmp_path, ws, command, POLICY_DENY, "--backend", "local", "--posture", "unrestricted"
    )
    capsys.readouterr()
    decided = _decided(records)
    if "xargs" in command and decided["verdict"] == "allow":
        # xargs's script is its input, which the text cannot show; on local, run_shell is
        # exec_checked, so the posture runs it and the exec check refuses touch.
        assert [r for r in records if r["kind"] == "exec_denied"], records
        assert not (ws / "MARK").exists()
        return
    assert code == 3
    assert decided["verdict"] in ("deny", "ask"), decided
    if "xargs" not in command:  # xargs's script is its input: only asked about
        assert decided["verdict"] == "deny" and decided["rule"] == "deny:run_shell(touch*)"
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "MARK").exists()


@pytest.mark.parametrize(("command", "needs"), FINDING_2, ids=[c for c, _ in FINDING_2])
def test_without_the_exec_check_an_unread_line_asks_while_a_deny_rule_applies(
    tmp_path: Path,
    ws: Path,
    command: str,
    needs: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Finding 2 on the host backend (no exec check) under posture unrestricted: each of these
    ran unasked (unmatched: the posture decided) and created MARK; now each is asked or denied."""
    missing = [n for n in needs if shutil.which(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    code, records = _call(
        tmp_path, ws, command, POLICY_DENY, "--backend", "host", "--posture", "unrestricted"
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] in ("ask", "deny"), decided
    if decided["verdict"] == "ask":
        assert "cannot be enforced at exec on this backend" in decided["reason"], decided
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "MARK").exists()


# A deny rule naming its program by a path: the line names the same file otherwise.
PATH_NAMED = [
    ("rm -f s.txt", 'deny = ["run_shell(/bin/rm *)"]\n'),
    ("/usr/bin/rm -f s.txt", 'deny = ["run_shell(/bin/rm *)"]\n'),
    ("cat s.txt && rm -f s.txt", 'deny = ["run_shell(/usr/bin/r? *)"]\n'),
    ("ls; rm -f s.txt", 'deny = ["run_shell(/usr/bin/rm *)"]\n'),
]


@pytest.mark.parametrize(("command", "policy"), PATH_NAMED)
def test_without_the_exec_check_a_program_a_rule_names_by_path_asks_by_any_name(
    tmp_path: Path, ws: Path, command: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the host backend (no exec check) under posture unrestricted, ``rm`` is a program
    the judge knows to start nothing else, and ``run_shell(/bin/rm *)`` was compared with
    the word as written: ``rm -f s.txt`` ran unasked and removed the file. Which file a
    name reaches is the PATH search's, known only at exec: such a line now asks."""
    code, records = _call(
        tmp_path, ws, command, policy, "--backend", "host", "--posture", "unrestricted"
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] == "ask", decided
    assert "names its program by a path" in decided["reason"], decided
    assert "started" not in [r["kind"] for r in records]
    assert (ws / "s.txt").read_text() == "hello\n"


def test_a_program_a_rule_names_by_path_is_still_denied_as_spelled_and_others_run(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The path spelled as in the rule is still denied; a program of another name runs."""
    policy = 'deny = ["run_shell(/bin/rm *)"]\n'
    code, records = _call(
        tmp_path, ws, "/bin/rm -f s.txt", policy, "--backend", "host", "--posture", "unrestricted"
    )
    capsys.readouterr()
    assert code == 3 and _decided(records)["verdict"] == "deny"
    code, records = _call(
        tmp_path, ws, "mkdir made", policy, "--backend", "host", "--posture", "unrestricted"
    )
    capsys.readouterr()
    assert code == 0 and (ws / "made").is_dir() and (ws / "s.txt").exists()


# A redirection whose file the text does not settle, under file rules alone.
UNSETTLED_TARGETS = [
    "cd sub && echo planted > .env",
    "f=sub/.env; echo planted > $f",
    'echo planted > "$(echo sub)/.env"',
    # wrappers that start their command in another directory, as a cd does
    "env -C sub sh -c 'echo planted > .env'",
    "env --chdir=sub sh -c 'echo planted > .env'",
    "find . -name keep -execdir sh -c 'echo planted > .env' \\;",
]


@pytest.mark.parametrize("command", UNSETTLED_TARGETS)
def test_a_redirection_the_text_does_not_settle_asks_under_file_rules_alone(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy with ``write_file`` rules and no ``run_shell`` rule judged a line's
    redirections apart, and kept only those a rule matched: the ask for a target computed
    at run time or relative after a ``cd`` was dropped, so each line wrote ``sub/.env``
    unasked under ``write_file(path=sub/.env)`` (with any ``run_shell`` rule beside it,
    the same line asked). Now it asks either way; so does a wrapper that starts its
    command in another directory (``env -C``, ``find -execdir``), which was no ``cd``."""
    (ws / "sub").mkdir()
    (ws / "sub" / "keep").write_text("k\n")
    code, records = _call(
        tmp_path, ws, command, 'deny = ["write_file(path=sub/.env)"]\n', "--posture",
        "unrestricted",
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] == "ask", decided
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "sub" / ".env").exists()


# Lines whose own syntax the parser does not read whole, each writing sub/.env.
DAMAGED_PARSES = [
    "echo planted 1<>sub/.env",  # tree-sitter-bash: `echo planted 1<sub/.env` and an error
    "echo planted > sub/.e\\\nnv",  # a line continuation: not parsed at all
]
FILE_POLICIES = [
    'deny = ["write_file(path=sub/.env)"]\n',
    'deny = ["write_file(path=sub/.env)", "run_shell(curl *)"]\n',
]


@pytest.mark.parametrize("policy", FILE_POLICIES)
@pytest.mark.parametrize("command", DAMAGED_PARSES)
def test_a_line_the_parser_cannot_read_whole_asks_while_file_rules_apply(
    tmp_path: Path, ws: Path, command: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The redirections of a line the parser could not read whole were judged as far as it
    read them: ``echo planted 1<>sub/.env`` (``<>`` opens for writing) was read as a read
    of ``sub/.env`` and a parse error, and a line continuation left the line unparsed, so
    each wrote ``sub/.env`` under ``write_file(path=sub/.env)`` (posture unrestricted, on
    the confined backend, whose exec checks see programs, not opens). Now it asks."""
    (ws / "sub").mkdir()
    code, records = _call(tmp_path, ws, command, policy, "--posture", "unrestricted")
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] == "ask", decided
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "sub" / ".env").exists()


@pytest.mark.parametrize("target", ["../ws/sub/.env", "sub/../../ws/sub/.env"])
def test_a_redirection_that_climbs_out_of_the_root_and_back_meets_the_rule(
    tmp_path: Path, ws: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A relative target was normalized on its own: ``../ws/sub/.env`` (from the root ``ws``)
    stayed ``../ws/sub/.env``, which ``write_file(path=sub/.env)`` does not name, and the
    line wrote ``sub/.env``. It is judged as the place it names from the directory the
    command starts in."""
    (ws / "sub").mkdir()
    assert ws.name == "ws"
    code, records = _call(
        tmp_path, ws, f"echo planted > {target}", 'deny = ["write_file(path=sub/.env)"]\n',
        "--posture", "unrestricted",
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    assert _decided(records)["verdict"] == "deny", _decided(records)
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "sub" / ".env").exists()


def test_a_redirection_the_text_settles_still_runs_under_file_rules_alone(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _records = _call(
        tmp_path, ws, "echo fine > sub.txt", 'deny = ["write_file(path=sub/.env)"]\n',
        "--posture", "unrestricted",
    )  # fmt: skip
    capsys.readouterr()
    assert code == 0 and (ws / "sub.txt").read_text() == "fine\n"


# A variable of the shell's or the utilities' (PATH, BASH_ENV: no lowercase letter) assigned
# by something other than `NAME=value`: a known program (`ls`) then runs the workspace's own
# bin/ls, or a shell sources a file first.
SHELL_VARIABLES = [
    "for PATH in bin; do ls; done",
    "bash -c 'printf -v PATH %s bin; ls'",
    "getopts b PATH -b; ls",
    "set -a; : ${BASH_ENV:=./env.sh}; bash -c ls",
    "set -a; for BASH_ENV in ./env.sh; do bash -c ls; done",
    # xargs sets the variable in each child before it looks the program up (PATH=0: ./0/ls)
    "ln -s bin 0; echo a | xargs --process-slot-var=PATH ls",
]


@pytest.mark.parametrize("command", SHELL_VARIABLES)
def test_without_the_exec_check_a_shell_variable_assigned_otherwise_asks(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the host backend under posture unrestricted with a deny rule for touch: each of
    these was read whole (a for loop's variable, `printf -v`, `getopts`, `${X:=…}` were not
    assignments to the judge), every command known or allowed, and ran `touch MARK` unasked
    through bin/ls or BASH_ENV. Now such an assignment makes the line unresolved: asked."""
    _plant_bin_ls(ws)
    (ws / "b").symlink_to("bin")  # (getopts sets PATH to the option's letter)
    (ws / "env.sh").write_text("touch MARK\n")
    _host_asks(tmp_path, ws, command, capsys, because="cannot be enforced at exec on this backend")


# bash's keyword option: every `NAME=value` word of a command, wherever it stands, goes into
# the command's environment, and bash looks the program up on that PATH.
KEYWORD_LINES = [
    "bash -c 'set -k; ls PATH=bin'",
    "bash -c 'set -o keyword; ls PATH=bin'",
    "bash -c 'set -ek; ls PATH=bin'",
    "bash -k -c 'ls PATH=bin'",
    "bash -o keyword -c 'ls PATH=bin'",
]


@pytest.mark.parametrize("command", KEYWORD_LINES)
def test_without_the_exec_check_the_keyword_option_asks(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the host backend under posture unrestricted with a deny rule for touch: `set -k`
    (or `bash -k`) and then `ls PATH=bin` was read whole, `set` and `ls` known programs and
    `PATH=bin` an argument, and bash ran the workspace's bin/ls, which ran `touch MARK`,
    unasked. Now the keyword option makes the line unresolved: asked."""
    _plant_bin_ls(ws)
    _host_asks(tmp_path, ws, command, capsys, because="keyword option")


@pytest.mark.parametrize("command", ["chroot . ls", "unshare -r -R . ls", "unshare --root=. ls"])
def test_without_the_exec_check_a_command_under_another_root_asks(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chroot . ls` (as root) or `unshare -r -R . ls` (a user namespace) looks `ls` up below
    the workspace: its planted `usr/bin/ls`, a script for a copy of a static busybox, ran
    `touch MARK` unasked on host under posture unrestricted and a deny rule for touch (`ls`
    a known program, read whole). Now another root makes the line unresolved: asked."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("needs a busybox")
    (ws / "bin").mkdir()
    shutil.copy(busybox, ws / "bin" / "busybox")
    (ws / "usr" / "bin").mkdir(parents=True)
    (ws / "usr" / "bin" / "ls").write_text("#!/bin/busybox sh\n/bin/busybox touch /MARK\n")
    (ws / "usr" / "bin" / "ls").chmod(0o755)
    _host_asks(tmp_path, ws, command, capsys, because="under another root directory")


def test_the_keyword_option_asks_under_an_ask_rule_with_the_exec_check(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ask rule is never enforced at exec: on the confined backend under posture
    unrestricted and `ask = run_shell(touch*)`, `bash -c 'set -k; ls PATH=bin'` ran the
    workspace's bin/ls and its `touch MARK` without a question. Now it asks."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    _plant_bin_ls(ws)
    code, records = _call(
        tmp_path, ws, KEYWORD_LINES[0], 'ask = ["run_shell(touch*)"]\n',
        "--backend", "local", "--posture", "unrestricted",
    )  # fmt: skip
    _asked_and_nothing_ran(ws, code, records, capsys)
    assert "keyword option" in _decided(records)["reason"], records


def test_set_without_the_keyword_option_is_still_read_whole(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: `set -e`, `set -o errexit`, `set +k`, `set -- -k` and `bash -o errexit` leave the line
    read whole (the posture decides, unrestricted: it runs)."""
    command = "mkdir made; set +k; set -- -k; bash -o errexit -c ls; set -o errexit; set -e"
    code, records = _call(
        tmp_path, ws, command, POLICY_DENY, "--backend", "host", "--posture", "unrestricted"
    )
    capsys.readouterr()
    assert code == 0
    assert _decided(records)["verdict"] == "allow"
    assert (ws / "made").is_dir()


def test_a_lowercase_loop_variable_is_still_read_whole(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: an application's own variable (lowercase) stays allowed by its rules."""
    command = "for f in a b; do echo $f; done; bash -c 'printf -v x %s 1'; echo ${y:=1}"
    code, records = _call(
        tmp_path, ws, command, POLICY_DENY, "--backend", "host", "--posture", "ask"
    )
    _allowed_and_ran(code, records, capsys)


def test_without_the_exec_check_a_known_program_is_still_the_postures(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The judge stays useful: a program known to start nothing else runs under the posture."""
    code, records = _call(
        tmp_path, ws, "mkdir made", POLICY_DENY, "--backend", "host", "--posture", "unrestricted"
    )
    capsys.readouterr()
    assert code == 0
    assert _decided(records)["verdict"] == "allow"
    assert (ws / "made").is_dir()


# A deny rule naming a shell builtin: the builtin runs inside the shell, so no exec check
# sees it. Each line writes MARK with the builtin `printf` (or sends a signal with `kill`)
# where the judge cannot read it; on the confined backend (exec checks) each ran under
# allow-reversible without a question.
BUILTIN_LINES = [
    "x=printf; $x hi > MARK",
    'eval "printf hi > MARK"',
    "echo 'printf hi > MARK' > s; . ./s",
    "python3 -c 'import os; os.system(\"printf hi > MARK\")'",
    "echo 'printf hi > MARK' | xargs -I{} sh -c {}",
    # bash evaluates an array subscript in a name given to its own builtins (`test -v`,
    # `printf -v`, `wait -p`) as arithmetic, which runs `$(…)`: the words look like strings
    "bash -c \"test -v 'a[\\$(printf hi > MARK)]'\"",
    "bash -c \"test -n x -a ! -v 'a[\\$(printf hi > MARK)]'\"",
    "bash -c \"sleep 0 & wait -n -p 'a[\\$(printf hi > MARK)]'\"",
    "bash -c \"sleep 0; [[ -v 'a[\\$(printf hi > MARK)]' ]]\"",
]
POLICY_DENY_BUILTIN = 'deny = ["run_shell(printf *)", "run_shell(kill *)"]\n'


@pytest.mark.parametrize("command", BUILTIN_LINES)
def test_a_deny_rule_on_a_shell_builtin_is_the_judges_even_with_exec_checks(
    tmp_path: Path, ws: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Builtins never reach an exec check: with a deny rule naming one, a line the judge
    cannot read whole asks on every backend, and nothing runs."""
    code, records = _call(
        tmp_path,
        ws,
        command,
        POLICY_DENY_BUILTIN,
        "--backend",
        "local",
        "--posture",
        "allow-reversible",
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] in ("ask", "deny"), decided
    if decided["verdict"] == "ask":
        assert "could make it match" in decided["reason"] or "shell builtin" in decided["reason"]
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "MARK").exists()


def test_a_deny_rule_on_a_program_is_still_carried_by_the_exec_check(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: with a deny rule on a program (not a builtin) the same unread line goes
    to the posture on the confined backend, and the exec check refuses the program."""
    code, records = _call(
        tmp_path,
        ws,
        'eval "touch MARK"',
        'deny = ["run_shell(touch *)"]\n',
        "--backend",
        "local",
        "--posture",
        "allow-reversible",
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["result"]["exit_code"] == 126, out
    assert "touch: Permission denied" in out["result"]["stderr"], out
    assert _decided(records)["verdict"] == "allow"
    assert [r for r in records if r["kind"] == "exec_denied"], records
    assert not (ws / "MARK").exists()


# Rules over the line's text (`command~REGEX`, a `[[rules]]` `args.command` glob): no exec
# check carries one, so a line that spells the program at run time ran unasked past them
# (under allow-reversible on local, unrestricted on host; an ask rule under unrestricted).
TEXT_RULES = {
    "regex-deny": 'deny = ["run_shell(command~touch)"]\n',
    "glob-deny": '[[rules]]\neffect = "deny"\ntool = "run_shell"\nargs = { command = "*touch*" }\n',
    "regex-ask": 'ask = ["run_shell(command~touch)"]\n',
}
TEXT_RULE_LINES = [
    'eval "tou""ch MARK"',
    "x=tou; ${x}ch MARK",
    'python3 -c \'import os; os.system("tou" + "ch MARK")\'',
]


@pytest.mark.parametrize("backend", ["local", "host"])
@pytest.mark.parametrize("rule", sorted(TEXT_RULES))
@pytest.mark.parametrize("command", TEXT_RULE_LINES)
def test_a_rule_over_the_lines_text_asks_about_a_line_it_cannot_read(
    tmp_path: Path,
    ws: Path,
    command: str,
    rule: str,
    backend: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The text is all such a rule sees, on every backend: an unread line asks."""
    posture = "allow-reversible" if backend == "local" else "unrestricted"
    code, records = _call(
        tmp_path, ws, command, TEXT_RULES[rule], "--backend", backend, "--posture", posture
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] == "ask", decided
    assert "started" not in [r["kind"] for r in records]
    assert not (ws / "MARK").exists()


def test_a_rule_over_the_lines_text_still_denies_its_text_and_lets_the_rest_run(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the text it matches is denied, a line read whole runs."""
    policy = TEXT_RULES["regex-deny"]
    options = ("--backend", "local", "--posture", "allow-reversible")
    code, records = _call(tmp_path, ws, "touch MARK", policy, *options)
    capsys.readouterr()
    assert code == 3 and _decided(records)["verdict"] == "deny"
    code, records = _call(tmp_path, ws, "mkdir made", policy, *options)
    capsys.readouterr()
    assert code == 0 and _decided(records)["verdict"] == "allow"
    assert (ws / "made").is_dir() and not (ws / "MARK").exists()


ARGV_TEXT_RULES = {
    "regex": 'deny = ["run_shell(command~rm\\\\s+-rf)"]\n',
    "glob": '[[rules]]\neffect = "deny"\ntool = "run_shell"\nargs = { command = "rm -rf *" }\n',
}


@pytest.mark.parametrize("backend", ["local", "host"])
@pytest.mark.parametrize("rule", sorted(ARGV_TEXT_RULES))
def test_a_rule_over_the_lines_text_holds_for_an_argv_list(
    tmp_path: Path, ws: Path, backend: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``command`` given as an argv list was matched by a text rule element by element:
    ``["rm", "-rf", "victim"]`` passed ``command~rm\\s+-rf`` (and ``args.command = "rm -rf
    *"``), which the same line as a string met, and removed the directory. The list is
    matched as the line it stands for (``shlex.join``) too."""
    (ws / "victim").mkdir()
    (ws / "victim" / "f").write_text("kept\n")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(ARGV_TEXT_RULES[rule])
    events = tmp_path / "events.jsonl"
    argv = ["call", "run_shell", "--args", json.dumps({"command": ["rm", "-rf", "victim"]})]
    argv += ["--workspace", str(ws), "--approve", "no", "--policy", str(policy_file)]
    argv += ["--events", str(events), "--json", "--backend", backend, "--posture", "unrestricted"]
    code = main(argv)
    out = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    assert code == 3 and out["error"]["code"] == "denied", out
    assert _decided(records)["verdict"] == "deny", _decided(records)
    assert "started" not in [r["kind"] for r in records]
    assert (ws / "victim" / "f").read_text() == "kept\n"


# bash's own syntax that /bin/sh (dash here) parses into other commands: the judge read it as
# bash does (a test, a quoted string), and `ls*`/`echo*` allowed each; dash ran `[[ x` and then
# `rm -rf victim ]]`, redirected `> MARK`, or read `$'a\'` as `$a\` and ran `touch MARK`.
# (line, what it leaves if it runs)
DIALECT_LINES = [
    ("ls; [[ x || rm -rf victim ]]", "victim gone"),
    ("ls; [[ a > MARK ]]", "MARK"),
    ("echo $'a\\' ; touch MARK # \\''", "MARK"),
    # a here-document's end: the shell ends it at `E` (`E''` after quote removal; dash's `$X`
    # for `$'X'`), tree-sitter-bash at `E''` (`X`): `touch MARK` was the body's text to it
    ("ls <<E''\nE\ntouch MARK\nE''", "MARK"),
    ("ls <<$'X'\n$X\ntouch MARK\nX\n", "MARK"),
    # bash's `&>` is `&` and `>` to dash: `touch MARK` after the target is a command of its own
    ("echo hi &> out touch MARK", "MARK"),
    # a carriage return, vertical tab or form feed: a blank to tree-sitter-bash (so `#` began
    # a comment), part of a word to the shells
    ("ls \r#; touch MARK", "MARK"),
    ("ls a\v#b; touch MARK", "MARK"),
    ("ls <\f\ntouch MARK", "MARK"),
]
POLICY_DIALECT = (
    'deny = ["run_shell(rm *)", "run_shell(touch *)", "write_file(path=MARK)"]\n'
    'allow = ["run_shell(ls*)", "run_shell(echo*)"]\n'
)


@pytest.mark.parametrize(
    ("backend", "posture"), [("host", "unrestricted"), ("local", "ask")], ids=["host", "local"]
)
@pytest.mark.parametrize(("command", "effect"), DIALECT_LINES, ids=[c for c, _ in DIALECT_LINES])
def test_bash_syntax_that_dash_runs_otherwise_is_not_read_whole(
    tmp_path: Path,
    ws: Path,
    command: str,
    effect: str,
    backend: str,
    posture: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each was `allow` (an allow rule under ask; no deny rule matched on host under
    unrestricted), and dash did what the deny rules name; now each is asked."""
    (ws / "victim").mkdir()
    (ws / "victim" / "keep").write_text("keep\n")
    code, records = _call(
        tmp_path, ws, command, POLICY_DIALECT, "--backend", backend, "--posture", posture
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["code"] == "denied", out
    decided = _decided(records)
    assert decided["verdict"] == "ask", decided
    assert "started" not in [r["kind"] for r in records]
    assert (ws / "victim" / "keep").exists() and not (ws / "MARK").exists(), effect


def test_bash_syntax_inside_bash_c_is_still_read(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: inside `bash -c` the text is bash's, and is read as bash reads it."""
    command = "bash -c '[[ -n x ]] && echo $'\\''a'\\'' && ls'"
    code, records = _call(
        tmp_path, ws, command, POLICY_DIALECT, "--backend", "local", "--posture", "ask"
    )
    _allowed_and_ran(code, records, capsys)


SCRIPT = """
outcomes = []
for command in {commands!r}:
    try:
        call_tool("run_shell", command=command)
        outcomes.append("ran " + command)
    except ToolError as error:
        outcomes.append(error.code + " " + command)
result = outcomes
"""


def test_a_session_grant_on_a_command_covers_every_command_of_the_line_or_nothing(
    tmp_path: Path, ws: Path
) -> None:
    """Finding 3 at the terminal: `s command=ls*` for `ls` covered `ls; touch MARK`."""
    source = tmp_path / "script.py"
    commands = ["ls", "ls -la", "ls; touch MARK", "ls | ls", "ls $(touch MARK)"]
    source.write_text(SCRIPT.format(commands=commands))
    run = run_on_pty(
        ["run-script", str(source), "--workspace", str(ws), "--posture", "ask"],
        tmp_path,
        new_session=True,
        prompt=b"[d]eny?",
        # the script itself, the first `ls` (granted for ls*), then the two attacks (denied)
        answers=[b"o\n", b"s command=ls*\n", b"d\n", b"d\n"],
    )
    assert run.output.count("[d]eny?") == 4, run.output
    assert "ran ls -la" in run.output and "ran ls | ls" in run.output, run.output
    assert "denied ls; touch MARK" in run.output, run.output
    assert "denied ls $(touch MARK)" in run.output, run.output
    assert not (ws / "MARK").exists()


def test_a_command_pattern_may_be_quoted_and_a_bad_one_is_asked_again(
    tmp_path: Path, ws: Path
) -> None:
    source = tmp_path / "script.py"
    commands = ["git status", "git status --short", "git log -1"]
    source.write_text(SCRIPT.format(commands=commands))
    run = run_on_pty(
        ["run-script", str(source), "--workspace", str(ws), "--posture", "ask"],
        tmp_path,
        new_session=True,
        prompt=b"[d]eny?",
        answers=[b"o\n", b"s command='git status\n", b's command="git status*"\n', b"d\n"],
    )
    assert "cannot read the answer" in run.output, run.output
    assert "ran git status --short" in run.output, run.output
    assert "denied git log -1" in run.output, run.output


def test_a_session_grant_on_a_builtin_does_not_cover_a_subscript_bash_runs(
    tmp_path: Path, ws: Path
) -> None:
    """`s command=test*` for `test -n x` covered `bash -c "test -v 'a[$(touch MARK)]'"`
    (read as a plain `test`), and bash ran touch: now that line is asked again."""
    source = tmp_path / "script.py"
    commands = ["test -n x", "bash -c \"test -v 'a[\\$(touch MARK)]'\""]
    source.write_text(SCRIPT.format(commands=commands))
    run = run_on_pty(
        ["run-script", str(source), "--workspace", str(ws), "--posture", "ask"],
        tmp_path,
        new_session=True,
        prompt=b"[d]eny?",
        answers=[b"o\n", b"s command=test*\n", b"d\n"],
    )
    assert run.output.count("[d]eny?") == 3, run.output
    assert "ran test -n x" in run.output, run.output
    assert "denied bash -c" in run.output, run.output
    assert not (ws / "MARK").exists()


# An ask rule has no exec check on any backend: a program the judge does not know may
# start what the rule names, written plainly on the line (`linux64 touch MARK`). Each of
# these ran unasked under posture unrestricted and made MARK.
ASK_LAUNCHERS: list[tuple[str, tuple[str, ...]]] = [
    ("linux64 touch MARK", ("linux64",)),
    ("setarch x86_64 touch MARK", ("setarch",)),
    ("ssh -o ProxyCommand='touch MARK' -o BatchMode=yes x", ("ssh",)),
    ("mkdir d && printf '#!/bin/sh\\ntouch MARK\\n' > d/a && chmod +x d/a && run-parts d", ()),
]
POLICY_ASK = 'ask = ["run_shell(touch*)"]\n'


@pytest.mark.parametrize("backend", ["local", "host"])
@pytest.mark.parametrize(("command", "needs"), ASK_LAUNCHERS, ids=[c for c, _ in ASK_LAUNCHERS])
def test_an_ask_rule_asks_about_a_program_the_judge_does_not_know(
    tmp_path: Path,
    ws: Path,
    command: str,
    needs: tuple[str, ...],
    backend: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An ask rule is never enforced at exec, so a program not known to start nothing else
    asks while one applies, as it does for a deny rule without an exec check."""
    missing = [n for n in (*needs, "run-parts") if shutil.which(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    if backend == "local" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    code, records = _call(
        tmp_path, ws, command, POLICY_ASK, "--backend", backend, "--posture", "unrestricted"
    )
    _asked_and_nothing_ran(ws, code, records, capsys)
    assert "ask rules are not enforced at exec" in _decided(records)["reason"], records


def test_an_ask_rule_leaves_a_program_known_to_start_nothing_to_the_posture(
    tmp_path: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, records = _call(
        tmp_path, ws, "mkdir made", POLICY_ASK, "--backend", "host", "--posture", "unrestricted"
    )
    capsys.readouterr()
    assert code == 0 and _decided(records)["verdict"] == "allow", records
    assert (ws / "made").is_dir()
