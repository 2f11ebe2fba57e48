"""The Gate's authorize step: from a proposed call to an Intent, or a refusal.

The one decision road every path takes (a direct call, a script's
``call_tool``, a nested call, ``plan apply``, ``serve``, a connected
server's request): :func:`authorize` validates the arguments, asks the
decision function (``policy._decide.decide``), stages a dry run's calls, resolves an
``ask`` through session grants or the approver, and mints the Intent the
executor redeems (HMAC-tagged; the event chain's checkpoints are what the session
key signs). It raises the refusal; the kernel (``_kernel``) records the
outcome and runs what was authorized.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from ._approval import ApprovalAnswer, ApprovalRequest, Choice
from ._calls import AskHook, Authorization
from ._canonical import arguments_digest, orjson_digest
from ._errors import Denied, InvalidArguments
from ._hooks import pre_call
from ._output import escape_surrogates
from ._plan import StagedCall
from ._tools import Consequence, ToolSpec
from .policy._decide import Decision, Posture, decide
from .policy._rules import Effect

if TYPE_CHECKING:
    from ._kernel import Kernel

__all__ = ["authorize", "refuse_lone_surrogates"]


async def authorize(
    kernel: Kernel,
    tool: str,
    arguments: dict[str, Any],
    call_id: str,
    trace_id: str,
    origin: str,
    on_ask: AskHook | None,
    spec: ToolSpec | None = None,
) -> Authorization:
    """The Gate for one call: validate, decide, stage or ask, and sign. Raises the refusal.

    In order: the tool (``spec``, else the registered one: ``not_found``),
    arguments that are valid Unicode and match the schema
    (``invalid_arguments``), the decision (posture, rules, residual; a deny is
    ``denied``), a dry run's staging of a non-read call (a staged
    Authorization, no intent), an ``ask`` answered by a session grant or the
    approver (a refusal is ``denied``; what the tool's ``stage_check`` would refuse
    is refused before anyone is asked), and last an Intent (HMAC-tagged) for
    exactly this call. Every step is recorded by the kernel's event log; the caller
    records the outcome.
    """
    if spec is None:
        spec = kernel.registry.get(tool)  # raises NotFound
    # The digest the decision is about, computed once: recorded in `decided`, carried by the
    # intent. When orjson encodes the arguments they hold no lone surrogate (it refuses one
    # anywhere); otherwise the walk finds the field to name.
    arguments_sha256 = orjson_digest(arguments)
    if arguments_sha256 is None:
        refuse_lone_surrogates(arguments)
    spec.validate(arguments)
    decision = decide(spec, kernel.posture, kernel.rules, arguments)
    if kernel._hooks:  # pre_call hooks: a decision only gets stricter (see _hooks.pre_call)
        decision = await pre_call(
            kernel, spec, arguments, decision, call_id=call_id, trace_id=trace_id, origin=origin
        )
    if arguments_sha256 is None:
        arguments_sha256 = arguments_digest(arguments)
    kernel.events.emit(
        "decided",
        trace_id,
        call_id=call_id,
        tool=tool,
        arguments_sha256=arguments_sha256,
        **decision.to_dict(),
    )
    if decision.verdict is Effect.DENY:
        raise Denied(f"{tool} was refused: {decision.reason}", rule=decision.rule).with_decision(
            decision
        )
    if kernel.dry_run and spec.consequence is not Consequence.READ and not spec.composes_dry_run:
        if kernel.registry.find(tool) is not spec:  # a request (invoke_request): no plan can
            refused = Decision(Effect.DENY, "dry-run", "a dry run answers no requests")
            raise Denied(
                f"{tool} was refused: a dry run stages calls, and a request from a "
                "connected server cannot be staged or applied later",
                rule="dry-run",
            ).with_decision(refused)
        if spec.stage_check is not None:  # what applying would refuse is refused now
            await spec.stage_check(arguments, kernel.posture is Posture.UNRESTRICTED)
        staged = StagedCall(
            call_id,
            trace_id,
            tool,
            arguments,
            spec.consequence.value,
            origin,
            time.time(),
            session=kernel.session_id,
            posture=kernel.posture.value,
        )
        kernel.plan.stage(staged, kernel.roots)
        kernel._conclude(call_id, trace_id, "staged", tool=tool, arguments=arguments)
        return Authorization._create(
            spec, arguments, decision, call_id, trace_id, origin, staged=True
        )
    if decision.verdict is Effect.ASK:
        # What running it would refuse anyway (a write to .git/config, a path outside the
        # roots) is refused before anyone is asked: a person never approves a call in vain.
        if spec.stage_check is not None:
            await spec.stage_check(arguments, kernel.posture is Posture.UNRESTRICTED)
        decision = await _ask(kernel, spec, arguments, decision, call_id, trace_id, origin, on_ask)
    intent = kernel._authority.issue(
        tool, arguments, decision.verdict.value, decision.rule, arguments_sha256=arguments_sha256
    )
    return Authorization._create(spec, arguments, decision, call_id, trace_id, origin, intent)


async def _ask(
    kernel: Kernel,
    spec: ToolSpec,
    arguments: dict[str, Any],
    decision: Decision,
    call_id: str,
    trace_id: str,
    origin: str,
    on_ask: AskHook | None,
) -> Decision:
    """An ``ask`` decision resolved: a session grant, else the approver's answer."""
    grants = kernel._session_grants()  # the caller's own (Kernel.as_caller)
    grant = grants.find(spec.name, arguments)
    if grant is not None:
        return Decision(
            Effect.ALLOW,
            "grant:session",
            f"approved earlier for this session ({decision.rule})",
        )
    request = ApprovalRequest(
        spec.name,
        kernel.redactor.redact_for_person(arguments),
        spec.consequence.value,
        decision.rule,
        decision.reason,
        origin,
        trace_id,
        str(spec.meta.get("runs_on", "")),
    )
    kernel.events.emit(
        "approval_asked", trace_id, call_id=call_id, tool=spec.name, rule=decision.rule
    )
    async with on_ask() if on_ask is not None else contextlib.nullcontext():
        answer: ApprovalAnswer = await kernel.approver.approve(request)
    kernel.events.emit(
        "approval_answered",
        trace_id,
        call_id=call_id,
        tool=spec.name,
        choice=answer.choice.value,
        reason=answer.reason,
        pattern=dict(answer.pattern) if answer.pattern else None,
    )
    if answer.choice is Choice.DENY:
        refused = Decision(Effect.DENY, f"approver:{decision.rule}", answer.reason)
        raise Denied(
            f"{spec.name} was refused by the approver ({answer.reason}); "
            f"it asked because {decision.reason}",
            rule=refused.rule,
        ).with_decision(refused)
    if answer.choice is Choice.SESSION:
        grants.add(spec.name, arguments, answer.pattern)
        return Decision(Effect.ALLOW, "approved:session", answer.reason)
    return Decision(Effect.ALLOW, "approved:once", answer.reason)


def refuse_lone_surrogates(value: Any, where: str = "") -> None:
    """Raise InvalidArguments naming the first argument that holds a lone surrogate.

    Such a string is not Unicode text: it has no UTF-8 form to sign in an
    intent, stage in a plan or send to a tool, so the call is refused before
    the Gate looks (the record shows it escaped, see escape_surrogates).
    """
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidArguments(
                    f"argument {where or '(value)'} holds a lone surrogate "
                    f"({escape_surrogates(value)[:200]!r}); arguments must be valid Unicode "
                    "(a byte that is not UTF-8 cannot be passed as text)",
                    field=where or None,
                ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            name = f"{where}.{key}" if where else str(key)
            refuse_lone_surrogates(key, name)
            refuse_lone_surrogates(item, name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            refuse_lone_surrogates(item, f"{where}[{i}]")
