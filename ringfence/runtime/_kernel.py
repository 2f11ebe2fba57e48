"""The Kernel: registry, Gate and executor for one session.

(Over 500 lines on purpose: one class, a session's state and the road every call
takes; its steps are in ``_calls``, ``_gate``, ``_outcomes`` and ``_planapply``.)

Every call takes the same road, one method per layer::

    invoke ─► authorize ─┬─ validate arguments (schema)      invalid_arguments
                         ├─ decide (posture, rules, residual) denied
                         ├─ dry run? stage non-read calls      → staged placeholder
                         ├─ ask? session grant or Approver     denied
                         └─ mint an Intent (HMAC tag, to redeem; the session key
                            signs the event chain's checkpoints, for audit)
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
by the Gate's authorize step.

Every call that was proposed ends in exactly one outcome record: ``finished``,
``failed`` (a refusal, a tool's error, or an unexpected exception inside the
kernel, reported as ``tool_error``), ``staged`` (dry run) or ``cancelled``
(cancellation, KeyboardInterrupt, or the kernel closing while the call was in
flight). Cancellation still propagates after its record is written.

This module holds the Kernel (the session: what decides, the registry, the
lifecycle, and the road of :meth:`Kernel.invoke`). The call's values are in
``_calls``, the Gate's authorize step in ``_gate``, outcome records and the
copies errors are made safe in ``_outcomes``, plan apply in ``_planapply``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import trio

from . import _gate, _hooks
from ._approval import Approver, HeadlessDenyApprover, SessionGrants
from ._calls import AskHook, Authorization, CallContext, NoPublicConstructor, Outcome, new_id
from ._canonical import MAX_NESTING, unrecordable
from ._errors import InvalidArguments, NotFound, RingfenceError, ToolError
from ._events import (
    CHECKPOINT_RECORDS,
    CHECKPOINT_SECONDS,
    EventLog,
    EventSink,
    MemorySink,
)
from ._files import ringfence_home
from ._hooks import Hook
from ._intents import IntentAuthority
from ._outcomes import RecordingOutcome
from ._output import DEFAULT_SPOOL_QUOTA, cap_text, escape_surrogates, set_spool_quota
from ._plan import Plan
from ._planapply import apply_plan
from ._providers import ProviderTools, ToolFormat, answer_tool_call, tool_definitions
from ._redact import Redactor
from ._skills import Skill
from ._tools import Registry, ToolSpec
from .policy._decide import Decision, Posture, Rules
from .policy._rules import Effect

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


# Whose calls run in this context (a kernel and the caller it was told, see Kernel.as_caller).
_CALLER: contextvars.ContextVar[tuple[Any, str] | None] = contextvars.ContextVar(
    "ringfence_caller", default=None
)
# How many callers' session grants one kernel keeps (least recently used go first).
MAX_CALLERS = 1024
# The tools the calls running in this context may reach (a kernel and the names it was
# told, see Kernel.offering): a script started by a client that was offered some tools
# calls only those, never the kernel's other registered tools.
_OFFERED: contextvars.ContextVar[tuple[Any, frozenset[str]] | None] = contextvars.ContextVar(
    "ringfence_offered", default=None
)


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

    ``checkpoint_records`` / ``checkpoint_seconds``: how often the session key
    signs the event chain's head (see ``_events``); the defaults bound an open
    log's unauthenticated tail to 256 records or about half a second.
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
        checkpoint_records: int = CHECKPOINT_RECORDS,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
        spool_quota_bytes: int = DEFAULT_SPOOL_QUOTA,
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
        # A host's callers (ringfence serve's MCP sessions) -> their session grants; see as_caller.
        self._caller_grants: OrderedDict[str, SessionGrants] = OrderedDict()
        self.session_id = new_id()
        self._authority = IntentAuthority(intent_ttl_seconds)
        self.events = EventLog(
            events_sink or MemorySink(),
            self.redactor,
            signer=self._authority.sign_bytes,
            checkpoint_records=checkpoint_records,
            checkpoint_seconds=checkpoint_seconds,
        )
        self.plan = Plan(plan_path)
        self._exit = contextlib.AsyncExitStack()
        # Contexts entered with the kernel (nurseries, connections): exited in __aexit__,
        # in the entering task and unshielded, so their cancel scopes nest properly.
        self._entered: contextlib.AsyncExitStack | None = None
        self._startups: list[Callable[[Kernel], Awaitable[None]]] = []
        # Per-session state that client packages attach (e.g. extensions["mcp"]).
        self.extensions: dict[str, Any] = {}
        # Hooks (see _hooks): an operator's checks that can only tighten; skills for hosts.
        self._hooks: list[_hooks._Registered] = []
        self._session_hooks_ran = False
        self._skills: dict[str, Skill] = {}
        # Calls proposed and not yet ended: call_id -> (trace_id, tool). _conclude removes.
        self._open_calls: dict[str, tuple[str, str]] = {}
        self._closed = False
        # The idle-tail checkpoint tasks' scopes (one per `async with`), cancelled at close.
        self._tickers: list[trio.CancelScope] = []
        if spool_dir is None:
            spool_dir = ringfence_home() / "spool" / self.session_id
        self.spool_dir: Path = spool_dir
        # What the spool files of this session hold together (each one is capped, but a
        # script's calls multiply them): past it a cut text is not spooled, its marker says so.
        set_spool_quota(spool_dir, spool_quota_bytes)
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

    @contextlib.contextmanager
    def as_caller(self, caller: str) -> Iterator[None]:
        """The calls made inside (and in every task they start) are ``caller``'s.

        For a host that serves several clients from one kernel (``ringfence serve``
        over Streamable HTTP names each MCP session): a "for this session" approval
        one of ``caller``'s calls receives covers only ``caller``'s later calls, never
        another caller's; calls made outside any caller share the kernel's own grants.
        At most :data:`MAX_CALLERS` callers' grants are kept; the least recently used
        go first (their calls are then asked again).
        """
        token = _CALLER.set((self, caller))
        try:
            yield
        finally:
            _CALLER.reset(token)

    @contextlib.contextmanager
    def offering(self, names: Iterable[str]) -> Iterator[None]:
        """The calls made inside (and in every task they start) may reach only ``names``.

        For a host that offers a client some of the kernel's tools (``ringfence serve
        --expose native``, a model given a subset): a tool that runs other tools
        (``run_tool_script``) must not reach the ones the client was not given. A call
        of any other registered tool made inside is ``not_found``, recorded and never
        run; a tool's own nested call (``CallContext.invoke`` with its default origin,
        ``nested``) is the tool's choice and is not limited. Nested offerings only
        narrow (the names of both).
        """
        chosen = frozenset(names)
        current = self.offered_tools()
        if current is not None:
            chosen &= current
        token = _OFFERED.set((self, chosen))
        try:
            yield
        finally:
            _OFFERED.reset(token)

    def offered_tools(self) -> frozenset[str] | None:
        """The tool names the calls running now may reach, or None: every registered tool
        (see :meth:`offering`)."""
        current = _OFFERED.get()
        if current is None or current[0] is not self:
            return None
        return current[1]

    def forget_caller(self, caller: str) -> None:
        """Drop ``caller``'s session grants (its session ended): a later caller that happens
        to carry the same name starts with none."""
        self._caller_grants.pop(caller, None)

    def _session_grants(self) -> SessionGrants:
        """The session grants of the caller of the call running now (see :meth:`as_caller`)."""
        current = _CALLER.get()
        if current is None or current[0] is not self:
            return self._grants
        caller = current[1]
        grants = self._caller_grants.get(caller)
        if grants is None:
            grants = self._caller_grants[caller] = SessionGrants()
            while len(self._caller_grants) > MAX_CALLERS:
                self._caller_grants.popitem(last=False)
        else:
            self._caller_grants.move_to_end(caller)
        return grants

    # -- hooks and skills ---------------------------------------------------------------

    def add_hook(self, hook: Hook) -> None:
        """Register ``hook`` (recorded as ``hook_added``); it runs from the next call on.

        A hook only ever tightens what the Gate decides (see ``runtime._hooks``).
        Raises InvalidArguments for a second hook of the same name.
        """
        _hooks.register(self, hook)

    def hooks(self) -> list[Hook]:
        """The registered hooks, in the order they run."""
        return [entry.hook for entry in self._hooks]

    async def check_hooks(
        self, spec: ToolSpec, arguments: Mapping[str, Any], decision: Decision
    ) -> Decision:
        """``decision`` after the pre_call hooks that see this call, as the Gate combines them.

        For ``policy explain``: the hooks run (and are recorded) as for a call
        proposed now, and nothing else happens.
        """
        call_id = new_id()
        return await _hooks.pre_call(
            self, spec, arguments, decision, call_id=call_id, trace_id=call_id, origin="explain"
        )

    def add_skill(self, skill: Skill) -> None:
        """Offer ``skill`` to the session's host (``skills()``); recorded as ``skill_added``."""
        if skill.name in self._skills:
            raise ValueError(f"a skill named {skill.name!r} is offered already")
        self._skills[skill.name] = skill
        self.events.emit("skill_added", self.session_id, **skill.to_dict(instructions=False))

    def skills(self) -> list[Skill]:
        """The skills offered to this session's host: name, description, instructions, files."""
        return list(self._skills.values())

    # -- registry and session state -------------------------------------------------

    def register(self, spec: ToolSpec) -> None:
        self.registry.add(spec)

    def tools(self) -> list[ToolSpec]:
        return list(self.registry)

    def tool_definitions(
        self,
        format: ToolFormat | str,
        *,
        names: Iterable[str] | None = None,
        strict: bool = False,
    ) -> ProviderTools:
        """The tools (all, or those ``names`` lists) in the shape a model API takes.

        ``format``: ``openai-responses``, ``openai-chat``, ``anthropic``, ``gemini``,
        ``bedrock`` (the Converse API) or ``mcp``.
        Names are made provider-safe and map back one-to-one; ``strict`` asks for
        OpenAI Structured Outputs where a schema allows it (see ``_providers``).
        Hand the result to :meth:`answer_tool_call` with the model's calls.
        Raises InvalidArguments for an unknown format, NotFound for an unknown name.
        """
        specs = (
            self.tools() if names is None else [self.registry.get(n) for n in dict.fromkeys(names)]
        )
        return tool_definitions(specs, format, strict=strict)

    async def answer_tool_call(
        self, call: Any, *, tools: ProviderTools | None = None, origin: str | None = None
    ) -> dict[str, Any]:
        """Run a model's tool call through the Gate; return the provider's result block.

        ``call``: an OpenAI Responses ``function_call`` item, a Chat Completions tool
        call, an Anthropic ``tool_use`` block, a Gemini ``functionCall`` (or its ``Part``),
        a Bedrock ``toolUse`` (or its content block) or MCP ``tools/call`` params (a mapping
        or the SDK's model). The answer is a ``function_call_output`` item, a ``tool``
        message, a ``tool_result`` block (``is_error``), a ``Part`` holding a
        ``functionResponse``, a content block holding a ``toolResult`` (``status``) or a
        ``CallToolResult``:
        a refusal or a failure is an error result for the model, not an exception.
        ``tools``: the definitions the model was given (their names map back; a name
        they do not hold is answered ``not_found``). Raises InvalidArguments only
        when ``call`` is no tool call at all.
        """
        return await answer_tool_call(self, call, tools, origin)

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
            # Signs a tail of records left unsigned (a session idle after a call), so a
            # crash loses authentication for at most about two checkpoint periods. A system
            # task, not a nursery: errors in the block must leave it unwrapped.
            if not self._closed:
                ticker = trio.CancelScope()
                self._tickers.append(ticker)
                trio.lowlevel.spawn_system_task(
                    self._checkpoint_idle_tail,
                    ticker,
                    name=f"ringfence checkpoints {self.session_id}",
                )
            for startup in self._startups:
                await startup(self)
            self._session_hooks_ran = True
            await _hooks.session_point(self, "session_start")
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _checkpoint_idle_tail(self, ticker: trio.CancelScope) -> None:
        """Checkpoint records left unsigned for a period; ends when the kernel closes.

        Never raises (a system task's error would end the whole trio run): a
        checkpoint that cannot be written is retried at the next flush point,
        on a call's path, where the error surfaces.
        """
        period = self.events.checkpoint_seconds
        with ticker:
            while not self._closed:
                await trio.sleep(period)
                since = self.events.unsigned_since
                if since is None or time.monotonic() - since < period or self.events.closed:
                    continue
                try:
                    self.events.checkpoint()
                except Exception:
                    return

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
        for ticker in self._tickers:
            ticker.cancel()
        try:
            if self._session_hooks_ran:  # shielded, each bounded by its timeout
                await _hooks.session_point(self, "session_end")
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
        *,
        before_execute: Callable[[Authorization], None] | None = None,
    ) -> Outcome:
        """The road of :meth:`invoke`; ``before_execute(auth)`` runs once the Gate allowed
        the call and before it runs (``plan apply`` marks the call applied there); what it
        raises ends the call unrun, recorded like any failure."""
        outcome = await self._invoke_once(
            tool,
            request_spec,
            arguments,
            origin,
            trace_id,
            parent_id,
            on_ask,
            before_execute=before_execute,
        )
        if self._hooks:  # post_call hooks see the outcome as recorded; they change nothing
            await _hooks.post_call(self, outcome, arguments)
        return outcome

    async def _invoke_once(
        self,
        tool: str,
        request_spec: ToolSpec | None,
        arguments: Mapping[str, Any] | None,
        origin: str,
        trace_id: str | None,
        parent_id: str | None,
        on_ask: AskHook | None,
        *,
        before_execute: Callable[[Authorization], None] | None = None,
    ) -> Outcome:
        call_id = new_id()
        trace_id = trace_id or call_id
        # Copy a mapping so the caller cannot change it after the Gate looked; anything
        # else goes to validation as is and is refused there.
        args: Any = dict(arguments) if isinstance(arguments, Mapping) else arguments
        if arguments is None:
            args = {}
        spec = request_spec or self.registry.find(tool)
        args, refusal = _recordable(args, spec)
        offered = self.offered_tools()
        if (
            refusal is None
            and request_spec is None
            and offered is not None
            and tool not in offered
            and origin != "nested"
        ):
            # Not offered to whoever made this call (or the script it started): as if it
            # were not registered. Recorded, never run. A tool's own nested call
            # (CallContext.invoke's default origin: a dry run's run_shell staging its
            # apply_changes) is the tool's choice, not the caller's, and is not limited.
            refusal, spec = (
                NotFound(f"no tool named {tool!r} is offered to this caller", field="tool"),
                None,
            )
        if refusal is None:
            self.redactor.register_named_values(args)
            if spec is not None:  # secrets not keyed by name (a script's literals), too
                literals = spec.literal_secrets(args, self.redactor.is_secret_key)
                self.redactor.register_literals(literals)
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
                if refusal is not None:
                    raise refusal
                auth = await _gate.authorize(
                    self, tool, args, call_id, trace_id, origin, on_ask, spec
                )
                decision = auth.decision
                if before_execute is not None:
                    before_execute(auth)
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
            return await _gate.authorize(
                self, tool, arguments, call_id, trace_id or call_id, origin, on_ask
            )
        call_id = new_id()
        trace_id = trace_id or call_id
        recorded, refusal = _recordable(arguments, self.registry.find(tool))
        if refusal is None:
            self.redactor.register_named_values(arguments)
        self.events.emit(
            "proposed", trace_id, call_id=call_id, tool=tool, arguments=recorded, origin=origin
        )
        self._open_calls[call_id] = (trace_id, tool)
        with self._recording_outcome(call_id, trace_id, tool):
            if refusal is not None:
                raise refusal
            return await _gate.authorize(self, tool, arguments, call_id, trace_id, origin, on_ask)

    # -- a path argument judged as the file it resolves to (CallContext.confirm_path) ------

    def _path_rules_for(self, spec: ToolSpec, argument: str) -> bool:
        return _gate.path_rules_for(self, spec, argument)

    async def _confirm_resolved_path(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        decision: Decision | None,
        argument: str,
        resolved: str,
        call_id: str,
        trace_id: str,
        origin: str,
    ) -> bool:
        return await _gate.confirm_resolved_path(
            self, spec, arguments, decision, argument, resolved, call_id, trace_id, origin
        )

    def _check_resolved_path(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        decision: Decision | None,
        argument: str,
        resolved: str,
    ) -> None:
        """Raise ``denied`` when the resolved file meets a deny rule, or an ask rule (nobody
        can be asked at the place a file is opened: fail closed)."""
        found = _gate.judge_resolved_path(self, spec, arguments, decision, argument, resolved)
        if found is None:
            return
        why = ""
        if found.verdict is not Effect.DENY:
            why = (
                "; it asks first, and the file changed after it was judged (name the file "
                "itself to be asked)"
            )
        raise _gate.resolved_refusal(
            spec.name, argument, arguments.get(argument), resolved, found, why
        )

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
        # The intent's description goes into the record: the verifier matches it against the
        # call's allowed decision, and the chain's signed checkpoints make both authentic.
        self.events.emit(
            "started",
            trace_id,
            call_id=call_id,
            tool=spec.name,
            intent=auth.intent.describe() if auth.intent is not None else None,
        )
        ctx = CallContext._create(
            self, spec, call_id, trace_id, auth.origin, auth.arguments, auth.decision
        )
        with self._recording_outcome(call_id, trace_id, spec.name):
            try:
                value = await spec.executor(auth.arguments, ctx)
            except RingfenceError:
                raise
            except Exception as exc:  # a tool's own bug or failure becomes a tool_error
                raise ToolError(f"{spec.name} failed: {type(exc).__name__}: {exc}") from exc
            value = self._finish_value(value)
            if isinstance(value, str) and value.isascii() and len(value) <= EVENT_OUTPUT_BYTES:
                output = value  # redacted and capped already, and short: the preview as is
            else:
                preview = value if isinstance(value, str) else repr(value)
                # Redact the preview itself before cutting it: repr() of an object the redactor
                # could not walk may still hold a secret, and a cut must not keep a prefix of it.
                redact = None if preview is value else self.redactor.redact  # a str is done
                output = cap_text(preview, EVENT_OUTPUT_BYTES, redact=redact).text
        self._conclude(call_id, trace_id, "finished", tool=spec.name, output=output)
        return value

    # -- outcomes: exactly one per call -----------------------------------------------

    def _recording_outcome(self, call_id: str, trace_id: str, tool: str) -> RecordingOutcome:
        """Whatever escapes the block ends the call with its one outcome record.

        A RingfenceError is redacted and recorded as ``failed``; any other
        Exception (a bug or failure inside ringfence: an approver, a cap, a
        plan write) becomes a recorded :class:`ToolError`, raised from it; a
        BaseException (cancellation, KeyboardInterrupt) is recorded as
        ``cancelled`` and propagates unchanged. Nesting is safe: the innermost
        block records, outer ones find the call ended.
        """
        return RecordingOutcome(self, call_id, trace_id, tool)

    def _conclude(self, call_id: str, trace_id: str, kind: str, /, **data: Any) -> None:
        """Record the outcome ``kind`` of ``call_id``, once: later outcomes of it are no-ops."""
        if self._open_calls.pop(call_id, None) is None or self.events.closed:
            return
        self.events.emit(kind, trace_id, call_id=call_id, **data)

    def _finish_value(self, value: Any) -> Any:
        """Redact every string, then cap each one that is over the output cap."""
        value = self.redactor.redact_value(value)
        return self._cap(value)

    def _cap(self, value: Any) -> Any:
        if isinstance(value, str):
            if value.isascii() and len(value) <= self.output_cap_bytes:
                return value  # fits, and ASCII holds no lone surrogate: as cap_text would
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

        Refused (Denied, nothing runs) when the plan was applied before, staged
        under other workspace roots (unless ``rebase_roots``) or under a stricter
        posture than this kernel's (unless ``allow_looser_posture``); see
        :func:`._planapply.apply_plan`. Each call runs at most once.
        """
        return await apply_plan(
            self, plan, rebase_roots=rebase_roots, allow_looser_posture=allow_looser_posture
        )


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


def _recordable(arguments: Any, spec: ToolSpec | None) -> tuple[Any, InvalidArguments | None]:
    """The arguments as the ``proposed`` record holds them, and the refusal of arguments
    JSON cannot hold (recorded as the reason instead): nested past :data:`MAX_NESTING`,
    refused before anything walks them recursively (redaction, the records, validation),
    which would raise RecursionError; more than :data:`MAX_ARGUMENTS` of them; or a NaN or
    infinite number, which passes every schema bound (comparisons with NaN are false) and
    which the record would show as null; or a top-level string longer than the tool's schema allows (:func:`_overlong`)."""
    problem = (
        _too_many(arguments) or unrecordable(arguments, MAX_NESTING) or _overlong(arguments, spec)
    )
    if problem is None:
        return arguments, None
    field, message = problem
    refusal = InvalidArguments(message, field=field)
    return f"<not recorded: {refusal.message}>", refusal


