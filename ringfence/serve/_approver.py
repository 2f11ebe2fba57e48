"""Approvals through the MCP client: the Gate's ``ask`` becomes a form elicitation.

While ``ringfence serve`` runs a ``tools/call``, the request it arrived on is
*in flight*: :meth:`ClientApprover.in_flight` records it as a
:class:`ClientChannel` in a context variable (inherited by every task the call
spawns, such as the executor of a ``run_tool_script`` call and the bridge tasks
that re-enter the Gate with ``origin="script"``) and under the call's trace id.
When the Gate asks, :meth:`ClientApprover.approve` finds that channel and sends
the person an ``elicitation/create`` (form mode: approve once / for this
session / deny, and for a session answer an optional pattern, ``path=src/*``, that
widens the grant as the terminal's ``s NAME=GLOB`` does) on that same request, so the question reaches the client that
made the call and, over Streamable HTTP, rides that call's response stream.
The question's text is :meth:`ApprovalRequest.describe`, the renderer every
approver shares (decisive arguments first and whole, nothing invisible; see
:mod:`ringfence.runtime._approval`).

When there is no channel, or the client did not declare form elicitation, the
configured fallback (the *headless policy*; deny by default) answers, and the
answer's reason says why nobody was asked so the model does not retry blindly.

Guarantees: a question goes only to the client whose request (or a call nested
inside it) asked; any failure to ask (the client errored, went away, sent a
malformed answer, or did not answer within the timeout) is a deny. Declining,
cancelling or dismissing the form is a deny.

Grants made "for this session" belong to the MCP session whose person gave
them: over Streamable HTTP each call runs as its session's
(:meth:`ringfence.runtime.Kernel.as_caller`), so another session's identical
call is asked again; over stdio the one client is the kernel's session.

Non-guarantees: clients that negotiated the 2026-07-28 protocol have no
back-channel; ``ringfence serve`` refuses that era so clients fall back to the
handshake era (see :mod:`._server`). A session's grants live as long as the
server (or until 1,024 other sessions have made grants since it last used them).
"""

from __future__ import annotations

import contextlib
import contextvars
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
import pydantic
import trio
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from ..runtime._approval import (
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    Choice,
    HeadlessDenyApprover,
    grant_pattern,
)
from ._defaults import DEFAULT_APPROVAL_TIMEOUT_SECONDS

__all__ = ["ClientApprover", "ClientChannel", "approval_form", "current_channel"]

# The protocol revision that introduced titled single-select enums (``oneOf`` of
# ``const``/``title``); older elicitation-capable revisions (2025-06-18) use
# ``enum`` + ``enumNames``.
_ONE_OF_SINCE = "2025-11-25"

# Characters of the session pattern a client may send (the form's own maxLength): the words are
# split with shlex, whose time grows with the square of the text (2 MB held the loop 200 s).
MAX_PATTERN_CHARACTERS = 1000
# Characters of a client's own words (its name, a decision it sent) an answer's reason quotes:
# a reason is returned with the call and recorded in approval_answered.
MAX_QUOTED = 200

_CHOICES: tuple[tuple[Choice, str], ...] = (
    (Choice.ONCE, "Approve once"),
    (Choice.SESSION, "Approve for this session"),
    (Choice.DENY, "Deny"),
)


@dataclass(eq=False)
class ClientChannel:
    """The MCP request a call arrived on: whom to ask, and whether they can be asked.

    ``active`` turns false when the request finishes, so a task that outlives
    it (and still carries it in its context) cannot ask on a closed stream.
    """

    session: ServerSession
    request_id: types.RequestId | None
    client_name: str
    protocol_version: str
    can_elicit: bool
    active: bool = field(default=True)

    @classmethod
    def from_session(
        cls, session: ServerSession, request_id: types.RequestId | None
    ) -> ClientChannel:
        params = session.client_params
        name = params.client_info.name if params is not None else "unnamed client"
        return cls(
            session,
            request_id,
            _cut(name),
            session.protocol_version,
            _declares_form_elicitation(session.client_capabilities) and session.can_send_request,
        )


_current: contextvars.ContextVar[ClientChannel | None] = contextvars.ContextVar(
    "ringfence_serve_channel", default=None
)


def current_channel() -> ClientChannel | None:
    """The in-flight MCP request of the current task (or the task that spawned it)."""
    channel = _current.get()
    return channel if channel is not None and channel.active else None


