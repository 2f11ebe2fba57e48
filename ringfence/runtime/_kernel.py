"""The Kernel: registry, Gate and executor for one session.

Every call takes the same road, one method per layer::

    invoke ─► authorize ─┬─ validate arguments (schema)      invalid_arguments
                         ├─ decide (posture, rules, residual) denied
                         ├─ dry run? stage non-read calls      → staged placeholder
                         ├─ ask? session grant or Approver     denied
                         └─ sign an Intent (Ed25519, for audit; HMAC tag, to redeem)
           ─► execute ───┬─ redeem the Intent (tag, call, expiry, nonce)
                         ├─ run the tool's executor
                         └─ redact, cap, record

and every step is written to the event stream. A direct call, a ``call_tool``
from a script, a nested call from an executor (:meth:`CallContext.invoke`),
``plan apply`` and a call through ``ringfence serve`` all enter at
:meth:`Kernel.invoke`; a connected server's request (MCP sampling,
elicitation) enters at :meth:`Kernel.invoke_request`, the same road under a
name of its own. So every path gets one decision function and one sequence of
records.

What decides cannot be changed from outside: the posture, the rules and the
approver are read-only properties, changed only by :meth:`Kernel.set_posture`,
:meth:`Kernel.add_rules` (an owner's :class:`RulesHandle`) and
:meth:`Kernel.set_approver`, each recorded; an executor gets a
:class:`CallContext`, not the kernel; an :class:`Authorization` is minted only
here.

Every call that was proposed ends in exactly one outcome record: ``finished``,
``failed`` (a refusal, a tool's error, or an unexpected exception inside the
kernel, reported as ``tool_error``), ``staged`` (dry run) or ``cancelled``
(cancellation, KeyboardInterrupt, or the kernel closing while the call was in
flight). Cancellation still propagates after its record is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, final

import trio

from ._approval import (
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    Choice,
    HeadlessDenyApprover,
    SessionGrants,
)
from ._caps import cap_text, escape_surrogates
from ._errors import Denied, InvalidArguments, RingfenceError, ToolError
from ._events import KERNEL_KINDS, RECORD_FIELDS, EventLog, EventSink, MemorySink
from ._files import ringfence_home
from ._intents import Intent, IntentAuthority
from ._plan import Plan, StagedCall
from ._policy import Decision, Posture, Rules, Verdict, decide
from ._redact import Redactor
from ._tools import Consequence, Registry, ToolSpec

__all__ = [
    "Authorization",
    "CallContext",
    "Kernel",
    "NoPublicConstructor",
    "Outcome",
    "RulesHandle",
]

# How much of a result is copied into the "finished" event (the result itself is capped separately).
EVENT_OUTPUT_BYTES = 4096
DEFAULT_OUTPUT_CAP = 64 * 1024
# An error message is cut (after redaction) to this many bytes, marker included, so a
# tool cannot put megabytes into a reply and an event through its exception text.
ERROR_MESSAGE_BYTES = 8 * 1024
# Room for cap_text's marker: a message cut once fits the limit, so cutting is idempotent.
_MARKER_ROOM = 256
# The keys CallContext.emit fills in itself, on top of the log's own fields.
_CONTEXT_FIELDS = RECORD_FIELDS | {"call_id", "tool"}

AskHook = Callable[[], contextlib.AbstractAsyncContextManager[None]]


def new_id() -> str:
    return secrets.token_hex(8)


class NoPublicConstructor(type):
    """A metaclass that makes ``Cls(...)`` a TypeError; the owner calls ``Cls._create(...)``.

    trio's pattern: authority objects (an :class:`Authorization`) can be made only
    where the Gate decided, never by a caller holding the class.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor")

    def _create(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **kwargs)