# The most top-level arguments a call may have. Every approver draws each one for the person
# (the terminal, the review page, an MCP client's elicitation), decisive ones first, so the
# drawing reads each name: an MCP server's tool whose schema allows any property, called
# with a million made-up arguments (an 18 MB message, under the 32 MiB a client may send),
# held the session's Gate for 34 s to draw a 13 MB question nobody could read.
MAX_ARGUMENTS = 1024


def _too_many(arguments: Any) -> tuple[str, str] | None:
    """(field, message) for a call of more than :data:`MAX_ARGUMENTS` arguments, or None:
    refused before anything walks them (redaction, the records, the approval prompt)."""
    if isinstance(arguments, Mapping) and len(arguments) > MAX_ARGUMENTS:
        return "arguments", (
            f"the call has {len(arguments):,} arguments; a call takes at most "
            f"{MAX_ARGUMENTS:,} (each is shown to the person who approves it)"
        )
    return None


def _overlong(arguments: Any, spec: ToolSpec | None) -> tuple[str, str] | None:
    """(field, message) for a top-level string argument longer than its schema's
    ``maxLength``, or None.

    Checked before anything reads the value whole: a tool's credential scan (a
    script's source is parsed on this host), redaction and the ``proposed``
    record. A 15 MB script, refused only by the bridge's frame limit after
    all of them, was recorded whole and held this process for minutes at 8 GB.
    """
    if spec is None or not isinstance(arguments, Mapping):
        return None
    properties = spec.input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    for name, value in arguments.items():
        prop = properties.get(name) if isinstance(name, str) else None
        limit = prop.get("maxLength") if isinstance(prop, Mapping) else None
        if isinstance(value, str) and type(limit) is int and len(value) > limit:
            return name, (
                f"{name} is {len(value):,} characters; {spec.name} takes at most "
                f"{limit:,} (its schema's maxLength)"
            )
    return None
