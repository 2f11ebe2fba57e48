"""The Kernel: registry, Gate and executor for one session.

Every call takes the same road, one method per layer::

    invoke ─► authorize ─┬─ validate arguments (schema)      invalid_arguments
                         ├─ decide (posture, rules, residual) denied
                         ├─ dry run? stage non-read calls      → staged placeholder
                         ├─ ask? session grant or Approver     denied
                         └─ sign an Intent
           ─► execute ───┬─ redeem the Intent (signature, call, expiry, nonce)
                         ├─ run the tool's executor
                         └─ redact, cap, record

and every step is written to the event stream. A direct call, a ``call_tool``
from a script and a call through ``ringfence serve`` all enter at
:meth:`Kernel.invoke`, so they get one decision function.

Every call that was proposed ends in exactly one outcome record: ``finished``,
``failed`` (a refusal, a tool's error, or an unexpected exception inside the
kernel, reported as ``tool_error``), ``staged`` (dry run) or ``cancelled``
(cancellation, KeyboardInterrupt, or the kernel closing while the call was in
flight). Cancellation still propagates after its record is written.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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

__all__ = ["Authorization", "CallContext", "Kernel", "Outcome"]

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


@dataclass(frozen=True)
class CallContext:
    """What an executor learns about the call it is running."""

    kernel: Kernel
    tool: ToolSpec
    call_id: str
    trace_id: str
    origin: str
    posture: Posture

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
        self.kernel.events.emit(
            kind, self.trace_id, call_id=self.call_id, tool=self.tool.name, **data
        )


@final
@dataclass(frozen=True)
class Authorization:
    """The Gate's answer for one call. Only :meth:`Kernel.authorize` makes these."""

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


@dataclass
class Kernel:
    """One governed session: tools, posture, approver, events, dry-run plan.

    Use as ``async with Kernel(...) as kernel:`` so resources that tools
    register (backend sessions, MCP connections) are closed, cancellation or
    not, and the event stream is sealed.
    """

    posture: Posture = Posture.ASK
    approver: Approver = field(default_factory=HeadlessDenyApprover)
    rules: Rules = field(default_factory=Rules)
    events_sink: EventSink | None = None
    dry_run: bool = False
    plan_path: Path | None = None
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    spool_dir: Path | None = None
    intent_ttl_seconds: float = 30.0
    secrets: Iterable[str] = ()
    secret_names: Iterable[str] = ()  # extra credential-name globs (ringfence.runtime._redact)

    def __post_init__(self) -> None:
        self.posture = Posture.parse(self.posture)
        self.registry = Registry()
        self.redactor = Redactor(self.secrets, names=self.secret_names)
        self.grants = SessionGrants()
        self.session_id = new_id()
        self._authority = IntentAuthority(self.intent_ttl_seconds)
        self.events = EventLog(self.events_sink or MemorySink(), self.redactor)
        self.plan = Plan(self.plan_path)
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
        if self.spool_dir is None:
            self.spool_dir = ringfence_home() / "spool" / self.session_id
        self.events.emit(
            "session_started",
            self.session_id,
            public_key=self._authority.public_key_pem(),
            posture=self.posture.value,
            dry_run=self.dry_run,
        )

    # -- registry and session state -------------------------------------------------

    def register(self, spec: ToolSpec) -> None:
        self.registry.add(spec)

    def tools(self) -> list[ToolSpec]:
        return list(self.registry)

    def set_posture(self, posture: Posture | str) -> None:
        """Change the session's posture; applies to the next call."""
        new = Posture.parse(posture)
        self.events.emit("posture_changed", self.session_id, old=self.posture.value, new=new.value)
        self.posture = new

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
        call_id = new_id()
        trace_id = trace_id or call_id
        # Copy a mapping so the caller cannot change it after the Gate looked; anything
        # else goes to validation as is and is refused there.
        args: Any = dict(arguments) if isinstance(arguments, Mapping) else arguments
        if arguments is None:
            args = {}
        self.redactor.register_named_values(args)
        if tool in self.registry:  # secrets not keyed by name (a script's literals), too
            spec = self.registry.get(tool)
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
                auth = await self.authorize(
                    tool, args, call_id=call_id, trace_id=trace_id, origin=origin, on_ask=on_ask
                )
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
    ) -> Authorization:
        spec = self.registry.get(tool)
        _refuse_lone_surrogates(arguments)
        spec.validate(arguments)
        decision = decide(spec, self.posture, self.rules, arguments)
        self.events.emit("decided", trace_id, call_id=call_id, tool=tool, **decision.to_dict())
        if decision.verdict is Verdict.DENY:
            raise Denied(
                f"{tool} was refused: {decision.reason}", rule=decision.rule
            ).with_decision(decision)
        if self.dry_run and spec.consequence is not Consequence.READ and not spec.composes_dry_run:
            staged = StagedCall(
                call_id, trace_id, tool, arguments, spec.consequence.value, origin, time.time()
            )
            self.plan.stage(staged)
            self._conclude(call_id, trace_id, "staged", tool=tool, arguments=arguments)
            return Authorization(spec, arguments, decision, call_id, trace_id, origin, staged=True)
        if decision.verdict is Verdict.ASK:
            decision = await self._ask(spec, arguments, decision, call_id, trace_id, origin, on_ask)
        intent = self._authority.issue(tool, arguments, decision.verdict.value, decision.rule)
        return Authorization(spec, arguments, decision, call_id, trace_id, origin, intent)

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
        grant = self.grants.find(spec.name, arguments)
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
            self.grants.add(spec.name, arguments, answer.pattern)
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
        ctx = CallContext(self, spec, call_id, trace_id, auth.origin, self.posture)
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

    @contextlib.contextmanager
    def _recording_outcome(self, call_id: str, trace_id: str, tool: str) -> Iterator[None]:
        """Whatever escapes the block ends the call with its one outcome record.

        A RingfenceError is redacted and recorded as ``failed``; any other
        Exception (a bug or failure inside ringfence: an approver, a cap, a
        plan write) becomes a recorded :class:`ToolError`, raised from it; a
        BaseException (cancellation, KeyboardInterrupt) is recorded as
        ``cancelled`` and propagates unchanged. Nesting is safe: the innermost
        block records, outer ones find the call ended.
        """
        try:
            yield
        except RingfenceError as exc:
            self._fail(call_id, trace_id, tool, exc)
            raise
        except Exception as exc:
            raise self._fail(call_id, trace_id, tool, _unexpected(tool, exc)) from exc
        except BaseException as exc:
            self._cancel(call_id, trace_id, tool, exc)
            raise

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

    async def apply_plan(self, plan: Plan) -> list[Outcome]:
        """Re-enter every staged call into the Gate, in order; stop at the first failure."""
        outcomes: list[Outcome] = []
        for staged in plan.calls:
            outcome = await self.invoke(
                staged.tool, staged.arguments, origin="plan", parent_id=staged.call_id
            )
            outcomes.append(outcome)
            if not outcome.ok:
                break
        return outcomes


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
