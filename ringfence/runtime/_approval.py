"""Approvers answer the Gate's ``ask``: once, for this session, or deny.

An approver sees an :class:`ApprovalRequest` (arguments already redacted) and
returns an :class:`ApprovalAnswer`. "For this session" answers become
:class:`Grant` objects held by the kernel's :class:`SessionGrants`, keyed on
the normalized call so an equivalent call is not asked again and a different
one is.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol, TextIO, runtime_checkable

import trio

from ._canonical import canonical_json

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "Choice",
    "Grant",
    "HeadlessDenyApprover",
    "ScriptedApprover",
    "SessionGrants",
    "TerminalApprover",
    "default_approver",
]


class Choice(enum.StrEnum):
    ONCE = "once"
    SESSION = "session"
    DENY = "deny"


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked about. ``arguments`` are redacted."""

    tool: str
    arguments: Mapping[str, Any]
    consequence: str
    rule: str
    reason: str
    origin: str
    trace_id: str

    def describe(self) -> str:
        args = json.dumps(dict(self.arguments), ensure_ascii=False, sort_keys=True)
        if len(args) > 500:
            args = args[:500] + "…"
        return f"{self.tool} ({self.consequence}, via {self.origin}): {args}\n  why asked: {self.reason}"


@dataclass(frozen=True)
class ApprovalAnswer:
    """An approver's answer. ``pattern`` widens a session grant to matching calls.

    ``pattern`` maps argument names to glob patterns over the argument's string
    form (``{"path": "src/*"}``); arguments it does not name must be equal.
    """

    choice: Choice
    reason: str = ""
    pattern: Mapping[str, str] | None = None

    @classmethod
    def once(cls, reason: str = "approved once") -> ApprovalAnswer:
        return cls(Choice.ONCE, reason)

    @classmethod
    def session(
        cls, reason: str = "approved for this session", pattern: Mapping[str, str] | None = None
    ) -> ApprovalAnswer:
        return cls(Choice.SESSION, reason, pattern)

    @classmethod
    def deny(cls, reason: str = "denied by the approver") -> ApprovalAnswer:
        return cls(Choice.DENY, reason)


@runtime_checkable
class Approver(Protocol):
    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer: ...


@dataclass(frozen=True)
class Grant:
    """A "for this session" approval of one tool, for one call or a pattern of calls."""

    tool: str
    arguments_key: bytes | None = None
    pattern: Mapping[str, str] | None = None

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        if tool != self.tool:
            return False
        if self.pattern is None:
            return canonical_json(dict(arguments)) == self.arguments_key
        for name, value in arguments.items():
            if name in self.pattern:
                text = value if isinstance(value, str) else canonical_json(value).decode()
                if not fnmatchcase(text, self.pattern[name]):
                    return False
        # Every pattern key must be present; otherwise the grant says nothing about the call.
        return all(name in arguments for name in self.pattern)


@dataclass
class SessionGrants:
    _grants: list[Grant] = field(default_factory=list)

    def add(
        self, tool: str, arguments: Mapping[str, Any], pattern: Mapping[str, str] | None
    ) -> Grant:
        grant = (
            Grant(tool, pattern=dict(pattern))
            if pattern is not None
            else Grant(tool, arguments_key=canonical_json(dict(arguments)))
        )
        self._grants.append(grant)
        return grant

    def find(self, tool: str, arguments: Mapping[str, Any]) -> Grant | None:
        return next((g for g in self._grants if g.matches(tool, arguments)), None)

    def clear(self) -> None:
        self._grants.clear()


class HeadlessDenyApprover:
    """Denies every request: the default when nobody is there to ask."""

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer.deny("no approver is attached (headless): asking means no")


class ScriptedApprover:
    """Answers from a script, for tests and for hosts that decide in code.

    ``answers`` is either an iterable consumed one answer per request (running
    out denies) or a callable from request to answer. Every request is kept in
    ``requests`` so tests can assert what was asked.
    """

    def __init__(
        self,
        answers: Iterable[ApprovalAnswer] | Callable[[ApprovalRequest], ApprovalAnswer],
    ) -> None:
        self._fn = answers if callable(answers) else None
        self._queue = [] if callable(answers) else list(answers)
        self.requests: list[ApprovalRequest] = []

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.requests.append(request)
        if self._fn is not None:
            return self._fn(request)
        if not self._queue:
            return ApprovalAnswer.deny("the scripted approver has no answers left")
        return self._queue.pop(0)


_PROMPT_ANSWERS = {
    "y": Choice.ONCE,
    "yes": Choice.ONCE,
    "o": Choice.ONCE,
    "once": Choice.ONCE,
    "s": Choice.SESSION,
    "session": Choice.SESSION,
    "n": Choice.DENY,
    "no": Choice.DENY,
    "d": Choice.DENY,
    "deny": Choice.DENY,
    "": Choice.DENY,
}


class TerminalApprover:
    """Asks a person on a terminal: [o]nce, for this [s]ession, or [d]eny (the default).

    Prompts are serialized so concurrent calls never interleave their
    questions. End of input denies.
    """

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None) -> None:
        self._input = input if input is not None else sys.stdin
        self._output = output if output is not None else sys.stderr
        self._lock = trio.Lock()

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        async with self._lock:
            while True:
                self._output.write(
                    f"\nringfence asks: {request.describe()}\n"
                    "  allow [o]nce, for this [s]ession, or [d]eny? "
                )
                self._output.flush()
                line = await trio.to_thread.run_sync(self._input.readline, abandon_on_cancel=True)
                if line == "":
                    return ApprovalAnswer.deny("end of input at the approval prompt")
                choice = _PROMPT_ANSWERS.get(line.strip().lower())
                if choice is not None:
                    return ApprovalAnswer(choice, f"answered {choice.value} at the terminal")
                self._output.write("  please answer o, s or d\n")


def default_approver() -> Approver:
    """A terminal prompt when stdin and stderr are a TTY, else headless deny."""
    if sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalApprover()
    return HeadlessDenyApprover()