class CallContext(metaclass=NoPublicConstructor):
    """What an executor learns about, and may do for, the call it is running.

    Narrow on purpose: the call's identity (``tool``, ``call_id``,
    ``trace_id``, ``origin``, ``posture``), its own events (:meth:`emit`),
    redaction and the output cap/spool (:meth:`redact`, :meth:`cap`), and
    nested calls that re-enter the Gate as children of this one
    (:meth:`invoke`). It is not the kernel: an executor cannot change the
    posture, the rules, the approver or the grants, and cannot run a tool
    past the Gate. Made only by the kernel.
    """

    __slots__ = ("_kernel", "call_id", "origin", "posture", "tool", "trace_id")

    def __init__(
        self, kernel: Kernel, tool: ToolSpec, call_id: str, trace_id: str, origin: str
    ) -> None:
        self._kernel = kernel
        self.tool = tool
        self.call_id = call_id
        self.trace_id = trace_id
        self.origin = origin
        self.posture = kernel.posture

    def emit(self, kind: str, /, **data: Any) -> None:
        """Add a tool-specific event (``notice``, ``output``, …) to this call's trace.

        The record gets this call's ``call_id`` and ``tool``. Raises ValueError
        when ``kind`` is one the kernel writes itself (``started``,
        ``finished``, …; a tool cannot fake its own outcome) or ``data`` uses
        a key the record already has (``tool``, ``call_id``, ``seq``, ``ts``,
        ``kind``, ``trace_id``, ``prev``, ``hash``): name such data otherwise
        (``nested_tool=…``).
        """
        if kind in KERNEL_KINDS:
            raise ValueError(f"CallContext.emit: {kind!r} records are written by the kernel only")
        clash = _CONTEXT_FIELDS.intersection(data)
        if clash:
            raise ValueError(
                f"CallContext.emit({kind!r}): {', '.join(sorted(clash))} is filled in by the "
                "kernel; name the data otherwise (e.g. nested_tool=…)"
            )
        self._kernel.events.emit(
            kind, self.trace_id, call_id=self.call_id, tool=self.tool.name, **data
        )

    # -- redaction and output ----------------------------------------------------------

    @property
    def redactor(self) -> Redactor:
        """The session's redactor (registering a secret only ever hides more)."""
        return self._kernel.redactor

    def redact(self, text: str) -> str:
        return self._kernel.redactor.redact(text)

    def redact_value(self, value: Any) -> Any:
        return self._kernel.redactor.redact_value(value)

    @property
    def output_cap_bytes(self) -> int:
        return self._kernel.output_cap_bytes

    @property
    def spool_dir(self) -> Path | None:
        return self._kernel.spool_dir

    def cap(self, text: str) -> str:
        """``text`` cut to the session's output cap, the whole of it spooled to a file."""
        return cap_text(text, self._kernel.output_cap_bytes, self._kernel.spool_dir).text

    # -- nested calls ------------------------------------------------------------------

    async def invoke(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        origin: str = "nested",
        trace_id: str | None = None,
        parent_id: str | None = None,
        on_ask: AskHook | None = None,
    ) -> Outcome:
        """A call made by this one: it re-enters the Gate (decided, asked, recorded) as a
        child of this call (``parent_id``), in this call's trace unless ``trace_id``
        names another. ``parent_id``, if given, must be this call's id."""
        if parent_id is not None and parent_id != self.call_id:
            raise ValueError("CallContext.invoke: a nested call's parent is the calling call")
        return await self._kernel.invoke(
            tool,
            arguments,
            origin=origin,
            trace_id=trace_id or self.trace_id,
            parent_id=self.call_id,
            on_ask=on_ask,
        )

    def __repr__(self) -> str:
        return f"CallContext({self.tool.name!r}, call_id={self.call_id!r}, origin={self.origin!r})"


@final
@dataclass(frozen=True)
class Authorization(metaclass=NoPublicConstructor):
    """The Gate's answer for one call. Only :meth:`Kernel.authorize` makes these
    (``Authorization(...)`` is a TypeError)."""

    spec: ToolSpec
    arguments: dict[str, Any]
    decision: Decision
    call_id: str
    trace_id: str
    origin: str
    intent: Intent | None = None
    staged: bool = False


@dataclass(frozen=True)
class Outcome:
    """The result of one call: a value, a staged placeholder, or an error."""

    tool: str
    call_id: str
    trace_id: str
    origin: str
    decision: Decision | None
    value: Any = None
    error: RingfenceError | None = None
    staged: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tool": self.tool,
            "call_id": self.call_id,
            "decision": self.decision.to_dict() if self.decision else None,
            "staged": self.staged,
        }
        if self.error is not None:
            out["error"] = self.error.to_dict()
        else:
            out["result"] = self.value
        return out


