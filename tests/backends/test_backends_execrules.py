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


OPTION_ELEMENTS = ["rm", "-rf*", "-rf", "-f", "--recursive", "--rec*", "--repo=x", "--repo=*", "-o",
                   "x*", "-ox",
                   "--force-with-lease=*", "**", "x", "*", "--", "--[rR]ec", "-r", "push",
                   "--force*", "-", "-?"]  # fmt: skip
OPTION_WORDS = ["rm", "-fr", "-r", "-f", "-rfv", "--rec", "--recursive", "--recursive=x",
                "--repo", "--repo=x", "--re=x", "x", "--", "---rec", "--force-w=o",
                "--force-with-lease", "--r", "--recursive-x", "push", "-v", "-", "--force",
                "d", "-Rf", "-R", "--F", "--_x", "-ox", "-oxy", "-vox", "-o"]  # fmt: skip


def test_the_sandbox_reads_options_as_the_runtime_does() -> None:
    """Flags words that are globs (``rm -rf*``), long options abbreviated (``--recur``) and
    ``--opt=value`` against ``--opt value``: the same verdict on both sides."""
    rng = random.Random(50)
    for _ in range(3000):
        pattern = ("rm", *(rng.choice(OPTION_ELEMENTS) for _ in range(rng.randint(1, 3))))
        argv = ["rm", *(rng.choice(OPTION_WORDS) for _ in range(rng.randint(0, 4)))]
        parsed = Policy.from_strings(
            deny=["run_shell(" + " ".join(_quote(e) for e in pattern) + ")"]
        )
        used = parsed.rules[0].command.patterns[0]
        assert sandbox_matches(pattern, argv) == runtime_matches(used, argv), (used, argv)


def test_option_spellings_a_deny_rule_meets() -> None:
    """What the program reads as the rule's options: flags in any order under a glob flags
    word, an abbreviated long option, a value attached or in the next word, options after
    the operands (GNU getopt permutes them) under a pattern admitting more words, and a
    flag in the other case or as the long option named after it (``-R``, ``--force``)."""
    cases = [
        (("rm", "-rf*"), ["rm", "-fr", "d"], True),
        (("rm", "-rf*"), ["rm", "-r", "-f", "d"], True),
        (("rm", "-rf*"), ["rm", "-r", "d"], False),
        (("rm", "--recursive*"), ["rm", "--recur", "d"], True),
        (("rm", "--recursive*"), ["rm", "--rec=x", "d"], True),
        (("rm", "--recursive*"), ["rm", "--reco", "d"], False),
        (("git", "push", "--repo=origin*"), ["git", "push", "--repo", "origin"], True),
        (("git", "push", "--repo", "origin*"), ["git", "push", "--repo=origin"], True),
        (("git", "push", "--repo", "origin*"), ["git", "push", "--rep=origin"], True),
        (("git", "push", "--force*"), ["git", "push", "--no-force"], False),
        (("rm", "-rf*"), ["rm", "d", "-fr"], True),
        (("rm", "-rf*"), ["rm", "d", "-r", "e", "-v", "-f"], True),
        (("rm", "-rf*"), ["rm", "d", "--", "-r", "-f"], False),
        (("rm", "-rf", "*"), ["rm", "-f", "d", "-r"], True),
        (("rm", "--recursive*"), ["rm", "d", "--recu"], True),
        (("git", "push*"), ["git", "push", "origin", "--force"], True),
        (("git", "push", "--force*"), ["git", "push", "origin", "--force"], True),
        (("git", "push", "--force*"), ["git", "push", "origin", "main"], False),
        (("git", "push", "--force*"), ["git", "stash", "push", "--force"], False),
        (("git", "push", "origin"), ["git", "push", "-v", "origin"], False),  # exact: as written
        (("rm", "-rf*"), ["rm", "-Rf", "d"], True),
        (("rm", "-rf*"), ["rm", "-r", "--force", "d"], True),
        (("rm", "-rf*"), ["rm", "d", "--recursive", "--force"], True),
        (("rm", "-rf*"), ["rm", "--force", "d"], False),
        (("rm", "-rf*"), ["rm", "-f", "--", "--recursive"], False),
        (("ssh", "-o", "ProxyCommand*"), ["ssh", "-oProxyCommand=x", "h"], True),
        (("ssh", "-o", "ProxyCommand*"), ["ssh", "-4oProxyCommand=x", "h"], True),
        (("ssh", "-o", "ProxyCommand*"), ["ssh", "-v", "-oProxyCommand=x", "h"], True),
        (("ssh", "-o", "ProxyCommand*"), ["ssh", "-oUser=x", "h"], False),
        (("git", "push", "--force*"), ["git", "push", "-f", "origin"], True),
        (("git", "push", "--force*"), ["git", "push", "origin", "-uf"], True),
        (("git", "push", "--force*"), ["git", "push", "-u", "origin"], False),
        (("rm", "--recursive*"), ["rm", "-r", "d"], True),
        (("ssh", "-o", "ProxyCommand*"), ["ssh", "-F", "f", "-oProxyCommand=x", "h"], True),
        (("ssh", "-o", "ProxyCommand*"), ["ssh", "-F", "f", "-o", "ProxyCommand=x", "h"], True),
    ]
    for pattern, argv, hit in cases:
        used = (
            Policy.from_strings(deny=["run_shell(" + " ".join(_quote(e) for e in pattern) + ")"])
            .rules[0]
            .command.patterns[0]
        )
        assert runtime_matches(used, argv) is hit, (pattern, argv)
        assert sandbox_matches(pattern, argv) is hit, (pattern, argv)
