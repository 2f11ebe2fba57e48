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
import os
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
from .policy._decide import Decision, Posture, _by_posture, _strongest_rule, decide
from .policy._matchers import normalize_path
from .policy._rules import Effect

if TYPE_CHECKING:
    from ._kernel import Kernel

__all__ = [
    "authorize",
    "confirm_resolved_path",
    "judge_resolved_path",
    "path_rules_for",
    "refuse_lone_surrogates",
    "resolved_refusal",
]


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


def path_rules_for(kernel: Kernel, spec: ToolSpec, argument: str) -> bool:
    """Whether an active rule for this tool looks at ``argument`` (else its name cannot
    change a decision, and the tool need not say what it resolves to)."""
    policy = kernel.rules.effective_policy
    if policy is None:
        return False
    return any(name == argument for r in policy.for_tool(spec.name) for name, _ in r.arguments)


def judge_resolved_path(
    kernel: Kernel,
    spec: ToolSpec,
    arguments: dict[str, Any],
    decision: Decision | None,
    argument: str,
    resolved: str,
) -> Decision | None:
    """The call judged again with ``argument`` replaced by the file the tool actually opens.

    Rules compare names: ``read_file x`` where ``x -> .env`` was judged as ``x``. A file
    tool, once its resolver followed every link to the final file, hands that file's
    workspace name here. None: it is the name that was judged, or the rules say nothing
    stronger about it. Else the decision (deny or ask) of the strongest rule that matches
    the resolved name; when no rule matches it and the call ran only because an allow
    rule matched its spelling, the posture's decision for the tool (an allow that matched
    the spelling does not carry over to another file).
    """
    policy = kernel.rules.effective_policy
    if policy is None or not path_rules_for(kernel, spec, argument):
        return None  # name rules do not look at paths
    spelled = arguments.get(argument)
    if not isinstance(spelled, str):
        return None
    roots = policy.roots or kernel.roots
    resolved = _as_spelled_root(resolved, roots)
    if normalize_path(spelled, roots) == normalize_path(resolved, roots):
        return None
    changed = {**arguments, argument: resolved}
    ruled = _strongest_rule(spec, kernel.rules, changed)
    if ruled is not None and ruled.verdict is not Effect.ALLOW:
        return ruled
    if ruled is not None and kernel.posture is not Posture.UNRESTRICTED:
        return None  # an allow rule matches the file itself
    if decision is not None and decision.rule.startswith("allow:"):
        by_posture = _by_posture(spec, kernel.posture, kernel.rules)
        return by_posture if by_posture.verdict is not Effect.ALLOW else None
    return None


def _as_spelled_root(resolved: str, roots: tuple[str, ...]) -> str:
    """An absolute resolved name under a root's real path, spelled under the root as the
    rules know it (a root given through a symlinked directory): rules match it as relative."""
    if not resolved.startswith("/"):
        return resolved
    for given in roots:
        real = os.path.realpath(given)
        if real != given and (resolved == real or resolved.startswith(real.rstrip("/") + "/")):
            return given.rstrip("/") + resolved[len(real.rstrip("/")) :]
    return resolved


def resolved_refusal(
    tool: str, argument: str, spelled: Any, resolved: str, decision: Decision, why: str = ""
) -> Denied:
    """The ``denied`` error for a path that resolves to a file a rule refuses (or asks about)."""
    refused = Decision(Effect.DENY, decision.rule, decision.reason, decision.source, decision.layer)
    return Denied(
        f"{tool} was refused: {argument} {spelled!r} resolves to {resolved!r} (through a "
        f"symbolic link), and {decision.reason}{why}",
        rule=decision.rule,
        field=argument,
    ).with_decision(refused)


async def confirm_resolved_path(
    kernel: Kernel,
    spec: ToolSpec,
    arguments: dict[str, Any],
    decision: Decision | None,
    argument: str,
    resolved: str,
    call_id: str,
    trace_id: str,
    origin: str,
) -> bool:
    """:func:`judge_resolved_path`, recorded (a ``notice``), a deny raised and an ask put to
    the session's grants or approver like any ask. True: an ask was approved."""
    found = judge_resolved_path(kernel, spec, arguments, decision, argument, resolved)
    if found is None:
        return False
    spelled = arguments.get(argument)
    kernel.events.emit(
        "notice",
        trace_id,
        call_id=call_id,
        tool=spec.name,
        message=f"{spec.name}: {argument} {spelled!r} resolves to {resolved!r}; judged again",
        rejudged={"argument": argument, "resolved": resolved, **found.to_dict()},
    )
    if found.verdict is Effect.DENY:
        raise resolved_refusal(spec.name, argument, spelled, resolved, found)
    changed = {**arguments, argument: resolved}
    await _ask(kernel, spec, changed, found, call_id, trace_id, origin, None)
    return True
