"""Hooks: an operator's own checks around the Gate, which can only make it stricter.

A :class:`Hook` is called at four points of a session (:data:`HOOK_POINTS`):

- ``pre_call``: after the decision function, before a dry run stages a call
  or a person is asked. Its answer is ``continue``, ``ask`` or ``deny``, and
  :func:`pre_call` combines it so the decision only gets stricter: ``deny``
  refuses the call, ``ask`` turns an ``allow`` into an ``ask``; nothing turns
  a deny or an ask into an allow (``allow`` is read as ``continue``). A call
  the decision function denied is refused before any hook runs. A hook that
  fails (raises, times out, answers something that is not an answer) refuses
  the call: **deny, not ask**, because the check the operator required did
  not run, and a person answering yes would go around it.
- ``post_call``: after the call's outcome, which the hook sees as the kernel
  recorded it (redacted, capped); its ``annotations`` are recorded, the
  outcome is never changed.
- ``session_start``: when the kernel is entered, after its startups; only
  ``continue`` lets the session start (deny, ask and a failure refuse it:
  there is no call a person could be asked about).
- ``session_end``: when the kernel closes, before its resources do; recorded only.

Which calls a hook sees: ``match``, rule patterns in the policy's own syntax
(``run_shell(rm *)``, ``write_file(path=.env)``, a tool glob), judged by the
policy's own judge: a hook runs for a call where a deny rule with one of its
patterns would deny or ask, so a line the judge cannot read whole, or a word
computed at run time that could match, runs the hook too. No pattern: every call.

Every run is one ``hook_ran`` record (hook, point, call, verdict, reason,
duration, what the runner adds: a command's exit status, its stderr's tail).
What a hook receives is a JSON-like dict (:func:`hook_event`), its strings
passed through the session's redactor, and its own deep copy: a Python hook
that changes it changes neither the call's arguments nor the outcome the
caller gets nor what the next hook sees.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import trio

from ._errors import Denied, InvalidArguments, RingfenceError
from ._tools import ToolSpec
from .policy._decide import Decision, Verdict
from .policy._judge import Policy
from .policy._rules import Effect, RuleError, parse_rule

if TYPE_CHECKING:
    from ._calls import Outcome
    from ._kernel import Kernel

__all__ = [
    "HOOK_POINTS",
    "MAX_HOOK_TIMEOUT",
    "Hook",
    "HookAnswer",
    "hook_event",
    "pre_call",
]

HOOK_POINTS = ("pre_call", "post_call", "session_start", "session_end")
_ANSWERS = ("continue", "allow", "ask", "deny")
DEFAULT_HOOK_TIMEOUT = 10.0
MAX_HOOK_TIMEOUT = 300.0
MAX_REASON_CHARS = 2000

HookRun = Callable[[Mapping[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class HookAnswer:
    """What a hook said: ``continue``, ``ask`` or ``deny``, a reason, annotations.

    ``details`` are the runner's (a command's exit status, its stderr's
    tail), recorded with the answer and never read as part of it.
    """

    decision: str = "continue"
    reason: str = ""
    annotations: Mapping[str, Any] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def deny(cls, reason: str) -> HookAnswer:
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str) -> HookAnswer:
        return cls("ask", reason)

    @classmethod
    def parse(cls, value: Any, *, needs_decision: bool) -> HookAnswer:
        """An answer from what a hook returned (None, a HookAnswer, or a JSON object).

        Raises ValueError naming what is wrong: not an object, a missing or
        unknown ``decision`` (where the point needs one), a ``reason`` that is
        not text, ``annotations`` that are not an object. Unknown keys are
        ignored. ``allow`` is kept as said and counts as ``continue``.
        """
        if value is None:
            return cls()
        if isinstance(value, HookAnswer):
            value = {
                "decision": value.decision,
                "reason": value.reason,
                "annotations": dict(value.annotations),
            }
        if not isinstance(value, Mapping):
            raise ValueError(f"the answer must be a JSON object, not {type(value).__name__}")
        decision = value.get("decision")
        if decision is None and not needs_decision:
            decision = "continue"
        if decision not in _ANSWERS:
            raise ValueError(
                f"decision must be one of {', '.join(_ANSWERS)}, not {decision!r}"
                if decision is not None
                else "the answer has no decision (continue, ask or deny)"
            )
        reason = value.get("reason", "")
        if not isinstance(reason, str):
            raise ValueError("reason must be a string")
        annotations = value.get("annotations", {})
        if not isinstance(annotations, Mapping):
            raise ValueError("annotations must be a JSON object")
        return cls(decision, reason[:MAX_REASON_CHARS], dict(annotations))


@dataclass(frozen=True)
class Hook:
    """One hook: its name, the points it runs at, the calls it sees, and what runs it.

    ``run(event)`` is awaited with the event dict (:func:`hook_event`) and
    returns a :class:`HookAnswer`, a JSON-like object of the same keys, or
    None (``continue``); it is cancelled after ``timeout_seconds``. A Python
    hook is such a function; a plugin's command hook is one whose ``run``
    starts the command confined (``ringfence.plugins``). ``kind``, ``plugin``
    and ``details`` are recorded with ``hook_added``. Raises InvalidArguments
    for an unknown point, a bad pattern or timeout.
    """

    name: str
    run: HookRun
    points: tuple[str, ...] = ("pre_call",)
    match: tuple[str, ...] = ()
    timeout_seconds: float = DEFAULT_HOOK_TIMEOUT
    kind: str = "python"
    plugin: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", tuple(self.points))
        object.__setattr__(self, "match", tuple(self.match))
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))
        if not self.name or not isinstance(self.name, str):
            raise InvalidArguments("a hook needs a name", field="name")
        unknown = [p for p in self.points if p not in HOOK_POINTS]
        if unknown or not self.points:
            raise InvalidArguments(
                f"hook {self.name!r}: points must be some of {', '.join(HOOK_POINTS)}"
                + (f", not {unknown[0]!r}" if unknown else ""),
                field="points",
            )
        t = self.timeout_seconds
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= MAX_HOOK_TIMEOUT:
            raise InvalidArguments(
                f"hook {self.name!r}: timeout_seconds must be above 0 and at most "
                f"{MAX_HOOK_TIMEOUT:g}, not {t!r}",
                field="timeout_seconds",
            )
        self.matcher(())  # a bad pattern fails here, not at the first call

    def matcher(self, roots: Sequence[str]) -> Policy | None:
        """The patterns as deny rules of a Policy over ``roots`` (None: every call)."""
        if not self.match:
            return None
        rules = []
        for text in self.match:
            try:
                rules.append(parse_rule(text, "deny", source=f"hook {self.name}", layer="hook"))
            except RuleError as exc:
                raise InvalidArguments(
                    f"hook {self.name!r}: match {text!r}: {exc.message}", field="match"
                ) from None
        return Policy(tuple(rules)).with_roots(roots)

    def describe(self) -> dict[str, Any]:
        """What ``hook_added`` records and listings show."""
        out: dict[str, Any] = {
            "hook": self.name,
            "type": self.kind,
            "points": list(self.points),
            "match": list(self.match),
            "timeout_seconds": self.timeout_seconds,
        }
        if self.plugin:
            out["plugin"] = self.plugin
        out.update(self.details)
        return out


@dataclass(frozen=True)
class _Registered:
    hook: Hook
    matcher: Policy | None


def register(kernel: Kernel, hook: Hook) -> None:
    """Add ``hook`` to ``kernel`` (``Kernel.add_hook``); a second hook of the same name is refused."""
    if not isinstance(hook, Hook):
        raise TypeError(f"a hook is a ringfence.runtime.Hook, not {type(hook).__name__}")
    if any(r.hook.name == hook.name for r in kernel._hooks):
        raise InvalidArguments(f"a hook named {hook.name!r} is registered already", field="name")
    kernel._hooks.append(_Registered(hook, hook.matcher(kernel.roots)))
    kernel.events.emit("hook_added", kernel.session_id, **hook.describe())


def _sees(entry: _Registered, spec: ToolSpec, arguments: Any) -> bool:
    """Whether a call is one ``entry``'s hook sees: a deny rule with its patterns would deny or ask."""
    if entry.matcher is None:
        return True
    if not isinstance(arguments, Mapping):
        return True  # refused by validation before any hook; a hook that sees it costs nothing
    verdict = entry.matcher.evaluate(spec.name, arguments, spec.meta, exec_checked=False)
    return verdict is not None and verdict.effect in (Effect.DENY, Effect.ASK)


