"""The host's side of one run's session, once the runner is admitted: every call gated.

Every ``call`` becomes ``kernel.invoke(name, args, origin="script",
trace_id=<the script's trace>, parent_id=<the run_tool_script call>,
on_ask=<pauses the run's deadline>)``: the same Gate as a direct call.

Every ``call`` counts against the run's budget (``ScriptConfig.max_calls``,
default 10,000): the calls past it are refused (``denied``) without running,
and without growing the result or the event stream. ``run_tool_script``
itself is refused: scripts do not nest.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from ..runtime import CallContext, Denied, Kernel, Unavailable
from . import _wire
from ._channel import Admission
from ._config import ScriptConfig

__all__ = ["NOT_FROM_SCRIPTS", "Emit", "ScriptSession"]

# Tool names a script may not call (nesting would let a script multiply processes).
NOT_FROM_SCRIPTS = frozenset({"run_tool_script"})

Emit = Callable[..., None]


class ScriptSession:
    """The host's side of one run's session: the Gate behind every ``call_tool``.

    :attr:`admission` admits the runner's connection; :meth:`serve` then
    reads the sandbox report, sends the script and answers each call
    through ``kernel.invoke`` (the same Gate as a direct call), within the
    run's call budget, until ``done``. :meth:`paused` stops the run's
    deadline (:attr:`scope`) while a person is asked about a call.
    """

    def __init__(
        self,
        kernel: Kernel | CallContext,
        config: ScriptConfig,
        emit: Emit,
        trace_id: str,
        parent_id: str | None,
        expected_peer_pid: Callable[[], int | None],
        expected_peer_uids: frozenset[int] | None = None,
    ) -> None:
        self.kernel = kernel
        self.config = config
        self.emit = emit
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.admission = Admission(
            emit,
            handshake_seconds=config.handshake_seconds,
            max_frame=config.max_frame,
            expected_peer_pid=expected_peer_pid,
            expected_peer_uids=expected_peer_uids,
        )
        self.calls: list[dict[str, Any]] = []
        self.call_count = 0  # every call message, refused ones included
        self.over_budget = 0
        self.scope: trio.CancelScope | None = None
        self.paused_seconds = 0.0
        self.sandbox_report: dict[str, Any] | None = None

    # on_ask: the run's deadline stops while a person is being asked.
    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        scope = self.scope
        if scope is None or math.isinf(scope.deadline):
            yield
            return
        remaining = scope.deadline - trio.current_time()
        started = trio.current_time()
        scope.deadline = math.inf
        try:
            yield
        finally:
            scope.deadline = trio.current_time() + remaining
            self.paused_seconds += trio.current_time() - started

    async def serve(self, script: str) -> dict[str, Any]:
        """Run the session over the authenticated connection; return the ``done`` message."""
        await self.admission.authenticated.wait()
        conn = self.admission.channel
        assert conn is not None
        first = await conn.recv()
        if first.get("type") == "sandbox_failed":
            layer = str(first.get("layer"))
            raise Unavailable(
                f"the script sandbox layer {layer!r} cannot be applied here: {first.get('reason')}. "
                "Fix the machine, or let the operator choose a weaker sandbox level "
                "(best-effort or none), which is recorded in the event stream",
                field="sandbox",
                layer=layer,
            )
        report = conn.codec.expect(first, "sandboxed").get("report") or {}
        self.sandbox_report = report
        self.emit(
            "script_sandbox",
            level=report.get("level"),
            applied=report.get("applied"),
            missing=report.get("missing"),
            weakened=bool(report.get("missing")) or self.config.mode != "restricted",
            mode=self.config.mode,
        )
        await conn.send({"type": "script", "source": script, "mode": self.config.mode})
        while True:
            message = await conn.recv()
            kind = message.get("type")
            if kind == "done":
                await conn.send({"type": "bye"})
                return message
            if kind != "call":
                raise _wire.ProtocolError(
                    "unexpected", f"unexpected {kind!r} message from the runner"
                )
            reply = await self.call(message)
            try:
                await conn.send(reply)
            except (_wire.ProtocolError, TypeError, ValueError, RecursionError) as exc:
                if isinstance(exc, _wire.ProtocolError) and exc.reason != "oversized":
                    raise
                why = exc.message if isinstance(exc, _wire.ProtocolError) else f"not JSON: {exc}"
                error = {
                    "code": "tool_error",
                    "message": f"the result cannot cross the bridge: {why}",
                }
                await conn.send({**reply, "ok": False, "value": None, "error": error})

    def budget_refusal(self, call_no: Any, tool: Any) -> dict[str, Any] | None:
        """The reply for a call past the run's budget, or None while it lasts.

        Past the budget nothing is recorded per call (one event, a count in
        ``script_finished``), so a script looping on refused calls grows neither
        the result nor the event stream.
        """
        self.call_count += 1
        budget = self.config.max_calls
        if self.call_count <= budget:
            return None
        self.over_budget += 1
        if self.over_budget == 1:
            self.emit("script_call_budget", max_calls=budget, called=str(tool)[:200])
        refusal = Denied(
            f"call_tool refused: the script has used its budget of {budget} calls "
            f"(max_calls={budget}); no further call runs in this run",
            field="max_calls",
        )
        error = {"code": refusal.code, "message": refusal.message}
        return {"type": "reply", "id": call_no, "ok": False, "error": error, "decision": None}

    async def call(self, message: dict[str, Any]) -> dict[str, Any]:
        call_no = message.get("id")
        tool = message.get("tool")
        arguments = message.get("arguments")
        over = self.budget_refusal(call_no, tool)
        if over is not None:
            return over
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            error = {
                "code": "invalid_arguments",
                "message": "a call needs a tool name and keyword arguments",
            }
            return {"type": "reply", "id": call_no, "ok": False, "error": error, "decision": None}
        if tool in NOT_FROM_SCRIPTS:
            refusal = Denied(
                f"{tool} cannot be called from inside a script: scripts do not nest "
                "(a nested run would multiply processes and escape the call budget)",
                field="tool",
            )
            error = {"code": refusal.code, "message": refusal.message}
            self.calls.append(
                {
                    "tool": tool,
                    "call_id": None,
                    "decision": None,
                    "ok": False,
                    "error": refusal.code,
                }
            )
            # `called`, not `tool`: the emitter may be CallContext.emit, which sets `tool` itself.
            self.emit("bridge_refused_call", called=tool, detail=refusal.message)
            return {"type": "reply", "id": call_no, "ok": False, "error": error, "decision": None}
        outcome = await self.kernel.invoke(
            tool,
            arguments,
            origin="script",
            trace_id=self.trace_id,
            parent_id=self.parent_id,
            on_ask=self.paused,
        )
        decision = outcome.decision.to_dict() if outcome.decision is not None else None
        record: dict[str, Any] = {
            "tool": tool,
            "call_id": outcome.call_id,
            "decision": decision,
            "staged": outcome.staged,
            "ok": outcome.ok,
        }
        reply: dict[str, Any] = {"type": "reply", "id": call_no, "decision": decision}
        if outcome.error is not None:
            record["error"] = outcome.error.code
            reply.update(
                ok=False, error={"code": outcome.error.code, "message": outcome.error.message}
            )
        else:
            reply.update(ok=True, value=outcome.value, staged=outcome.staged)
        self.calls.append(record)
        return reply