class RulesHandle:
    """The owner's handle on one rule source of a kernel (see :meth:`Kernel.add_rules`).

    Only the holder can change or withdraw its rules; every change is recorded
    (``rules_changed``) and applies to the next decision.
    """

    __slots__ = ("_kernel", "source")

    def __init__(self, kernel: Kernel, source: str) -> None:
        self._kernel = kernel
        self.source = source

    def update(self, rules: Rules) -> None:
        """Replace this source's rules."""
        self._kernel._set_rule_source(self.source, rules)

    def remove(self) -> None:
        """Withdraw this source's rules. Idempotent."""
        self._kernel._set_rule_source(self.source, None)


class Kernel:
    """One governed session: tools, posture, approver, events, dry-run plan.

    Use as ``async with Kernel(...) as kernel:`` so resources that tools
    register (backend sessions, MCP connections) are closed, cancellation or
    not, and the event stream is sealed.

    What decides a call cannot be changed from outside: ``posture``,
    ``approver`` and ``rules`` are read-only. The posture changes through
    :meth:`set_posture`, the approver through :meth:`set_approver`, and rules
    come from sources registered once with :meth:`add_rules` (the ``rules``
    given here are the source ``"session"``); each change is an event.
    """

    def __init__(
        self,
        posture: Posture | str = Posture.ASK,
        approver: Approver | None = None,
        rules: Rules | None = None,
        events_sink: EventSink | None = None,
        dry_run: bool = False,
        plan_path: Path | None = None,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP,
        spool_dir: Path | None = None,
        intent_ttl_seconds: float = 30.0,
        secrets: Iterable[str] = (),
        secret_names: Iterable[str] = (),  # extra credential-name globs (runtime._redact)
        roots: Iterable[str] = (),
    ) -> None:
        self._posture = Posture.parse(posture)
        self._approver: Approver = approver if approver is not None else HeadlessDenyApprover()
        self._rule_sources: dict[str, Rules] = {"session": rules or Rules()}
        self._rules = self._rule_sources["session"]
        self.dry_run = dry_run
        self.plan_path = plan_path
        self.output_cap_bytes = output_cap_bytes
        self.intent_ttl_seconds = intent_ttl_seconds
        # The workspace roots the session's tools are confined to, as text: recorded in a
        # plan and compared when one is applied (the kernel itself confines nothing).
        self.roots = tuple(str(r) for r in roots)
        self.registry = Registry()
        self.redactor = Redactor(secrets, names=secret_names)
        self._grants = SessionGrants()
        self.session_id = new_id()
        self._authority = IntentAuthority(intent_ttl_seconds)
        self.events = EventLog(events_sink or MemorySink(), self.redactor)
        self.plan = Plan(plan_path)
        self._exit = contextlib.AsyncExitStack()
        # Contexts entered with the kernel (nurseries, connections): exited in __aexit__,
        # in the entering task and unshielded, so their cancel scopes nest properly.
        self._entered: contextlib.AsyncExitStack | None = None
        self._startups: list[Callable[[Kernel], Awaitable[None]]] = []
        # Per-session state that client packages attach (e.g. extensions["mcp"]).
        self.extensions: dict[str, Any] = {}
        # Calls proposed and not yet ended: call_id -> (trace_id, tool). _conclude removes.
        self._open_calls: dict[str, tuple[str, str]] = {}
        self._closed = False
        if spool_dir is None:
            spool_dir = ringfence_home() / "spool" / self.session_id
        self.spool_dir: Path = spool_dir
        self.events.emit(
            "session_started",
            self.session_id,
            public_key=self._authority.public_key_pem(),
            posture=self._posture.value,
            dry_run=self.dry_run,
        )

    # -- what decides: read-only, changed only through audited methods -----------------

    @property
    def posture(self) -> Posture:
        return self._posture

    @property
    def approver(self) -> Approver:
        return self._approver

    @property
    def rules(self) -> Rules:
        """The merged rules of every source (see :meth:`add_rules`)."""
        return self._rules

    def rule_sources(self) -> dict[str, Rules]:
        """Every registered rule source and its rules, in registration order (a copy)."""
        return dict(self._rule_sources)

    def add_rules(self, source: str, rules: Rules) -> RulesHandle:
        """Register ``rules`` under ``source`` (once) and return the owner's handle.

        The Gate decides with the merge of every source: deny, ask and
        autonomous patterns are the union. An allowlist is one source's say:
        a second source with an allowlist is refused (ValueError), since two
        allowlists cannot be merged without widening one of them. Raises
        ValueError when ``source`` is already registered.
        """
        if source in self._rule_sources:
            raise ValueError(f"rule source {source!r} is already registered; use its handle")
        self._set_rule_source(source, rules)
        return RulesHandle(self, source)

    def _set_rule_source(self, source: str, rules: Rules | None) -> None:
        sources = dict(self._rule_sources)
        if rules is None:
            if sources.pop(source, None) is None:
                return
        else:
            sources[source] = rules
        merged = _merge_rules(sources)
        self._rule_sources, self._rules = sources, merged
        self.events.emit(
            "rules_changed",
            self.session_id,
            source=source,
            removed=rules is None,
            rules=dataclasses.asdict(rules) if rules is not None else None,
        )

    def set_approver(self, approver: Approver, *, reason: str) -> None:
        """Replace who is asked, recorded as ``approver_changed`` with ``reason``."""
        self.events.emit(
            "approver_changed",
            self.session_id,
            old=type(self._approver).__name__,
            new=type(approver).__name__,
            reason=reason,
        )
        self._approver = approver

    # -- registry and session state -------------------------------------------------

    def register(self, spec: ToolSpec) -> None:
        self.registry.add(spec)

    def tools(self) -> list[ToolSpec]:
        return list(self.registry)

    def set_posture(self, posture: Posture | str) -> None:
        """Change the session's posture; applies to the next call."""
        new = Posture.parse(posture)
        self.events.emit("posture_changed", self.session_id, old=self._posture.value, new=new.value)
        self._posture = new

    def register_secret(self, value: str) -> None:
        self.redactor.register(value)

    def public_key_pem(self) -> str:
        return self._authority.public_key_pem()

    def push_async_callback(self, fn: Callable[[], Awaitable[Any]]) -> None:
        """Run ``fn`` when the kernel closes (last registered, first run)."""
        self._exit.push_async_callback(fn)

    def add_startup(self, fn: Callable[[Kernel], Awaitable[None]]) -> None:
        """Run ``await fn(kernel)`` when the kernel is entered with ``async with``.

        For work that starts processes or needs a nursery (MCP connections):
        ``fn`` may call :meth:`enter_async_context`. If a startup raises, the
        kernel closes and the error propagates from ``async with``.
        """
        self._startups.append(fn)

    async def enter_async_context(self, cm: contextlib.AbstractAsyncContextManager[Any]) -> Any:
        """Enter ``cm`` for the life of this ``async with`` block; it exits first on the way out.

        Only inside ``async with kernel`` (a startup, or the block itself), from
        the task that entered the kernel. Raises RuntimeError otherwise.
        """
        if self._entered is None:
            raise RuntimeError("enter_async_context needs the kernel entered with `async with`")
        return await self._entered.enter_async_context(cm)

    async def __aenter__(self) -> Kernel:
        self._entered = contextlib.AsyncExitStack()
        try:
            for startup in self._startups:
                await startup(self)
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        entered, self._entered = self._entered, None
        try:
            if entered is not None:
                await entered.__aexit__(*exc)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close registered resources, then seal the event stream. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            with trio.CancelScope(shield=True):
                await self._exit.aclose()
        finally:
            # A call still in flight in another task ends here, before the seal; its own
            # outcome, if it ever comes, is then a no-op (one outcome per call).
            for call_id, (trace_id, tool) in list(self._open_calls.items()):
                self._conclude(
                    call_id,
                    trace_id,
                    "cancelled",
                    tool=tool,
                    reason="the kernel closed while the call was in flight",
                )
            self.events.seal(self._authority.sign_bytes)

    # -- the road every call takes ----------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        """Invoke ``tool`` and return its value, or raise its RingfenceError."""
        return (await self.invoke(tool, arguments, **kw)).unwrap()

    async def invoke(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        origin: str = "direct",
        trace_id: str | None = None,
        parent_id: str | None = None,
        on_ask: AskHook | None = None,
    ) -> Outcome:
        """Gate and run one call. Refusals and failures come back in the Outcome.

        ``on_ask`` is entered while a person is being asked (the script bridge
        uses it to pause the script's clock). Cancellation propagates.
        """
        return await self._invoke(tool, None, arguments, origin, trace_id, parent_id, on_ask)

    async def invoke_request(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        *,
        origin: str,
        trace_id: str | None = None,
    ) -> Outcome:
        """Gate and run a request that does not come in by a tool's name.

        For requests a connected party makes of the host (an MCP server's
        sampling or elicitation request): ``spec`` describes the request as a
        call of its own kind (``mcp.<server>.__sampling``), with a consequence,
        and takes exactly the road of :meth:`invoke`: validation, rules,
        posture, session grants, the approver, an intent, and the same events.
        ``spec`` is not registered, so no agent can call it by name; its name
        must not be a registered tool's (ValueError).
        """
        if spec.name in self.registry:
            raise ValueError(f"{spec.name} is a registered tool; a request spec has its own name")
        return await self._invoke(spec.name, spec, arguments, origin, trace_id, None, None)

    async def _invoke(
        self,
        tool: str,
        request_spec: ToolSpec | None,
        arguments: Mapping[str, Any] | None,
        origin: str,
        trace_id: str | None,
        parent_id: str | None,
        on_ask: AskHook | None,
    ) -> Outcome:
        call_id = new_id()
        trace_id = trace_id or call_id
        # Copy a mapping so the caller cannot change it after the Gate looked; anything
        # else goes to validation as is and is refused there.
        args: Any = dict(arguments) if isinstance(arguments, Mapping) else arguments
        if arguments is None:
            args = {}
        self.redactor.register_named_values(args)
        spec = request_spec or self.registry.find(tool)
        if spec is not None:  # secrets not keyed by name (a script's literals), too
            self.redactor.register_literals(spec.literal_secrets(args, self.redactor.is_secret_key))
        self.events.emit(
            "proposed",
            trace_id,
            call_id=call_id,
            tool=tool,
            arguments=args,
            origin=origin,
            parent_id=parent_id,
        )
        self._open_calls[call_id] = (trace_id, tool)
        decision: Decision | None = None
        try:
            with self._recording_outcome(call_id, trace_id, tool):
                auth = await self._authorize(tool, args, call_id, trace_id, origin, on_ask, spec)
                decision = auth.decision
                if auth.staged:
                    value = self._placeholder(auth)
                    return Outcome(tool, call_id, trace_id, origin, decision, value, staged=True)
                value = await self.execute(auth)
            return Outcome(tool, call_id, trace_id, origin, decision, value)
        except RingfenceError as exc:
            return Outcome(tool, call_id, trace_id, origin, decision or exc.decision, error=exc)

    async def authorize(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        call_id: str | None = None,
        trace_id: str | None = None,
        origin: str = "direct",
        on_ask: AskHook | None = None,
    ) -> Authorization:
        """Validate, decide, stage or ask, and sign. Raises the refusal.

        Called directly (without ``call_id``), it records the ``proposed``
        record and, on a refusal, the ``failed`` outcome that :meth:`invoke`
        would have.
        """
        if call_id is not None:
            return await self._authorize(
                tool, arguments, call_id, trace_id or call_id, origin, on_ask
            )
        call_id = new_id()
        trace_id = trace_id or call_id
        self.redactor.register_named_values(arguments)
        self.events.emit(
            "proposed", trace_id, call_id=call_id, tool=tool, arguments=arguments, origin=origin
        )
        self._open_calls[call_id] = (trace_id, tool)
        with self._recording_outcome(call_id, trace_id, tool):
            return await self._authorize(tool, arguments, call_id, trace_id, origin, on_ask)

    async def _authorize(
        self,
        tool: str,
        arguments: dict[str, Any],
        call_id: str,
        trace_id: str,
        origin: str,
        on_ask: AskHook | None,
        spec: ToolSpec | None = None,
    ) -> Authorization:
        if spec is None:
            spec = self.registry.get(tool)  # raises NotFound
        _refuse_lone_surrogates(arguments)
        spec.validate(arguments)
        decision = decide(spec, self.posture, self.rules, arguments)
        self.events.emit("decided", trace_id, call_id=call_id, tool=tool, **decision.to_dict())
        if decision.verdict is Verdict.DENY:
            raise Denied(
                f"{tool} was refused: {decision.reason}", rule=decision.rule
            ).with_decision(decision)
        if self.dry_run and spec.consequence is not Consequence.READ and not spec.composes_dry_run:
            if self.registry.find(tool) is not spec:  # a request (invoke_request): no plan can
                refused = Decision(Verdict.DENY, "dry-run", "a dry run answers no requests")
                raise Denied(
                    f"{tool} was refused: a dry run stages calls, and a request from a "
                    "connected server cannot be staged or applied later",
                    rule="dry-run",
                ).with_decision(refused)
            staged = StagedCall(
                call_id,
                trace_id,
                tool,
                arguments,
                spec.consequence.value,
                origin,
                time.time(),
                session=self.session_id,
                posture=self.posture.value,
            )
            self.plan.stage(staged, self.roots)
            self._conclude(call_id, trace_id, "staged", tool=tool, arguments=arguments)
            return Authorization._create(
                spec, arguments, decision, call_id, trace_id, origin, staged=True
            )
        if decision.verdict is Verdict.ASK:
            decision = await self._ask(spec, arguments, decision, call_id, trace_id, origin, on_ask)
        intent = self._authority.issue(tool, arguments, decision.verdict.value, decision.rule)
        return Authorization._create(spec, arguments, decision, call_id, trace_id, origin, intent)

    async def _ask(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        decision: Decision,
        call_id: str,
        trace_id: str,
        origin: str,
        on_ask: AskHook | None,
    ) -> Decision:
        grant = self._grants.find(spec.name, arguments)
        if grant is not None:
            return Decision(
                Verdict.ALLOW,
                "grant:session",
                f"approved earlier for this session ({decision.rule})",
            )
        request = ApprovalRequest(
            spec.name,
            self.redactor.redact_value(arguments),
            spec.consequence.value,
            decision.rule,
            decision.reason,
            origin,
            trace_id,
        )
        self.events.emit(
            "approval_asked", trace_id, call_id=call_id, tool=spec.name, rule=decision.rule
        )
        async with on_ask() if on_ask is not None else contextlib.nullcontext():
            answer: ApprovalAnswer = await self.approver.approve(request)
        self.events.emit(
            "approval_answered",
            trace_id,
            call_id=call_id,
            tool=spec.name,
            choice=answer.choice.value,
            reason=answer.reason,
            pattern=dict(answer.pattern) if answer.pattern else None,
        )
        if answer.choice is Choice.DENY:
            refused = Decision(Verdict.DENY, f"approver:{decision.rule}", answer.reason)
            raise Denied(
                f"{spec.name} was refused by the approver ({answer.reason}); "
                f"it asked because {decision.reason}",
                rule=refused.rule,
            ).with_decision(refused)
        if answer.choice is Choice.SESSION:
            self._grants.add(spec.name, arguments, answer.pattern)
            return Decision(Verdict.ALLOW, "approved:session", answer.reason)
        return Decision(Verdict.ALLOW, "approved:once", answer.reason)

    async def execute(self, auth: Authorization) -> Any:
        """Redeem the intent, run the executor, and redact and cap its result.

        Once ``started`` is recorded, exactly one outcome follows: ``finished``,
        ``failed`` (the error is raised, redacted; an unexpected exception
        becomes :class:`ToolError`) or ``cancelled`` (the cancellation
        propagates).
        """
        spec = auth.spec
        self._authority.redeem(auth.intent, spec.name, auth.arguments)
        call_id, trace_id = auth.call_id, auth.trace_id
        self._open_calls.setdefault(call_id, (trace_id, spec.name))
        # The signed intent goes into the record, so an auditor holding only the session's
        # public key can check that every call that ran was allowed by this kernel's Gate.
        self.events.emit(
            "started",
            trace_id,
            call_id=call_id,
            tool=spec.name,
            intent=auth.intent.to_dict() if auth.intent is not None else None,
        )
        ctx = CallContext._create(self, spec, call_id, trace_id, auth.origin)
        with self._recording_outcome(call_id, trace_id, spec.name):
            try:
                value = await spec.executor(auth.arguments, ctx)
            except RingfenceError:
                raise
            except Exception as exc:  # a tool's own bug or failure becomes a tool_error
                raise ToolError(f"{spec.name} failed: {type(exc).__name__}: {exc}") from exc
            value = self._finish_value(value)
            preview = value if isinstance(value, str) else repr(value)
            # Redact the preview itself before cutting it: repr() of an object the redactor
            # could not walk may still hold a secret, and a cut must not keep a prefix of it.
            redact = None if preview is value else self.redactor.redact  # a str is done
            output = cap_text(preview, EVENT_OUTPUT_BYTES, redact=redact).text
        self._conclude(call_id, trace_id, "finished", tool=spec.name, output=output)
        return value

    # -- outcomes: exactly one per call -----------------------------------------------

    def _recording_outcome(self, call_id: str, trace_id: str, tool: str) -> _RecordingOutcome:
        """Whatever escapes the block ends the call with its one outcome record.

        A RingfenceError is redacted and recorded as ``failed``; any other
        Exception (a bug or failure inside ringfence: an approver, a cap, a
        plan write) becomes a recorded :class:`ToolError`, raised from it; a
        BaseException (cancellation, KeyboardInterrupt) is recorded as
        ``cancelled`` and propagates unchanged. Nesting is safe: the innermost
        block records, outer ones find the call ended.
        """
        return _RecordingOutcome(self, call_id, trace_id, tool)

    def _conclude(self, call_id: str, trace_id: str, kind: str, /, **data: Any) -> None:
        """Record the outcome ``kind`` of ``call_id``, once: later outcomes of it are no-ops."""
        if self._open_calls.pop(call_id, None) is None or self.events.closed:
            return
        self.events.emit(kind, trace_id, call_id=call_id, **data)

    def _fail(self, call_id: str, trace_id: str, tool: str, exc: RingfenceError) -> RingfenceError:
        """Redact ``exc`` (then cut its message), record ``failed`` once, return it."""
        # Redact first, cut after: a secret straddling the cut is already the marker.
        message = escape_surrogates(self.redactor.redact(exc.message))
        if len(message.encode("utf-8")) > ERROR_MESSAGE_BYTES:
            message = cap_text(message, ERROR_MESSAGE_BYTES - _MARKER_ROOM).text
        exc.message = message
        exc.args = (message,)
        exc.details = self.redactor.redact_value(exc.details)
        self._conclude(call_id, trace_id, "failed", tool=tool, error=exc.to_dict())
        return exc

    def _cancel(self, call_id: str, trace_id: str, tool: str, exc: BaseException) -> None:
        """Record ``cancelled`` for a call that ends by cancellation (the caller re-raises)."""
        # Shielded, as trio does its cleanup: the record must not be lost to the same
        # cancellation, and stays right if writing events ever becomes async.
        with trio.CancelScope(shield=True):
            self._conclude(
                call_id,
                trace_id,
                "cancelled",
                tool=tool,
                reason=type(exc).__name__,
            )

    def _finish_value(self, value: Any) -> Any:
        """Redact every string, then cap each one that is over the output cap."""
        value = self.redactor.redact_value(value)
        return self._cap(value)

    def _cap(self, value: Any) -> Any:
        if isinstance(value, str):
            return cap_text(value, self.output_cap_bytes, self.spool_dir).text
        if isinstance(value, dict):
            return {
                escape_surrogates(k) if isinstance(k, str) else k: self._cap(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._cap(v) for v in value]
        return value

    def _placeholder(self, auth: Authorization) -> dict[str, Any]:
        where = f" in {self.plan_path}" if self.plan_path else ""
        return {
            "staged": True,
            "call_id": auth.call_id,
            "tool": auth.spec.name,
            "message": f"dry run: {auth.spec.name} ({auth.spec.consequence.value}) was staged{where}, not run",
        }

    # -- plans ------------------------------------------------------------------------

    async def apply_plan(
        self, plan: Plan, *, rebase_roots: bool = False, allow_looser_posture: bool = False
    ) -> list[Outcome]:
        """Re-enter every staged call into the Gate, in order; stop at the first failure.

        Refused (Denied, nothing runs) when the plan was applied before (the
        message names when and by which session), when it was staged under
        other workspace roots than this kernel's (unless ``rebase_roots``), or
        when this kernel's posture is looser than a call's staging posture
        (unless ``allow_looser_posture``). Each call is marked applied in the
        plan file before it enters the Gate, so it runs at most once.
        """
        first = plan.first_applied()
        problem = None
        if first is not None:
            problem = (
                f"the plan {plan.path} was already applied ({first.describe()}; "
                f"{len(plan.applied)} of {len(plan.calls)} call(s) marked); a plan applies once"
            )
        elif plan.roots != self.roots and not rebase_roots:
            problem = (
                f"the plan was staged under the workspace roots {list(plan.roots)}, this session "
                f"has {list(self.roots)}; pass --rebase-roots (rebase_roots=True) to apply it here"
            )
        elif not allow_looser_posture:
            rank = list(Posture)
            looser = [
                c
                for c in plan.calls
                if rank.index(self.posture) > rank.index(Posture.parse(c.posture))
            ]
            if looser:
                problem = (
                    f"posture {self.posture.value} is looser than the posture "
                    f"{looser[0].posture} {looser[0].tool} was staged under; apply under "
                    f"{looser[0].posture} or stricter, or pass --allow-looser-posture "
                    "(allow_looser_posture=True)"
                )
        self.events.emit(
            "plan_apply",
            self.session_id,
            plan=str(plan.path) if plan.path else None,
            calls=len(plan.calls),
            refused=problem,
            rebase_roots=rebase_roots and plan.roots != self.roots,
            allow_looser_posture=allow_looser_posture,
        )
        if problem is not None:
            raise Denied(f"plan apply refused: {problem}", rule="plan")
        outcomes: list[Outcome] = []
        for staged in plan.calls:
            plan.mark_applied(staged.call_id, self.session_id)
            outcome = await self.invoke(
                staged.tool, staged.arguments, origin="plan", parent_id=staged.call_id
            )
            outcomes.append(outcome)
            if not outcome.ok:
                break
        return outcomes


class _RecordingOutcome:
    """:meth:`Kernel._recording_outcome`'s context manager (a class: it is on every call's path)."""

    __slots__ = ("_call_id", "_kernel", "_tool", "_trace_id")

    def __init__(self, kernel: Kernel, call_id: str, trace_id: str, tool: str) -> None:
        self._kernel, self._call_id, self._trace_id, self._tool = kernel, call_id, trace_id, tool

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            return False
        kernel, call_id, trace_id, tool = self._kernel, self._call_id, self._trace_id, self._tool
        if isinstance(exc, RingfenceError):
            kernel._fail(call_id, trace_id, tool, exc)
        elif isinstance(exc, Exception):
            raise kernel._fail(call_id, trace_id, tool, _unexpected(tool, exc)) from exc
        else:
            kernel._cancel(call_id, trace_id, tool, exc)
        return False  # the exception propagates


def _merge_rules(sources: Mapping[str, Rules]) -> Rules:
    """One Rules from several sources: the union of deny, ask and autonomous patterns and
    of the argument rules (``policy``, in source order); the one allowlist, if any
    (ValueError for a second)."""
    allow: tuple[str, ...] | None = None
    allow_from = None
    for name, rules in sources.items():
        if rules.allow is not None:
            if allow is not None:
                raise ValueError(
                    f"rule source {name!r} brings an allowlist, but {allow_from!r} has one already"
                )
            allow, allow_from = rules.allow, name
    values = list(sources.values())
    if len(values) == 1:
        return values[0]  # as given, whatever else a Rules may carry
    policy = None
    for rules in values:  # argument rules (policy files): every source's, in order
        if rules.policy is not None:
            policy = rules.policy if policy is None else policy + rules.policy
    return Rules(
        deny=tuple(p for r in values for p in r.deny),
        ask=tuple(p for r in values for p in r.ask),
        allow=allow,
        autonomous=tuple(p for r in values for p in r.autonomous),
        policy=policy,
    )


def _unexpected(tool: str, exc: Exception) -> ToolError:
    """An exception no layer translated, as the tool_error the caller gets."""
    error = ToolError(f"{tool} failed inside ringfence: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _refuse_lone_surrogates(value: Any, where: str = "") -> None:
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
            _refuse_lone_surrogates(key, name)
            _refuse_lone_surrogates(item, name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _refuse_lone_surrogates(item, f"{where}[{i}]")
