"""The shell judge's shape (issue #29): resolved lines, the exec check, shell-aware grants.

Through the embedding API (``create_kernel`` with a policy and a ``ScriptedApprover``, the
real local backend) and through ``decide`` for the exec-check matrix: an unresolved line is
never allowed by an allow rule; a deny rule the judge cannot check on the text asks on a tool
without the exec check and is left to the exec check (the posture decides) on one with it;
an ask rule is never left to the exec check; a session grant on ``command`` covers a line
only when every command in it matches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ringfence import create_kernel
from ringfence.runtime import (
    ApprovalAnswer,
    ApprovalRequest,
    Consequence,
    Denied,
    Policy,
    Posture,
    Rules,
    ScriptedApprover,
    ToolSpec,
    Verdict,
)
from ringfence.runtime._approval import Grant, match_command
from ringfence.runtime.policy._decide import decide
from ringfence.runtime.shell._words import parse_command


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("not run")


def _shell(*, exec_checked: bool) -> ToolSpec:
    return ToolSpec(
        "run_shell",
        "",
        {"type": "object"},
        _never,
        consequence=Consequence.REVERSIBLE,
        exec_checked=exec_checked,
    )


UNCHECKED, CHECKED = _shell(exec_checked=False), _shell(exec_checked=True)
A, Q, D = Verdict.ALLOW, Verdict.ASK, Verdict.DENY


def _rules(deny: tuple[str, ...] = (), ask: tuple[str, ...] = ()) -> Rules:
    allow = ("run_shell(ls*)", "run_shell(echo*)", "run_shell(make*)")
    return Rules(policy=Policy.from_strings(deny=deny, ask=ask, allow=allow))


DENY_RM = _rules(deny=("run_shell(rm -rf *)",))
ASK_PUSH = _rules(ask=("run_shell(git push*)",))
ALLOW_ONLY = _rules()

# (command, rules, verdict without the exec check, verdict with it), posture allow-all
MATRIX = [
    # resolved and allowed: allowed either way
    ("ls -la", DENY_RM, A, A),
    ("ls ${HOME:-x}", DENY_RM, A, A),
    ("echo $((1 + 2))", DENY_RM, A, A),
    # unresolved (code at run time): never allowed by the rules; asks without the exec check
    ("ls $(pwd)", DENY_RM, Q, A),
    ("eval ls", DENY_RM, Q, A),
    ("ls ${x:-`pwd`}", DENY_RM, Q, A),
    ("echo $((x + 1))", DENY_RM, Q, A),
    ("printf ls | sh", DENY_RM, Q, A),
    ("python3 -c 'print(1)'", DENY_RM, Q, A),
    # a program the judge does not know, under a deny rule: asks only without the exec check
    ("node build.js", DENY_RM, Q, A),
    ("mkdir -p out", DENY_RM, A, A),  # known to start nothing: the posture's
    # a deny rule a computed word could match
    ("rm $FLAGS /", DENY_RM, Q, A),
    # an ask rule is never enforced at exec: an unread line asks either way
    ("eval 'git push'", ASK_PUSH, Q, Q),
    ("git $SUB origin", ASK_PUSH, Q, Q),
    # a program the judge does not know may start what an ask rule names (`linux64 git
    # push`): no exec check carries an ask rule, so it asks either way
    ("node build.js", ASK_PUSH, Q, Q),
    ("mkdir -p out", ASK_PUSH, A, A),  # known to start nothing: the posture's
    ("make", ASK_PUSH, A, A),  # an allow rule on a launcher allows what it launches
    # no deny or ask rule: nothing to protect, the posture decides
    ("eval ls", ALLOW_ONLY, A, A),
    ("node build.js", ALLOW_ONLY, A, A),
    # denied where the judge reads it, with or without the exec check
    ("ls `rm -rf /`", DENY_RM, D, D),
    ("ls ${x:-`rm -rf /`}", DENY_RM, D, D),
    ("ls `ls \\`rm -rf /\\``", DENY_RM, D, D),
    ("taskset 1 rm -rf /", DENY_RM, D, D),
]


@pytest.mark.parametrize(("command", "rules", "unchecked", "checked"), MATRIX)
def test_what_the_exec_check_carries(
    command: str, rules: Rules, unchecked: Verdict, checked: Verdict
) -> None:
    for tool, expected in ((UNCHECKED, unchecked), (CHECKED, checked)):
        decision = decide(tool, Posture.ALLOW_ALL, rules, {"command": command})
        assert decision.verdict is expected, (command, tool.exec_checked, decision)
        if expected is A and not parse_command(command).resolved:
            assert not decision.rule.startswith("allow:"), decision  # the posture's, not a rule's


def test_a_rule_over_the_tool_alone_allows_whatever_the_line_says() -> None:
    """`allow run_shell` (or over another argument) never reads the command: read or not."""
    for rules in (
        Rules(policy=Policy.from_strings(allow=["run_shell"])),
        Rules(policy=Policy.from_strings(allow=["run_shell", "run_shell(ls*)"])),
    ):
        for command in ("make", "ls $(pwd)", "eval ls"):
            decision = decide(CHECKED, Posture.ASK, rules, {"command": command})
            assert decision.rule == "allow:run_shell", (command, decision)


def test_the_reason_names_the_backend_when_the_deny_rules_cannot_be_enforced() -> None:
    decision = decide(UNCHECKED, Posture.UNRESTRICTED, DENY_RM, {"command": "printf x | sh"})
    assert decision.verdict is Q
    assert "cannot be enforced at exec on this backend" in decision.reason, decision


# -- finding 1 through the API: the line is asked about, nothing runs --------------------------


FINDING_1 = [
    "ls ${x:-`touch MARK`}",
    "ls ${HOME%%`touch MARK`}",
    "ls `ls \\`touch MARK\\``",
    "echo 'touch MARK' | xargs -I{} sh -c {}",
]


@pytest.mark.parametrize("command", FINDING_1)
async def test_an_allow_rule_no_longer_lets_text_that_runs_later_through(
    tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    log = tmp_path / "events.jsonl"
    policy = Policy.from_strings(allow=["run_shell(ls*)", "run_shell(echo*)"])
    approver = ScriptedApprover([])  # asking means no
    async with create_kernel(
        roots=[ws], posture="ask", approver=approver, policy=policy, events_path=log
    ) as kernel:
        outcome = await kernel.invoke("run_shell", {"command": command})
    assert isinstance(outcome.error, Denied), outcome
    assert len(approver.requests) == 1
    records = [json.loads(line) for line in log.read_text().splitlines()]
    mine = [r for r in records if r.get("call_id") == outcome.call_id]
    assert [r["kind"] for r in mine] == [
        "proposed",
        "decided",
        "approval_asked",
        "approval_answered",
        "failed",
    ]
    assert mine[1]["verdict"] == "ask" and mine[1]["rule"] == "posture:ask"
    assert not (ws / "MARK").exists()


# -- finding 3: grants on `command` are shell-aware ------------------------------------------------


@pytest.mark.parametrize(
    ("command", "covered"),
    [
        ("ls", True),
        ("ls -la src", True),
        ("ls | ls -1", True),
        ("ls && ls", True),
        ("ls > /dev/null", True),
        ("timeout 5 ls", True),
        ("sh -c 'ls; ls -a'", True),
        (["ls", "-la"], True),
        ("ls; touch MARK", False),
        ("ls && touch MARK", False),
        ("ls\ntouch MARK", False),
        ("ls | sh", False),
        ("ls $(touch MARK)", False),
        ("ls `touch MARK`", False),
        ("ls ${x:-`touch MARK`}", False),
        ("ls > MARK", False),
        ("eval ls", False),
        ("sh -c 'ls; touch MARK'", False),
        ("./ls", False),
        (["sh", "-c", "ls; touch MARK"], False),
        ("", False),
        (42, False),
    ],
)
def test_a_command_pattern_covers_a_line_only_when_every_command_matches(
    command: Any, covered: bool
) -> None:
    assert match_command(command, "ls*") is covered
    grant = Grant("run_shell", pattern={"command": "ls*"}, rest_key=b"{}")
    assert grant.matches("run_shell", {"command": command}) is covered


def test_a_multi_word_command_pattern_matches_like_a_rule() -> None:
    assert match_command("git status --short", "git status*")
    assert not match_command("git push", "git status*")
    assert not match_command("git status; git push", "git status*")
    assert not match_command("ls", "'unbalanced")  # not a pattern: never matches


async def test_a_session_grant_for_ls_does_not_cover_a_line_that_also_touches(
    tmp_path: Path,
) -> None:
    """The attack of finding 3 through the API: `ls*` granted, then `ls; touch MARK`."""
    ws = tmp_path / "ws"
    ws.mkdir()

    def answer(request: ApprovalRequest) -> ApprovalAnswer:
        if request.arguments["command"] == "ls":
            return ApprovalAnswer.session(pattern={"command": "ls*"})
        return ApprovalAnswer.deny()

    approver = ScriptedApprover(answer)
    async with create_kernel(roots=[ws], posture="ask", approver=approver) as kernel:
        first = await kernel.invoke("run_shell", {"command": "ls"})
        again = await kernel.invoke("run_shell", {"command": "ls -la | ls"})
        attacks = [
            await kernel.invoke("run_shell", {"command": c})
            for c in ("ls; touch MARK", "ls && touch MARK", "ls `touch MARK`", "ls > MARK")
        ]
    assert first.ok and again.ok and again.decision.rule == "grant:session"
    assert all(isinstance(a.error, Denied) for a in attacks), attacks
    assert [r.arguments["command"] for r in approver.requests] == [
        "ls",
        "ls; touch MARK",
        "ls && touch MARK",
        "ls `touch MARK`",
        "ls > MARK",
    ]
    assert not (ws / "MARK").exists()
