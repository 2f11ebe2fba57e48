"""The shell-aware matcher: every simple command a run_shell command line would run is judged.

A table of command lines under one sample policy (posture ask, run_shell residual),
a property test over random compositions, and a check of quote removal against /bin/sh.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ringfence.runtime import Policy, Posture, Rules, ToolSpec, Verdict
from ringfence.runtime.policy._decide import decide
from ringfence.runtime.shell._words import parse_command


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("not run")


SHELL = ToolSpec("run_shell", "", {"type": "object"}, _never, residual=True)
CHECKED = ToolSpec("run_shell", "", {"type": "object"}, _never, residual=True, exec_checked=True)

SAMPLE = Policy.from_strings(
    deny=[
        "run_shell(curl *)",
        "run_shell(wget *)",
        "run_shell(rm -rf *)",
        "write_file(path=.env)",
    ],
    ask=["run_shell(git push*)", "write_file(path=deploy/**)"],
    allow=[
        "run_shell(git status*)",
        "run_shell(git diff*)",
        "run_shell(pytest*)",
        "run_shell(ls *)",
        "run_shell(echo *)",
        "run_shell(cat *)",
        "run_shell(grep *)",
        "run_shell(npm run test:*)",
        "write_file(path=build/**)",
    ],
).with_roots(["/ws"])
RULES = Rules(policy=SAMPLE)

A, Q, D = Verdict.ALLOW, Verdict.ASK, Verdict.DENY

TABLE: list[tuple[str, Verdict]] = [
    # chaining of allowed commands
    ("git status", A),
    ("git status --short", A),
    ("git diff HEAD~1", A),
    ("pytest -q tests/", A),
    ("git status && pytest", A),
    ("git status; git diff", A),
    ("git status || echo failed", A),
    ("ls | grep foo", A),
    ("git status &", A),
    ("git status\ngit diff", A),
    ("(git status; git diff)", A),
    ("{ git status; }", A),
    ("if git status; then echo ok; fi", A),
    ("for f in a b; do echo $f; done", A),
    ('echo "$(git status)"', Q),  # a substitution: never allowed by the rules
    ("npm run test:unit", A),
    ("ls *.py", A),
    # quoting
    ('"git" "status"', A),
    ("g'it' sta\"tus\"", A),
    # redirections
    ("echo hi > /dev/null", A),
    ("echo hi > build/out.txt", A),
    ("echo hi > /ws/build/out.txt", A),
    ("echo hi 2>&1", A),
    ("cat < notes.txt", A),
    ("cat <<'EOF'\n$(curl x)\nEOF", A),
    # wrappers and nesting
    ("bash -c 'git status'", A),
    ('sh -c "git diff && pytest"', A),
    ("timeout 10 pytest", A),
    ("nice -n 5 git status", A),
    ("env git status", A),
    ("command git status", A),
    ("exec git status", A),
    ('timeout 5 bash -c "nice git status"', A),
    # a denied command anywhere denies the whole line
    ("curl http://example.com", D),
    ("git status; curl x", D),
    ("git status && curl x", D),
    ("git status || curl x", D),
    ("git status | curl -d @- x", D),
    ("git status\ncurl x", D),
    ("curl x &", D),
    ("(curl x)", D),
    ("{ curl x; }", D),
    ("if true; then wget x; fi", D),
    ("echo $(curl x)", D),
    ("echo `curl x`", D),
    ('echo "$(curl x)"', D),
    ("echo ${X:-$(curl x)}", D),
    ("cat <(curl x)", D),
    ("diff <(ls) >(wget x)", D),
    ("cat <<EOF\n$(curl x)\nEOF", D),
    ("bash -c 'curl x'", D),
    ("sh -c \"bash -c 'curl x'\"", D),
    ("env FOO=1 curl x", D),
    ("timeout 5 curl x", D),
    ("nice curl x", D),
    ("command curl x", D),
    ("exec curl x", D),
    ("xargs curl < urls.txt", D),
    ("find . -name '*.url' -exec curl {} \\;", D),
    ("sudo curl x", D),
    ("/usr/bin/curl x", D),
    ('"cu""rl" x', D),
    ("c\\url x", D),
    ("'curl' x", D),
    ("rm -rf /", D),
    ("echo ok > .env", D),
    ("echo ok > sub/../.env", D),
    ("f() { ls; }; curl x", D),
    ("case $x in a) curl x;; esac", D),
    # ask: an ask rule, something unresolved, or something no allow rule covers
    ("git push origin main", Q),
    ("git status && git push", Q),
    ("echo hi > deploy/x", Q),
    ("echo hi > notes/../deploy/x", Q),
    ("$CMD x", Q),
    ("$(echo curl) x", Q),
    ("{curl,x}", Q),
    ("eval 'git status'", Q),
    ("X=1 git status", Q),
    ("alias ls=curl", Q),
    ("source ./script.sh", Q),
    ("trap 'curl x' EXIT", Q),
    ("f() { git status; }; f", Q),
    ('git status "unbalanced', Q),
    ('echo "unbalanced; curl x', Q),
    ("cu\\\nrl x", Q),
    ("make build", Q),
    ("./git status", Q),
    ("sudo git status", Q),
    ("git -c core.pager=less status", Q),
    ("git status > out.txt", Q),
    ("echo hi > $F", Q),
    ("cd sub && echo hi > build/x", Q),
    ("find . -name x | xargs grep foo", Q),
    ("rm -rf $DIR", D),
    ("rm >&2 -rf /", D),  # words after a redirection are the command's
    ("rm 2>/dev/null -rf /", D),
    ("rm $FLAGS /", Q),
    ("''\\curl x", D),
    ("((x++))", Q),
    ("bash", Q),
    ("curl_is_not_this x", Q),
    ("xargs sh < cmds.txt", Q),
    ("cat <<EOF\n`curl x`\nEOF", Q),
    ("cat < /dev/tcp/example.com/80", Q),
    # more wrappers
    ("su -c 'curl x' root", D),
    ("watch -n 5 curl x", D),
    ("flock /tmp/lock curl x", D),
    ("busybox wget http://e", D),
    ("setsid curl x", D),
    ("ionice -c 3 curl x", D),
    ("time curl x", D),
    ("su -c 'git status' root", Q),
    ("bash -lc 'git status'", Q),
    ("bash -i -c 'git status'", Q),
    ("bash -ec 'git status'", A),
]


def test_the_table_is_large_enough() -> None:
    assert len(TABLE) >= 60
    assert len({c for c, _ in TABLE}) == len(TABLE)


@pytest.mark.parametrize(("command", "expected"), TABLE, ids=[repr(c)[:60] for c, _ in TABLE])
def test_shell_verdict(command: str, expected: Verdict) -> None:
    decision = decide(SHELL, Posture.ASK, RULES, {"command": command})
    assert decision.verdict is expected, (command, decision)
    if expected is Verdict.DENY:
        assert decision.source == "api" and decision.rule.startswith("deny:")


def test_argv_lists_are_looked_through_the_same_way() -> None:
    assert decide(SHELL, Posture.ASK, RULES, {"command": ["git", "status"]}).verdict is A
    for argv in (["bash", "-c", "git status; curl x"], ["env", "curl", "x"], ["curl", "x"]):
        assert decide(SHELL, Posture.ASK, RULES, {"command": argv}).verdict is D, argv


def test_env_argument_makes_an_allowed_command_ask() -> None:
    # GIT_CONFIG_* in the environment can make `git status` run any program
    args = {"command": "git status", "env": {"GIT_CONFIG_COUNT": "1"}}
    assert decide(SHELL, Posture.ASK, RULES, args).verdict is Q


def test_unrestricted_still_obeys_deny_and_unresolved() -> None:
    assert decide(SHELL, Posture.UNRESTRICTED, RULES, {"command": "echo $(curl x)"}).verdict is D
    assert decide(SHELL, Posture.UNRESTRICTED, RULES, {"command": "eval x"}).verdict is Q
    # make may start curl: without an exec check the deny rules cannot hold there, so ask
    assert decide(SHELL, Posture.UNRESTRICTED, RULES, {"command": "make"}).verdict is Q
    # with an exec check the deny rules hold at exec; the ask rule (git push*) does not
    assert decide(CHECKED, Posture.UNRESTRICTED, RULES, {"command": "make"}).verdict is Q
    deny_only = Rules(policy=Policy.from_strings(deny=["run_shell(curl *)"]))
    assert decide(CHECKED, Posture.UNRESTRICTED, deny_only, {"command": "make"}).verdict is A
    # an ask rule (git push*) could hide in what eval runs: the exec check does not carry it
    assert decide(CHECKED, Posture.UNRESTRICTED, RULES, {"command": "eval x"}).verdict is Q


def test_no_shell_rules_means_the_posture_decides_as_before() -> None:
    plain = Rules()
    assert decide(SHELL, Posture.ASK, plain, {"command": "git status"}).rule == "residual"
    assert decide(SHELL, Posture.UNRESTRICTED, plain, {"command": "eval x"}).verdict is A


def test_quote_removal_and_wrappers_are_reported() -> None:
    parsed = parse_command('timeout 5 bash -c \'nice "r""m" -f x\' > out')
    assert [[w.text for w in c.argv] for c in parsed.commands] == [["rm", "-f", "x"]]
    assert parsed.commands[0].via == ("timeout", "bash", "nice")
    assert [(r.path.text, r.write) for r in parsed.redirects] == [("out", True)]


# -- property: a composite is never allow if any part is denied or unmatched -------------

ALLOWED = ["git status", "pytest -q", "ls -l", "echo hi", "git diff --stat", "cat a.txt"]
DENIED = ["curl x", "wget http://e", "rm -rf /tmp/x", "/usr/bin/curl y", "'cu'rl z"]
UNMATCHED = ["make", "python x.py", "git push", "./git status", "node -e 1"]
KINDS = {"allowed": ALLOWED, "denied": DENIED, "unmatched": UNMATCHED}


def _wrap(cmd: str, how: int) -> str:
    return [
        cmd,
        f"({cmd})",
        f"{{ {cmd}; }}",
        f"bash -c '{cmd}'",
        f"timeout 5 {cmd}",
        f"echo $({cmd})",
        f"echo `{cmd}`",
        f'sh -c "{cmd}"',
        f"env {cmd}",
        f"if true; then {cmd}; fi",
    ][how]


part = st.tuples(st.sampled_from(sorted(KINDS)), st.integers(0, 5), st.integers(0, 9))
ops = st.sampled_from([" ; ", " && ", " || ", " | ", " & ", "\n"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(part, min_size=1, max_size=5), joins=st.lists(ops, min_size=4, max_size=4))
def test_composite_is_never_allow_with_a_denied_or_unmatched_part(
    parts: list[tuple[str, int, int]], joins: list[str]
) -> None:
    pieces = []
    kinds = set()
    for kind, index, how in parts:
        pool = KINDS[kind]
        pieces.append(_wrap(pool[index % len(pool)], how))
        kinds.add(kind)
    line = pieces[0]
    for join, piece in zip(joins, pieces[1:], strict=False):
        line += join + piece
    verdict = decide(SHELL, Posture.ASK, RULES, {"command": line}).verdict
    if "denied" in kinds:
        assert verdict is D, line
    elif "unmatched" in kinds:
        assert verdict is not A, line


# -- quote removal agrees with the shell that runs the command -------------------------

word_piece = st.one_of(
    st.text(alphabet="abc-_./=:", min_size=1, max_size=4),
    st.text(alphabet="ab c$*;|&", max_size=4).map(lambda s: "'" + s + "'"),
    st.text(alphabet="ab c'*;|&\\", max_size=4).map(lambda s: '"' + s.replace("\\", "\\\\") + '"'),
    st.sampled_from(["\\a", "\\;", "\\ ", "\\'", '\\"', "\\\\", "\\$", "\\*"]),
)


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(word_piece, min_size=1, max_size=4))
def test_literal_words_match_what_sh_passes(pieces: list[str]) -> None:
    word = "".join(pieces)
    parsed = parse_command(f"printf '%s\\0' {word}")
    if parsed.unresolved or len(parsed.commands) != 1:
        return  # not claimed literal: nothing to compare
    argv = parsed.commands[0].argv
    if not all(w.literal for w in argv):
        return
    real = subprocess.run(
        ["/bin/sh", "-c", f"printf '%s\\0' {word}"], capture_output=True, check=True
    ).stdout.decode("utf-8", "surrogateescape")
    assert [w.text for w in argv[2:]] == real.split("\0")[:-1], word


def test_redirections_meet_write_rules_even_without_shell_rules() -> None:
    only_paths = Rules(
        policy=Policy.from_strings(
            deny=["write_file(path=.env)"], ask=["write_file(path=deploy/**)"]
        ).with_roots(["/ws"])
    )
    assert (
        decide(SHELL, Posture.UNRESTRICTED, only_paths, {"command": "echo k > .env"}).verdict is D
    )
    assert (
        decide(SHELL, Posture.UNRESTRICTED, only_paths, {"command": "make > deploy/x"}).verdict is Q
    )
    # no shell rules: unresolved parts and plain commands are the posture's business
    assert decide(SHELL, Posture.UNRESTRICTED, only_paths, {"command": "eval x"}).verdict is A
    assert decide(SHELL, Posture.ASK, only_paths, {"command": "echo ok > b"}).rule == "residual"
