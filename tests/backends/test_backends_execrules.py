"""The exec checks' rule matching (the sandbox's copy, standard library only) against the
runtime's own matcher: the same verdict on every pattern and argv of a generated set."""

from __future__ import annotations

import itertools
import random

from ringfence.backends.confined._execcheck import ExecRules
from ringfence.backends.confined._execrules import exec_rules
from ringfence.runtime import Policy
from ringfence.runtime.policy._matchers import ArgvMatcher, Tri
from ringfence.runtime.policy._rules import rule_from_table
from ringfence.runtime.shell._parts import SimpleCommand, Word

ELEMENTS = ["rm", "-f", "git", "push", "/usr/bin/rm", "r*", "*", "-?", "[gr]m", "push*",
            "*/rm", "**", "x", "[!a]*", "?", "a b"]  # fmt: skip
WORDS = ["rm", "/usr/bin/rm", "-f", "-rf", "git", "push", "x", "", "a b", "r", "gm", "./rm",
         "push-all", "*", "[gr]m", "a\nb"]  # fmt: skip


def sandbox_matches(pattern: tuple[str, ...], argv: list[str]) -> bool:
    rule_text = "run_shell(" + " ".join(_quote(e) for e in pattern) + ")"
    policy = Policy.from_strings(deny=[rule_text])
    rules = exec_rules(policy, {"command": "x"})
    assert rules is not None
    return ExecRules(rules.payload).match([argv[0]], argv[1:]) is not None


def _quote(element: str) -> str:
    return "'" + element + "'" if any(c in element for c in " \n") else element


def runtime_matches(pattern: tuple[str, ...], argv: list[str]) -> bool:
    command = SimpleCommand(argv=tuple(Word(w) for w in argv))
    return ArgvMatcher((pattern,)).match_command(command, deny_side=True) is Tri.YES


def test_the_sandbox_matches_exactly_what_the_runtime_matches() -> None:
    rng = random.Random(29)
    checked = 0
    for _ in range(3000):
        pattern = tuple(rng.choice(ELEMENTS) for _ in range(rng.randint(1, 4)))
        argv = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
        if not argv[0]:
            continue
        parsed = Policy.from_strings(
            deny=["run_shell(" + " ".join(_quote(e) for e in pattern) + ")"]
        )
        used = parsed.rules[0].command.patterns[0]  # what the rule parser made of it
        assert sandbox_matches(pattern, argv) == runtime_matches(used, argv), (used, argv)
        checked += 1
    assert checked > 2000


def test_rules_that_do_not_apply_are_not_sent() -> None:
    """ask and allow rules, other tools, regex rules, and rules whose cwd does not match."""
    policy = Policy.from_strings(
        deny=[
            "run_shell(cwd=sub/**, command=touch *)",
            "write_file(path=x)",
            "run_shell(command~rm)",
        ],
        ask=["run_shell(curl *)"],
        allow=["run_shell(ls *)"],
    )
    assert exec_rules(policy, {"command": "x"}) is None
    sent = exec_rules(policy, {"command": "x", "cwd": "sub"})
    assert sent is not None and sent.labels == ("deny:run_shell(cwd=sub/**, command=touch *)",)


def test_table_rules_with_several_argv_patterns() -> None:
    """The ``[[rules]]`` form: ``argv`` may list several patterns, each checked."""
    rule = rule_from_table(
        {"effect": "deny", "tool": "run_shell", "argv": [["git", "push", "**"], ["curl", "**"]]}
    )
    rules = exec_rules(Policy((rule,)), {"command": "x"})
    assert rules is not None
    checker = ExecRules(rules.payload)
    for argv, hit in itertools.chain(
        [(["/usr/bin/git", "push", "origin"], True), (["git", "pull"], False)],
        [(["curl"], True), (["xcurl", "-s"], False)],
    ):
        assert (checker.match([argv[0]], argv[1:]) is not None) is hit, argv