def hook_event(kernel: Kernel, point: str, **data: Any) -> dict[str, Any]:
    """The event a hook receives: the point, the session, and ``data``, redacted."""
    event = {
        "hook_event": point,
        "session_id": kernel.session_id,
        "posture": kernel.posture.value,
        "roots": list(kernel.roots),
        **data,
    }
    redacted: dict[str, Any] = kernel.redactor.redact_value(event)
    return redacted


async def _run(
    kernel: Kernel, entry: _Registered, point: str, event: Mapping[str, Any], trace_id: str | None
) -> tuple[HookAnswer | None, str]:
    """Run one hook under its timeout and record it; (its answer, or None and why it failed)."""
    hook = entry.hook
    started = time.monotonic()
    answer: HookAnswer | None = None
    failure = ""
    details: Mapping[str, Any] = {}
    try:
        with trio.move_on_after(hook.timeout_seconds) as scope:
            # Each hook gets its own copy: what it changes in it reaches neither the call
            # (its arguments, its outcome as the caller gets it) nor the next hook.
            raw = await hook.run(copy.deepcopy(dict(event)))
        if scope.cancelled_caught:
            failure = f"it did not answer within {hook.timeout_seconds:g}s and was stopped"
        else:
            answer = HookAnswer.parse(raw, needs_decision=point in ("pre_call", "session_start"))
            details = raw.details if isinstance(raw, HookAnswer) else {}
    except RingfenceError as exc:
        failure, details = exc.message, exc.details
    except (ValueError, TypeError) as exc:
        failure = f"its answer was not one: {exc}"
    except Exception as exc:  # a Python hook's own bug: the hook failed, fail closed
        failure = f"{type(exc).__name__}: {exc}"
    duration_ms = round((time.monotonic() - started) * 1000, 3)
    redact = kernel.redactor.redact
    record: dict[str, Any] = {
        "hook": hook.name,
        "point": point,
        "verdict": answer.decision if answer is not None else "failed",
        "duration_ms": duration_ms,
    }
    if hook.plugin:
        record["plugin"] = hook.plugin
    for key in ("call_id", "tool"):
        if key in event:
            record[key] = event[key]
    if answer is not None:
        answer = HookAnswer(
            answer.decision,
            redact(answer.reason),
            kernel.redactor.redact_value(dict(answer.annotations)),
            details,
        )
        if answer.reason:
            record["reason"] = answer.reason
        if answer.annotations:
            record["annotations"] = dict(answer.annotations)
    else:
        failure = redact(failure)
        record["reason"] = failure
    if details:
        record["details"] = dict(details)
    if not kernel.events.closed:
        kernel.events.emit("hook_ran", trace_id or kernel.session_id, **record)
    return answer, failure


