"""Rules over arguments: paths by component, strings, regex, ranges, URLs; through the Kernel."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ringfence.runtime import (
    Consequence,
    Kernel,
    MemorySink,
    Policy,
    Posture,
    Rules,
    ToolSpec,
    Verdict,
)
from ringfence.runtime.policy._decide import decide
from ringfence.runtime.policy._matchers import normalize_path
from ringfence.runtime.policy._rules import RuleError, parse_rule


async def _ok(arguments: dict[str, Any], ctx: Any) -> Any:
    return "ran"


def _spec(name: str, consequence: Consequence = Consequence.IRREVERSIBLE) -> ToolSpec:
    return ToolSpec(name, "", {"type": "object"}, _ok, consequence)


WRITE = _spec("write_file", Consequence.REVERSIBLE)
FETCH = _spec("mcp.web.fetch", Consequence.READ)


def _verdict(spec: ToolSpec, policy: Policy, args: dict[str, Any], posture: str = "ask") -> str:
    return decide(spec, Posture(posture), Rules(policy=policy), args).verdict.value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("notes/sub/../../a.txt", "a.txt"),
        ("./src//x.py", "src/x.py"),
        ("/ws/src/x.py", "src/x.py"),
        ("/ws", "."),
        ("/wsx/a", "/wsx/a"),  # not inside /ws: string prefixes do not count
        ("../out", "../out"),
        ("/etc/../etc/passwd", "/etc/passwd"),
    ],
)
def test_normalize_path(value: str, expected: str) -> None:
    assert normalize_path(value, ["/ws"]) == expected


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("src/**", "src/a/b.py", True),
        ("src/**", "srcx/a.py", False),
        ("src/**", "src", True),  # the directory itself, too
        ("src/**", "src/", True),
        ("**/.env", "a/b/.env", True),
        ("**/.env", ".env", True),
        ("src/**/test_*.py", "src/test_a.py", True),
        ("src/**/test_*.py", "src/x/y/test_a.py", True),
        ("src/*.py", "src/x/a.py", False),  # * stays inside one component
        ("src/**", "lib/src/a.py", False),  # a slash anchors at the root
        ("*.md", "docs/deep/README.md", True),  # no slash: any depth
        ("*.md", "README.md", True),
        ("./*.md", "docs/README.md", False),
        ("notes/*", "notes/sub/../../a.txt", False),  # normalized first: a.txt
        ("notes/*", "notes/a.txt", True),
        (".env", "sub/.env", True),
        ("!.env", "src/a.py", True),
        ("!.env", ".env", False),
        ("src/**|!src/secret/**", "src/secret/k", False),
        ("src/**|!src/secret/**", "src/ok", True),
        ("/etc/**", "/etc/passwd", True),
        ("/etc/**", "etc/passwd", False),
        ("deploy/**", "/ws/deploy/x", True),
    ],
)
def test_path_rules_match_by_component_on_the_normalized_name(
    pattern: str, path: str, matches: bool
) -> None:
    policy = Policy.from_strings(deny=[f"write_file(path={pattern})"]).with_roots(["/ws"])
    expected = "deny" if matches else "allow"
    assert _verdict(WRITE, policy, {"path": path, "content": ""}, "allow-reversible") == expected


def test_strings_regex_ranges_and_urls() -> None:
    policy = Policy.from_strings(
        deny=[
            "mcp.web.fetch(url=*://*.internal)",
            "mcp.web.fetch(url=http://*)",
            "mcp.*.query(sql~(?i)\\bdrop\\b)",
            "mcp.*.scale(replicas=11..)",
        ],
        ask=["mcp.*.search(q=secret*)"],
    )
    fetch = FETCH
    assert _verdict(fetch, policy, {"url": "https://example.com/x"}) == "allow"
    assert _verdict(fetch, policy, {"url": "https://api.INTERNAL./x"}) == "deny"
    assert _verdict(fetch, policy, {"url": "https://example.com@db.internal/"}) == "deny"
    assert _verdict(fetch, policy, {"url": "HTTP://example.com"}) == "deny"
    query = _spec("mcp.db.query", Consequence.READ)
    assert _verdict(query, policy, {"sql": "select 1"}) == "allow"
    assert _verdict(query, policy, {"sql": "x; DROP table t"}) == "deny"
    scale = _spec("mcp.k8s.scale", Consequence.READ)
    assert _verdict(scale, policy, {"replicas": 10}) == "allow"
    assert _verdict(scale, policy, {"replicas": 11}) == "deny"
    assert _verdict(scale, policy, {"replicas": "11"}) == "allow"  # a string is not a number
    search = _spec("mcp.web.search", Consequence.READ)
    assert _verdict(search, policy, {"q": "secret plans"}) == "ask"


def test_regex_is_re2_and_linear_time() -> None:
    with pytest.raises(RuleError, match="RE2"):
        parse_rule("x(a~(a)\\1)", "deny")  # backreferences cannot be linear
    policy = Policy.from_strings(deny=["mcp.db.query(sql~(a+)+$)"])
    query = _spec("mcp.db.query", Consequence.READ)
    # exponential for a backtracking engine (years); RE2 answers in milliseconds, and the
    # bound is loose for a loaded machine
    started = time.perf_counter()
    assert _verdict(query, policy, {"sql": "a" * 50_000 + "!"}) == "allow"
    assert _verdict(query, policy, {"sql": "a" * 50_000}) == "deny"
    assert time.perf_counter() - started < 5


def test_precedence_deny_over_ask_over_allow_in_any_order() -> None:
    rules = ["write_file(path=deploy/**)"]
    for order in (0, 1):
        p = Policy.from_strings(allow=rules, ask=rules, deny=rules)
        if order:
            p = Policy(tuple(reversed(p.rules)))
        assert _verdict(WRITE, p, {"path": "deploy/x", "content": ""}) == "deny"
    p = Policy.from_strings(allow=rules, ask=rules)
    assert _verdict(WRITE, p, {"path": "deploy/x", "content": ""}) == "ask"


def test_policy_allow_does_not_beat_name_rules_and_allowlist() -> None:
    policy = Policy.from_strings(allow=["write_file(path=src/**)"])
    rules = Rules(deny=("write_file",), policy=policy)
    assert decide(WRITE, Posture.ASK, rules, {"path": "src/a"}).verdict is Verdict.DENY
    rules = Rules(ask=("write_*",), policy=policy)
    assert decide(WRITE, Posture.ASK, rules, {"path": "src/a"}).verdict is Verdict.ASK


def test_old_rules_api_still_works_and_takes_rules_with_arguments() -> None:
    assert decide(WRITE, Posture.ASK, Rules(deny=("write_*",))).rule == "deny:write_*"
    assert decide(WRITE, Posture.ASK, Rules(allow=())).rule == "allowlist"
    rules = Rules(deny=("write_file(path=.env)",), allow=("write_file(path=src/**)",))
    assert rules.deny == () and rules.allow == ("write_file",)
    d = decide(WRITE, Posture.ASK, rules, {"path": ".env"})
    assert d.verdict is Verdict.DENY and d.to_dict()["source"] == "api"
    assert decide(WRITE, Posture.ASK, rules, {"path": "src/a"}).verdict is Verdict.ALLOW
    assert decide(WRITE, Posture.ASK, rules, {"path": "lib/a"}).verdict is Verdict.ASK
    # Without arguments, argument rules cannot be judged: the posture decides.
    assert decide(WRITE, Posture.ASK, rules).rule == "posture:ask"


@pytest.mark.parametrize(
    "bad",
    ["", "write file", "x(", "x(path=)", "run_shell('unbalanced)", "x(n=a..b, m~[)"],
)
def test_bad_rules_are_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(RuleError):
        rule = parse_rule(bad, "deny")
        assert rule.arguments or rule.command  # "x(path=)" must not silently mean anything


async def test_decided_event_names_the_rule_source_and_nothing_runs() -> None:
    sink = MemorySink()
    policy = Policy.from_strings(deny=["write_file(path=deploy/**)"], source="team.toml:7")
    ran: list[str] = []

    async def record(arguments: dict[str, Any], ctx: Any) -> Any:
        ran.append(arguments["path"])
        return "ok"

    async with Kernel(posture="unrestricted", rules=Rules(policy=policy), events_sink=sink) as k:
        k.register(ToolSpec("write_file", "", {"type": "object"}, record, Consequence.REVERSIBLE))
        out = await k.invoke("write_file", {"path": "notes/../deploy/app.yaml"})
        assert out.error is not None and out.error.code == "denied"
        assert (await k.invoke("write_file", {"path": "src/ok"})).ok
    decided = [r for r in sink.records() if r["kind"] == "decided"]
    assert decided[0]["source"] == "team.toml:7" and decided[0]["verdict"] == "deny"
    assert ran == ["src/ok"]


def test_argument_rules_survive_dataclasses_replace() -> None:
    """Connectors extend kernel.rules with dataclasses.replace: nothing may fall out."""
    import dataclasses

    rules = Rules(deny=("write_file(path=.env)", "other_tool"))
    extended = dataclasses.replace(rules, autonomous=("mcp.x.*",))
    assert extended.deny == ("other_tool",)
    assert decide(WRITE, Posture.UNRESTRICTED, extended, {"path": ".env"}).verdict is Verdict.DENY
    assert len(extended.policy.rules) == 1  # not added twice


def test_a_tool_can_declare_more_path_arguments() -> None:
    spec = ToolSpec(
        "mcp.fs.put", "", {"type": "object"}, _ok, meta={"path_arguments": ["location"]}
    )
    policy = Policy.from_strings(deny=["mcp.fs.put(location=deploy/**)"]).with_roots(["/ws"])
    args = {"location": "notes/../deploy/x"}
    assert decide(spec, Posture.UNRESTRICTED, Rules(policy=policy), args).verdict is Verdict.DENY
    plain = _spec("mcp.fs.put")  # undeclared: the same string is matched as a whole
    assert decide(plain, Posture.UNRESTRICTED, Rules(policy=policy), args).verdict is Verdict.ALLOW


def test_the_verdict_cache_does_not_keep_large_arguments() -> None:
    policy = Policy.from_strings(deny=["write_file(path=.env)"])
    rules = Rules(policy=policy)
    for i in range(3):
        decide(WRITE, Posture.ASK, rules, {"path": f"a{i}", "content": "x" * 100_000})
    decide(WRITE, Posture.ASK, rules, {"path": "small", "content": "x"})
    assert len(policy._verdicts) == 1  # only the small call
