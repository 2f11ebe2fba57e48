"""Approvers and session grants keyed on the normalized call."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from kernel_helpers import event_records
from runtime_helpers import Ledger, register_standard_tools

from ringfence import create_kernel
from ringfence.runtime import (
    ApprovalAnswer,
    CallContext,
    Choice,
    Consequence,
    Denied,
    HeadlessDenyApprover,
    Kernel,
    Posture,
    ScriptedApprover,
    TerminalApprover,
    ToolSpec,
)
from ringfence.runtime._approval import match_path


async def test_once_asks_again_every_time(ledger: Ledger) -> None:
    approver = ScriptedApprover([ApprovalAnswer.once(), ApprovalAnswer.once()])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("launch", {"x": "a"})).ok
        assert (await kernel.invoke("launch", {"x": "a"})).ok
    assert len(approver.requests) == 2
    assert ledger.names() == ["launch", "launch"]


async def test_session_grant_matches_equivalent_call_only(ledger: Ledger) -> None:
    approver = ScriptedApprover([ApprovalAnswer.session(), ApprovalAnswer.deny()])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        first = await kernel.invoke("launch", {"x": "a", "n": 1})
        # Same call, arguments in another order: the normalized call is equal, no question.
        again = await kernel.invoke("launch", {"n": 1, "x": "a"})
        # A different argument value is a different call: asked, and denied.
        other = await kernel.invoke("launch", {"x": "b", "n": 1})
        # Same arguments, another tool: not covered either.
        other_tool = await kernel.invoke("touch", {"x": "a", "n": 1})
    assert first.ok and again.ok
    assert again.decision is not None and again.decision.rule == "grant:session"
    assert isinstance(other.error, Denied)
    assert isinstance(other_tool.error, Denied)
    assert [r.arguments for r in approver.requests] == [
        {"x": "a", "n": 1},
        {"x": "b", "n": 1},
        {"x": "a", "n": 1},
    ]
    assert ledger.names() == ["launch", "launch"]


async def test_pattern_grant(ledger: Ledger) -> None:
    approver = ScriptedApprover([ApprovalAnswer.session(pattern={"x": "src/*"})])
    async with Kernel(approver=approver) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("launch", {"x": "src/a.py"})).ok
        assert (await kernel.invoke("launch", {"x": "src/b.py"})).ok
        assert not (await kernel.invoke("launch", {"x": "etc/passwd"})).ok
        assert not (await kernel.invoke("launch", {"n": 3})).ok  # the pattern's key is absent
    assert len(approver.requests) == 3


async def test_headless_denies_with_reason(ledger: Ledger) -> None:
    async with Kernel(approver=HeadlessDenyApprover()) as kernel:
        register_standard_tools(kernel, ledger)
        outcome = await kernel.invoke("launch", {})
    assert isinstance(outcome.error, Denied)
    assert "headless" in outcome.error.message
    assert "asks before irreversible" in outcome.error.message
    assert ledger.runs == []


async def test_terminal_prompt_once_session_deny(ledger: Ledger) -> None:
    stdin = io.StringIO("maybe\ns\nd\n")
    out = io.StringIO()
    async with Kernel(approver=TerminalApprover(stdin, out), posture=Posture.ASK) as kernel:
        register_standard_tools(kernel, ledger)
        assert (await kernel.invoke("touch", {"x": "1"})).ok  # "maybe" re-asked, then session
        assert (await kernel.invoke("touch", {"x": "1"})).ok  # granted, not asked
        assert not (await kernel.invoke("touch", {"x": "2"})).ok  # d
        assert not (await kernel.invoke("touch", {"x": "3"})).ok  # end of input denies
    text = out.getvalue()
    assert text.count("ringfence asks: touch") == 4  # once re-asked + x=2 + x=3
    assert "please answer" in text
    assert ledger.names() == ["touch", "touch"]


async def test_scripted_callable_sees_redacted_arguments(ledger: Ledger) -> None:
    approver = ScriptedApprover(lambda r: ApprovalAnswer(Choice.ONCE))
    async with Kernel(approver=approver, secrets=["hunter2-secret"]) as kernel:
        register_standard_tools(kernel, ledger)
        await kernel.invoke("launch", {"x": "pw=hunter2-secret"})
    assert approver.requests[0].arguments == {"x": "pw=[REDACTED SECRET]"}
    assert ledger.runs == [("launch", {"x": "pw=hunter2-secret"})]


# -- grants mean what they say (issue 13) ---------------------------------------------------


async def test_pattern_grant_requires_unnamed_arguments_equal(ledger: Ledger) -> None:
    # The approver widened "cwd" only; another command in the same cwd is a new question.
    approver = ScriptedApprover([ApprovalAnswer.session(pattern={"cwd": "sub*"})])
    async with Kernel(approver=approver) as kernel:
        kernel.register(_shell_like(ledger))
        first = await kernel.invoke("shell", {"command": "ls", "cwd": "sub"})
        same_other_cwd = await kernel.invoke("shell", {"command": "ls", "cwd": "sub2"})
        other_command = await kernel.invoke("shell", {"command": "rm -rf x", "cwd": "sub"})
        extra_argument = await kernel.invoke("shell", {"command": "ls", "cwd": "sub", "env": "A=1"})
    assert first.ok and same_other_cwd.ok
    assert same_other_cwd.decision is not None and same_other_cwd.decision.rule == "grant:session"
    assert isinstance(other_command.error, Denied) and isinstance(extra_argument.error, Denied)
    assert [r.arguments["command"] for r in approver.requests] == ["ls", "rm -rf x", "ls"]
    assert [a["command"] for _, a in ledger.runs] == ["ls", "ls"]  # rm never ran


def _shell_like(ledger: Ledger) -> ToolSpec:
    schema = {
        "type": "object",
        "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}, "env": {}},
    }

    async def run(args: dict, ctx: CallContext) -> str:
        ledger.runs.append(("shell", args))
        return "ran"

    return ToolSpec("shell", "a shell-like tool", schema, run, consequence=Consequence.IRREVERSIBLE)


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        ("notes/a.txt", "notes/*", True),
        ("notes/./a.txt", "notes/*", True),
        ("notes/sub/../../a.txt", "notes/*", False),  # normalizes to a.txt
        ("notes/sub/a.txt", "notes/*", False),  # * stays inside one component
        ("notes/sub/a.txt", "notes/**", True),
        ("notes/../../etc/passwd", "notes/**", False),
        ("../notes/a.txt", "*/notes/*", False),  # a step out matches only a literal ..
        ("/notes/a.txt", "notes/*", False),
        ("/notes/a.txt", "/notes/*", True),
        (".", "*", False),
    ],
)
def test_path_patterns_match_per_component_on_the_normalized_path(
    value: str, pattern: str, expected: bool
) -> None:
    assert match_path(value, pattern) is expected


def _backtracking_match(value: str, pattern: str) -> bool:
    """The definition match_path had before it became one pass per glob, kept as the oracle."""
    import posixpath
    from fnmatch import fnmatchcase

    parts = posixpath.normpath(value.replace("\\", "/")).split("/")
    globs = pattern.split("/")
    literal = {"", ".", ".."}

    def walk(i: int, j: int) -> bool:
        if j == len(globs):
            return i == len(parts)
        if globs[j] == "**":
            for k in range(i, len(parts) + 1):
                if walk(k, j + 1):
                    return True
                if k < len(parts) and parts[k] in literal:
                    return False
            return False
        if i == len(parts):
            return False
        part, glob = parts[i], globs[j]
        ok = part == glob if part in literal or glob in literal else fnmatchcase(part, glob)
        return ok and walk(i + 1, j + 1)

    return walk(0, 0)


_COMPONENTS = st.sampled_from(["a", "b", "ab", ".", "..", "", "x.txt"])
_GLOBS = st.sampled_from(["a", "b", "*", "?", "**", "a*", ".", "..", "", "*.txt", "[ab]"])


@settings(max_examples=600, deadline=None)
@given(
    parts=st.lists(_COMPONENTS, max_size=7),
    globs=st.lists(_GLOBS, min_size=1, max_size=6),
)
def test_path_patterns_agree_with_the_backtracking_definition(
    parts: list[str], globs: list[str]
) -> None:
    value, pattern = "/".join(parts) or ".", "/".join(globs)
    assert match_path(value, pattern) is _backtracking_match(value, pattern), (value, pattern)


def test_a_long_path_against_many_double_stars_is_answered() -> None:
    """A grant's ``**/a/**/a/**/a/**/b`` against a 2,000-component path of ``a``: backtracking
    tried components to the power of the ``**`` count (hours; the Gate's thread held). Run in
    a child so that the old definition fails by its timeout instead of hanging the suite."""
    code = (
        "from ringfence.runtime._approval import match_path\n"
        "print(match_path('a/' * 2000 + 'c', '**/a/**/a/**/a/**/b'),"
        " match_path('a/' * 2000 + 'b', '**/a/**/a/**/a/**/b'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr


async def test_path_grant_cannot_be_walked_out_with_dotdot(tmp_path: Path) -> None:
    """The attack of issue 13: a grant for notes/* overwrote a.txt via notes/sub/../../a.txt."""
    (tmp_path / "notes" / "sub").mkdir(parents=True)
    (tmp_path / "a.txt").write_text("original")
    approver = ScriptedApprover([ApprovalAnswer.session(pattern={"path": "notes/*"})])
    log = tmp_path.parent / f"{tmp_path.name}-events.jsonl"
    async with create_kernel(roots=[tmp_path], approver=approver, events_path=log) as kernel:
        ok = await kernel.invoke("write_file", {"path": "notes/n.txt", "content": "x"})
        again = await kernel.invoke("write_file", {"path": "notes/m.txt", "content": "x"})
        attack = await kernel.invoke(
            "write_file", {"path": "notes/sub/../../a.txt", "content": "x"}
        )
    assert ok.ok and again.ok and again.decision.rule == "grant:session"
    assert isinstance(attack.error, Denied)
    assert (tmp_path / "a.txt").read_text() == "original"  # no effect on disk
    assert len(approver.requests) == 2  # the attack was asked (and denied), not granted
    records = event_records(log)
    kinds = [r["kind"] for r in records if r.get("call_id") == attack.call_id]
    assert kinds == ["proposed", "decided", "approval_asked", "approval_answered", "failed"]