async def pre_call(
    kernel: Kernel,
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    decision: Decision,
    *,
    call_id: str,
    trace_id: str,
    origin: str,
) -> Decision:
    """The decision after the ``pre_call`` hooks that see this call: never less strict.

    In registration order; the first ``deny`` (or failure) ends it. Returns
    ``decision`` itself, an ``ask`` in place of an ``allow``, or a ``deny``:
    by construction no path returns an allow the decision did not hold.
    """
    if decision.verdict is Verdict.DENY:
        return decision
    entries = [
        e for e in kernel._hooks if "pre_call" in e.hook.points and _sees(e, spec, arguments)
    ]
    if not entries:
        return decision
    event = hook_event(
        kernel,
        "pre_call",
        tool=spec.name,
        arguments=arguments,
        consequence=spec.consequence.value,
        call_id=call_id,
        trace_id=trace_id,
        origin=origin,
        decision=decision.to_dict(),
    )
    for entry in entries:
        name = entry.hook.name
        source = f"plugin:{entry.hook.plugin}" if entry.hook.plugin else entry.hook.kind
        answer, failure = await _run(kernel, entry, "pre_call", event, trace_id)
        if answer is None:
            return Decision(
                Verdict.DENY,
                f"hook:{name}",
                f"the pre_call hook {name} failed ({failure}); a pre_call hook that fails "
                "refuses the call",
                source,
                "hook",
            )
        reason = answer.reason or "no reason given"
        if answer.decision == "deny":
            return Decision(
                Verdict.DENY,
                f"hook:{name}",
                f"the hook {name} refused it: {reason}",
                source,
                "hook",
            )
        if answer.decision == "ask":
            if decision.verdict is Verdict.ALLOW:
                decision = Decision(
                    Verdict.ASK, f"hook:{name}", f"the hook {name} asks: {reason}", source, "hook"
                )
            else:  # an ask already: the person sees both reasons
                decision = Decision(
                    Verdict.ASK,
                    decision.rule,
                    f"{decision.reason}; the hook {name} asks too: {reason}",
                    decision.source,
                    decision.layer,
                )
    return decision