def _cut(value: object) -> str:
    """``value`` (a client's words) as text of at most :data:`MAX_QUOTED` characters and a
    count of the rest, for a reason to quote (with ``!r``, which escapes it to one line):
    the client chose it, and a reason quoting it whole carried a 30 MiB client name into
    every answer and its approval_answered record."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= MAX_QUOTED:
        return text
    return f"{text[:MAX_QUOTED]}... ({len(text):,} characters)"


def _declares_form_elicitation(caps: types.ClientCapabilities | None) -> bool:
    elicitation = caps.elicitation if caps is not None else None
    if elicitation is None:
        return False
    # An empty ``elicitation: {}`` (2025-06-18 clients) means form mode.
    return elicitation.form is not None or elicitation.url is None


def approval_form(protocol_version: str) -> dict[str, Any]:
    """The requested schema: one required single-select field, ``decision``."""
    if protocol_version >= _ONE_OF_SINCE:
        decision: dict[str, Any] = {
            "type": "string",
            "title": "Decision",
            "oneOf": [{"const": c.value, "title": title} for c, title in _CHOICES],
            "default": Choice.DENY.value,
        }
    else:
        decision = {
            "type": "string",
            "title": "Decision",
            "enum": [c.value for c, _ in _CHOICES],
            "enumNames": [title for _, title in _CHOICES],
            "default": Choice.DENY.value,
        }
    widen = {
        "type": "string",
        "title": "For this session, also calls matching (optional)",
        "description": "NAME=GLOB words, as at the terminal: path=src/* or "
        'command="git status*"; empty: only calls with these exact arguments',
        "maxLength": MAX_PATTERN_CHARACTERS,
    }
    return {
        "type": "object",
        "properties": {"decision": decision, "pattern": widen},
        "required": ["decision"],
    }


# What asking can raise besides cancellation: the client answered with an error
# (MCPError, NoBackChannelError), sent a result that does not validate, or the
# connection went away under us (anyio streams under trio).
_ASK_FAILURES = (
    MCPError,
    pydantic.ValidationError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    trio.ClosedResourceError,
    trio.BrokenResourceError,
)


class ClientApprover:
    """An :class:`Approver` that asks the person behind the calling MCP client.

    ``fallback`` is the headless policy: it answers when the call did not come
    from a client that can be asked (default :class:`HeadlessDenyApprover`).
    ``timeout_seconds`` bounds how long one question waits; no answer is a deny.
    """

    def __init__(
        self,
        fallback: Approver | None = None,
        *,
        timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    ) -> None:
        if not timeout_seconds > 0:
            raise ValueError("timeout_seconds must be positive")
        self.fallback: Approver = fallback if fallback is not None else HeadlessDenyApprover()
        self.timeout_seconds = float(timeout_seconds)
        self._by_trace: dict[str, ClientChannel] = {}

    @contextlib.contextmanager
    def in_flight(self, channel: ClientChannel, trace_id: str) -> Iterator[None]:
        """Make ``channel`` the one to ask for calls in this task tree and this trace."""
        token = _current.set(channel)
        self._by_trace[trace_id] = channel
        try:
            yield
        finally:
            channel.active = False
            self._by_trace.pop(trace_id, None)
            _current.reset(token)

    def _channel_for(self, request: ApprovalRequest) -> ClientChannel | None:
        # The trace id names the exact call tree when a nested caller passes it on;
        # the context variable covers nested calls that start a trace of their own.
        channel = self._by_trace.get(request.trace_id)
        if channel is not None and channel.active:
            return channel
        return current_channel()

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        channel = self._channel_for(request)
        if channel is None:
            return await self._headless(request, "the call did not arrive on an open MCP request")
        if not channel.can_elicit:
            return await self._headless(
                request,
                f"the MCP client {channel.client_name!r} cannot be asked "
                "(it did not declare form elicitation support)",
            )
        return await self._ask(channel, request)

    async def _headless(self, request: ApprovalRequest, why: str) -> ApprovalAnswer:
        answer = await self.fallback.approve(request)
        reason = f"{why}; the headless policy answered {answer.choice.value}: {answer.reason}"
        if answer.choice is Choice.DENY:
            reason += (
                ". Retrying will be refused the same way: the user must approve it from a "
                "client that supports elicitation, or start the server with a posture that allows it"
            )
        return ApprovalAnswer(answer.choice, reason, answer.pattern)

    async def _ask(self, channel: ClientChannel, request: ApprovalRequest) -> ApprovalAnswer:
        who = f"the MCP client {channel.client_name!r}"
        message = f"ringfence asks for approval.\n{request.describe()}"
        result: types.ElicitResult | None = None
        with trio.move_on_after(self.timeout_seconds):
            try:
                result = await channel.session.elicit_form(
                    message,
                    approval_form(channel.protocol_version),
                    related_request_id=channel.request_id,
                )
            except _ASK_FAILURES as exc:
                return ApprovalAnswer.deny(
                    f"asking {who} failed ({type(exc).__name__}: {exc}); nothing was approved"
                )
        if result is None:
            return ApprovalAnswer.deny(
                f"{who} did not answer within {self.timeout_seconds:g} seconds"
            )
        return _answer_from(result, who, request)


def _answer_from(result: types.ElicitResult, who: str, request: ApprovalRequest) -> ApprovalAnswer:
    if result.action == "decline":
        return ApprovalAnswer.deny(f"declined in {who}")
    if result.action == "cancel":
        return ApprovalAnswer.deny(f"dismissed in {who} without an answer")
    value = (result.content or {}).get("decision")
    if value == Choice.ONCE.value:
        return ApprovalAnswer.once(f"approved once in {who}")
    if value == Choice.SESSION.value:
        words = (result.content or {}).get("pattern")
        if not isinstance(words, str) or not words.strip():
            return ApprovalAnswer.session(f"approved for this session in {who}")
        if len(words) > MAX_PATTERN_CHARACTERS:  # never split: the form allows no more
            return ApprovalAnswer.deny(
                f"{who} sent a session pattern of {len(words):,} characters, over the form's "
                f"limit of {MAX_PATTERN_CHARACTERS:,} (maxLength); nothing was approved"
            )
        try:
            pattern = grant_pattern(shlex.split(words), request)
        except ValueError as exc:
            pattern = f"cannot read the pattern ({exc}); quote it as in a shell"
        if isinstance(pattern, str):  # a widening that cannot be read widens nothing
            return ApprovalAnswer.deny(
                f"{who} sent a session pattern ringfence cannot use ({pattern}); nothing was "
                "approved"
            )
        shown = " ".join(f"{k}={v}" for k, v in pattern.items())
        return ApprovalAnswer.session(f"approved for this session for {shown} in {who}", pattern)
    if value == Choice.DENY.value:
        return ApprovalAnswer.deny(f"denied in {who}")
    return ApprovalAnswer.deny(
        f"{who} sent no valid decision ({_cut(value)!r}); nothing was approved"
    )
