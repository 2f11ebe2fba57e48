"""The approvals inbox: an Approver whose questions wait for the review page's answer.

When the Gate asks and :class:`ReviewApprover` is the approver (``--approve
review``, ``ringfence review``) or the fallback of ``serve``'s client approver
(``serve --review``, for clients without elicitation), the question waits as a
:class:`Question` until the person answers it on the page or the approval
timeout passes (then it is a deny, and the reason says so). The page shows
:meth:`ApprovalRequest.describe`, the same text the terminal prompt and the MCP
elicitation show (decisive arguments first, head…tail, escaped).

A person's answers are those the terminal has: once, for this session (a
pattern of ``NAME=GLOB`` words widens the grant, parsed by the terminal's own
parser, so the page grants nothing the terminal could not), or deny. The Gate
records the answer (``approval_answered``) like any approver's; its reason
says it came from the review page.

Bounded: at most :data:`MAX_PENDING` questions wait at once (more are denied
at once, saying why); when the page stops, every waiting question is denied.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from ..runtime._approval import ApprovalAnswer, ApprovalRequest, Choice, _parse_terminal_answer

__all__ = ["MAX_PENDING", "Question", "ReviewApprover", "answer_from_page"]

MAX_PENDING = 64
DEFAULT_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Question:
    """One waiting question: its id (random, in the page's URLs), what is asked, since when."""

    id: str
    request: ApprovalRequest
    prompt: str
    asked_at: float  # time.time()
    deadline: float  # time.time() at which it becomes a deny


@dataclass
class _Waiting:
    question: Question
    done: trio.Event = field(default_factory=trio.Event)
    answer: ApprovalAnswer | None = None


def answer_from_page(
    request: ApprovalRequest, choice: str, pattern: str = ""
) -> ApprovalAnswer | str:
    """The page's form as an answer, or what is wrong with it (the terminal's rules).

    ``choice`` is ``once``, ``session`` or ``deny``; ``pattern`` (session only)
    is ``NAME=GLOB`` words as typed at the terminal, each NAME an argument of
    the call. A pattern for another choice, an unknown argument, or a command
    pattern that cannot be read is refused with the terminal's message.
    """
    try:
        picked = Choice(choice)
    except ValueError:
        return f"{choice!r} is not an answer (once, session or deny)"
    pattern = pattern.strip()
    if pattern and picked is not Choice.SESSION:
        return "only a session answer takes a pattern"
    if picked is Choice.ONCE:
        return ApprovalAnswer.once("approved once on the review page")
    if picked is Choice.DENY:
        return ApprovalAnswer.deny("denied on the review page")
    if not pattern:
        return ApprovalAnswer.session("approved for this session on the review page")
    try:
        words = shlex.split(pattern)
    except ValueError as exc:
        return f"cannot read the pattern ({exc}); quote a value as in a shell"
    parsed = _parse_terminal_answer("s " + shlex.join(words), request)
    if isinstance(parsed, str):
        return parsed
    shown = " ".join(f"{k}={v}" for k, v in (parsed.pattern or {}).items())
    return ApprovalAnswer.session(
        f"approved for this session on the review page, for {shown}", parsed.pattern
    )


class ReviewApprover:
    """An :class:`~ringfence.runtime.Approver` answered on the review page (module docstring).

    ``timeout_seconds`` bounds one question's wait; ``on_change`` is called
    (in trio's thread) whenever a question arrives or goes.
    """

    def __init__(self, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        if not timeout_seconds > 0:
            raise ValueError("timeout_seconds must be positive")
        self.timeout_seconds = float(timeout_seconds)
        self._waiting: dict[str, _Waiting] = {}
        self._listeners: list[Callable[[], None]] = []
        self._closed = False

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def pending(self) -> list[Question]:
        """The waiting questions, oldest first."""
        return [w.question for w in self._waiting.values()]

    def get(self, question_id: str) -> Question | None:
        waiting = self._waiting.get(question_id)
        return waiting.question if waiting is not None else None

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._closed:
            return ApprovalAnswer.deny("the review page has stopped: nobody can answer there")
        if len(self._waiting) >= MAX_PENDING:
            return ApprovalAnswer.deny(
                f"{MAX_PENDING} questions already wait on the review page; "
                "this one was denied without asking"
            )
        now = time.time()
        question = Question(
            secrets.token_hex(8), request, request.describe(), now, now + self.timeout_seconds
        )
        waiting = _Waiting(question)
        self._waiting[question.id] = waiting
        self._changed()
        try:
            with trio.move_on_after(self.timeout_seconds):
                await waiting.done.wait()
        finally:
            self._waiting.pop(question.id, None)
            self._changed()
        if waiting.answer is None:
            return ApprovalAnswer.deny(
                f"nobody answered on the review page within {self.timeout_seconds:g} seconds"
            )
        return waiting.answer

    def answer(self, question_id: str, answer: ApprovalAnswer) -> bool:
        """Answer a waiting question; False when it is no longer waiting (answered, timed out)."""
        waiting = self._waiting.get(question_id)
        if waiting is None or waiting.done.is_set():
            return False
        waiting.answer = answer
        waiting.done.set()
        return True

    def close(self) -> None:
        """The page stopped: deny what waits, and every later question at once."""
        self._closed = True
        for waiting in list(self._waiting.values()):
            if not waiting.done.is_set():
                waiting.answer = ApprovalAnswer.deny("the review page stopped before an answer")
                waiting.done.set()
