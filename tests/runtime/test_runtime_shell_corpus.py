"""Every line of the shell corpus judged: no attack is allowed, every benign line stays allowed.

The corpus (:mod:`shell_corpus`) holds the command lines of issue #29's findings and their
neighbours, each with what dash does with it (checked here too, by running it), and benign
lines an operator's allow rules must keep allowing. Judged two ways: for a tool without the
exec check (host, docker, gVisor today) an attack is at least ``ask`` under any posture; for
an ``exec_checked`` tool no allow rule ever allows one (the exec check carries the deny
rules, the posture decides the rest).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from shell_corpus import ALLOW, CORPUS, DENY, effect_seen, missing_needs, prepare

from ringfence.runtime import Consequence, Policy, Posture, Rules, ToolSpec, Verdict
from ringfence.runtime.policy._decide import decide, evaluate_policy


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("not run")


# run_shell as the confined backends register it with change sets: reversible, not residual,
# so the posture alone would let it run; with and without the exec check.
UNCHECKED = ToolSpec(
    "run_shell", "", {"type": "object"}, _never, consequence=Consequence.REVERSIBLE
)
CHECKED = ToolSpec(
    "run_shell",
    "",
    {"type": "object"},
    _never,
    consequence=Consequence.REVERSIBLE,
    exec_checked=True,
)
RULES = Rules(policy=Policy.from_strings(deny=DENY, allow=ALLOW).with_roots(["/ws"]))

ATTACKS = [line for line in CORPUS if not line.benign]
BENIGN = [line for line in CORPUS if line.benign]


def _id(line: Any) -> str:
    return repr(line.command)[:70]


def test_the_corpus_is_large_and_holds_every_class_of_the_findings() -> None:
    assert len(CORPUS) >= 300
    assert len({line.command for line in CORPUS}) == len(CORPUS)
    assert len(BENIGN) >= 100
    kinds = {line.kind for line in CORPUS}
    for kind in (
        "backquote in ${}",
        "nested backquotes",
        "xargs sh -c input",
        "xargs optional argument",
        "shell reads input",
        "script written in the line",
        "launcher",
        "awk system()",
        "sed e",
        "make --eval",
        "tar --checkpoint-action",
        "git -c",
        "interpreter -c",
        "find -fprint",
        "bash name subscript",
        "bash syntax dash reads otherwise",
    ):
        assert kind in kinds, kind


@pytest.mark.parametrize("line", ATTACKS, ids=_id)
@pytest.mark.parametrize("posture", [Posture.ALLOW_ALL, Posture.UNRESTRICTED])
def test_no_attack_runs_unasked_on_a_tool_without_the_exec_check(
    line: Any, posture: Posture
) -> None:
    decision = decide(UNCHECKED, posture, RULES, {"command": line.command})
    assert decision.verdict in (Verdict.ASK, Verdict.DENY), (line.command, decision)


@pytest.mark.parametrize("line", ATTACKS, ids=_id)
def test_no_allow_rule_allows_an_attack_on_an_exec_checked_tool(line: Any) -> None:
    verdict = evaluate_policy(CHECKED, RULES, {"command": line.command})
    assert verdict is None or verdict.effect is None or verdict.effect.value != "allow", (
        line.command,
        verdict.reason if verdict else None,
    )


@pytest.mark.parametrize("line", BENIGN, ids=_id)
@pytest.mark.parametrize("tool", [UNCHECKED, CHECKED], ids=["unchecked", "exec-checked"])
def test_benign_lines_stay_allowed(line: Any, tool: ToolSpec) -> None:
    decision = decide(tool, Posture.ASK, RULES, {"command": line.command})
    assert decision.verdict is Verdict.ALLOW and decision.rule.startswith("allow:"), (
        line.command,
        decision,
    )


@pytest.mark.slow
def test_every_line_does_what_the_corpus_says_under_dash(tmp_path: Path) -> None:
    """The corpus's ground truth: run each line with dash in its scratch directory; every
    attack has its effect, no benign line has one."""
    if shutil.which("dash") is None:
        pytest.skip("dash is not installed (apt-get install dash)")
    wrong: list[str] = []
    ran = 0
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
    for n, line in enumerate(CORPUS):
        if missing_needs(line):
            continue
        where = tmp_path / str(n)
        prepare(where)
        try:
            subprocess.run(
                ["dash", "-c", line.command],
                cwd=where,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=20,
                env={**env, "HOME": str(where)},
            )
        except subprocess.TimeoutExpired:
            wrong.append(f"timed out: {line.command!r}")
            continue
        ran += 1
        if effect_seen(where, line) is line.benign:
            wrong.append(("benign, yet: " if line.benign else "no effect: ") + line.command)
    assert not wrong, wrong
    assert ran >= len(CORPUS) - 20, "most lines must be checkable here"