async def post_call(kernel: Kernel, outcome: Outcome, arguments: Any) -> None:
    """Run the ``post_call`` hooks that see this call with its outcome; recorded, nothing changed."""
    spec = kernel.registry.find(outcome.tool)
    entries = [
        e
        for e in kernel._hooks
        if "post_call" in e.hook.points
        and (e.matcher is None or (spec is not None and _sees(e, spec, arguments)))
    ]
    if not entries:
        return
    if outcome.staged:
        status: dict[str, Any] = {"status": "staged", "result": outcome.value}
    elif outcome.error is not None:
        status = {"status": "failed", "error": outcome.error.to_dict()}
    else:
        status = {"status": "finished", "result": outcome.value}
    event = hook_event(
        kernel,
        "post_call",
        tool=outcome.tool,
        arguments=arguments,
        call_id=outcome.call_id,
        trace_id=outcome.trace_id,
        origin=outcome.origin,
        decision=outcome.decision.to_dict() if outcome.decision is not None else None,
        outcome=status,
    )
    for entry in entries:
        await _run(kernel, entry, "post_call", event, outcome.trace_id)


async def session_point(kernel: Kernel, point: str) -> None:
    """Run the ``session_start`` or ``session_end`` hooks.

    ``session_start``: a deny or a failure raises Denied (the session is
    refused). ``session_end``: recorded only; shielded, each hook bounded by
    its own timeout, so a closing kernel always closes.
    """
    entries = [e for e in kernel._hooks if point in e.hook.points]
    if not entries:
        return
    event = hook_event(kernel, point)
    if point == "session_end":
        with trio.CancelScope(shield=True):
            for entry in entries:
                await _run(kernel, entry, point, event, None)
        return
    for entry in entries:
        answer, failure = await _run(kernel, entry, point, event, None)
        name = entry.hook.name
        if answer is None or answer.decision in ("deny", "ask"):  # no call to ask a person about
            why = (
                f"its session_start hook failed ({failure})"
                if answer is None
                else f"the hook answered {answer.decision}: {answer.reason or 'no reason given'}"
            )
            raise Denied(f"the session was refused by the hook {name}: {why}", rule=f"hook:{name}")
