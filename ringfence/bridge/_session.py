"""The host's side of one run's session, once the runner is admitted: every call gated.

Every call becomes ``kernel.invoke(name, args, origin="script",
trace_id=<the script's trace>, parent_id=<the run_tool_script call>,
on_ask=<pauses the run's deadline>)``: the same Gate as a direct call.
A ``call`` message is one call; a ``calls`` message (``parallel`` in the
script) is many, run concurrently, at most ``ScriptConfig.max_parallel`` at
a time, each through the Gate on its own, and answered together
(``replies``). Among a batch's calls, a person is asked in the batch's order,
one question at a time (:class:`AskTurns`).

Every call counts against the run's budget (``ScriptConfig.max_calls``,
default 10,000): the calls past it are refused (``denied``) without running,
and without growing the result or the event stream. So does every byte of
the call messages (``max_call_bytes``, default 64 MiB): a message past it is
refused whole, unrecorded, since each call is recorded with its arguments. ``run_tool_script``
itself is refused: scripts do not nest.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import trio

from ..runtime._calls import CallContext
from ..runtime._errors import Denied, Unavailable
from ..runtime._kernel import Kernel
from . import _wire
from ._channel import Admission
from ._config import ScriptConfig

__all__ = ["NOT_FROM_SCRIPTS", "AskTurns", "Emit", "ScriptSession"]

# Tool names a script may not call (nesting would let a script multiply processes).
NOT_FROM_SCRIPTS = frozenset({"run_tool_script"})

Emit = Callable[..., None]
Reply = dict[str, Any]
Record = dict[str, Any]


class AskTurns:
    """A batch's questions to a person, one at a time and in the batch's order.

    Call ``i`` may ask once every call before it has passed its own chance
    to ask (asked and been answered, or ended): :meth:`turn` waits for that,
    :meth:`passed` marks it. Calls that need no person are never held up.
    """

    def __init__(self, n: int) -> None:
        self._passed = [False] * n
        self._low = 0  # every call below this index has passed
        self._waiting: dict[int, trio.Event] = {}  # only calls that ask wait for their turn

    async def turn(self, i: int) -> None:
        if self._low >= i:
            return
        event = self._waiting.setdefault(i, trio.Event())
        await event.wait()

    def passed(self, i: int) -> None:
        if self._passed[i]:
            return
        self._passed[i] = True
        while self._low < len(self._passed) and self._passed[self._low]:
            self._low += 1
            event = self._waiting.pop(self._low, None)
            if event is not None:
                event.set()


class ScriptSession:
    """The host's side of one run's session: the Gate behind every call.

    :attr:`admission` admits the runner's connection; :meth:`serve` then
    reads the sandbox report, sends the script (and the tool manifest its
    ``tools`` namespace is built from) and answers each ``call`` and each
    ``calls`` batch through ``kernel.invoke`` (the same Gate as a direct
    call), within the run's call budget, until ``done``. :meth:`paused`
    stops the run's deadline (:attr:`scope`) while a person is asked.
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
        manifest: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.kernel = kernel
        self.config = config
        self.emit = emit
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.manifest = manifest
        self.admission = Admission(
            emit,
            handshake_seconds=config.handshake_seconds,
            max_frame=config.max_frame,
            expected_peer_pid=expected_peer_pid,
            expected_peer_uids=expected_peer_uids,
        )
        self.calls: list[Record] = []
        self.call_count = 0  # every call message, refused ones included
        self.over_budget = 0
        self.call_bytes = 0  # of the call messages received
        self.over_bytes = 0  # calls refused past max_call_bytes
        self.scope: trio.CancelScope | None = None
        self.paused_seconds = 0.0
        self.sandbox_report: dict[str, Any] | None = None
        self._pauses = 0
        self._paused_at = 0.0
        self._remaining = 0.0

    # on_ask: the run's deadline stops while a person is being asked (by any of its calls).
    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        scope = self.scope
        if scope is None or (self._pauses == 0 and math.isinf(scope.deadline)):
            yield
            return
        if self._pauses == 0:
            self._paused_at = trio.current_time()
            self._remaining = scope.deadline - self._paused_at
            scope.deadline = math.inf
        self._pauses += 1
        try:
            yield
        finally:
            self._pauses -= 1
            if self._pauses == 0:
                now = trio.current_time()
                scope.deadline = now + self._remaining
                self.paused_seconds += now - self._paused_at

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
        message = {
            "type": "script",
            "source": script,
            "mode": self.config.mode,
            "tools": list(self.manifest),
            "max_calls": self.config.max_calls,
        }
        try:
            await conn.send(message)  # refused before it is sent, using no sequence number
        except _wire.ProtocolError as exc:
            if exc.reason != "oversized":
                raise
            trimmed = _fit_manifest(message, conn.codec)
            if not trimmed:
                raise
            self.emit("script_manifest_trimmed", tools=trimmed[:50], count=len(trimmed))
            await conn.send(message)
        while True:
            before = conn.codec.received_bytes
            message = await conn.recv()
            kind = message.get("type")
            if kind in ("call", "calls"):
                self.call_bytes += conn.codec.received_bytes - before
            if kind in ("call", "calls") and self.call_bytes > self.config.max_call_bytes:
                items = [message] if kind == "call" else message.get("calls")
                if not isinstance(items, list) or not all(isinstance(c, dict) for c in items):
                    raise _wire.ProtocolError("malformed", "a calls message needs a list of calls")
                refused = [self.bytes_refusal(c.get("id"), c.get("tool")) for c in items]
                await self._send_replies(conn, "reply" if kind == "call" else "replies", refused)
            elif kind == "call":
                reply = await self.call(message)
                await self._send_replies(conn, "reply", [reply])
            elif kind == "calls":
                await self.call_batch(message, conn)
            elif kind == "done":
                await conn.send({"type": "bye"})
                return message
            else:
                raise _wire.ProtocolError(
                    "unexpected", f"unexpected {kind!r} message from the runner"
                )

    async def _send_replies(self, conn: Any, kind: str, replies: list[Reply]) -> None:
        """Send ``replies`` (one ``reply``, or one or more ``replies`` frames).

        A value that cannot cross the bridge (not JSON, or too large for a
        frame) becomes that call's error; a batch too large for one frame
        goes in several.
        """
        try:
            await conn.send(replies[0] if kind == "reply" else {"type": kind, "replies": replies})
            return
        except (_wire.ProtocolError, TypeError, ValueError, RecursionError) as exc:
            if isinstance(exc, _wire.ProtocolError) and exc.reason != "oversized":
                raise
            if kind == "reply":
                await conn.send(_uncarried(replies[0], exc))
                return
        # The slow road: each reply on its own, then as many per frame as fit.
        room = conn.codec.max_frame // 2
        sized = []
        for reply in replies:
            try:
                size = conn.codec.measure({"type": "replies", "replies": [reply]})
            except (_wire.ProtocolError, TypeError, ValueError, RecursionError) as exc:
                reply = _uncarried(reply, exc)
                size = conn.codec.measure({"type": "replies", "replies": [reply]})
            sized.append((reply, size))
        chunk: list[Reply] = []
        used = 0
        for reply, size in sized:
            if chunk and used + size > room:
                await conn.send({"type": "replies", "replies": chunk})
                chunk, used = [], 0
            chunk.append(reply)
            used += size
        if chunk:
            await conn.send({"type": "replies", "replies": chunk})

    def budget_refusal(self, call_no: Any, tool: Any) -> Reply | None:
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
        return _refused(call_no, refusal.code, refusal.message, "max_calls")

    def bytes_refusal(self, call_no: Any, tool: Any) -> Reply:
        """The reply for a call in a message past the run's byte budget (``max_call_bytes``).

        Nothing of it is recorded but a count (one event, then ``script_finished``): each
        call is recorded with its arguments, so the budget bounds what a run adds to the
        event stream, which a script could otherwise grow by gigabytes at no cost
        (``"x" * 10_000_000`` in a loop).
        """
        budget = self.config.max_call_bytes
        self.over_bytes += 1
        if self.over_bytes == 1:
            self.emit(
                "script_call_bytes_budget",
                max_call_bytes=budget,
                sent=self.call_bytes,
                called=str(tool)[:200],
            )
        refusal = Denied(
            f"call_tool refused: the script's calls have sent {self.call_bytes} bytes, more "
            f"than the run's budget of {budget} (max_call_bytes); no further call runs in "
            "this run",
            field="max_call_bytes",
        )
        return _refused(call_no, refusal.code, refusal.message, "max_call_bytes")

    async def call(self, message: dict[str, Any]) -> Reply:
        """One ``call`` message through the Gate; its reply (the record is kept)."""
        reply, record = await self._one(message, self.paused)
        if record is not None:
            self.calls.append(record)
        return reply

    async def call_batch(self, message: dict[str, Any], conn: Any) -> None:
        """A ``calls`` message: every call through the Gate, concurrently; replies sent on ``conn``.

        At most ``max_parallel`` calls run at once; the budget is counted in the
        batch's order before any runs; a person is asked in the batch's order,
        one question at a time; the records join :attr:`calls` in that order too.
        Replies go as they end, in frames of about half the frame limit (the runner
        matches them by id): held until the batch ended, 4,000 capped reads held
        this process at 1.6 GB (a batch may have 10,000 calls).
        """
        batch = message.get("calls")
        if not isinstance(batch, list) or not all(isinstance(c, dict) for c in batch):
            raise _wire.ProtocolError("malformed", "a calls message needs a list of calls")
        n = len(batch)
        if n > self.config.max_calls:  # the runner refuses such a batch itself: a forged one
            raise _wire.ProtocolError(
                "oversized",
                f"a batch of {n} calls is larger than the run's budget of {self.config.max_calls}",
            )
        records: list[Record | None] = [None] * n
        outbox = _Outbox(self, conn)
        todo = []
        for i, item in enumerate(batch):
            over = self.budget_refusal(item.get("id"), item.get("tool"))
            if over is not None:
                await outbox.add(over)
            else:
                todo.append(i)
        turns = AskTurns(n)
        for i in range(n):
            if i not in todo:
                turns.passed(i)

        def ask_hook(i: int) -> Callable[[], contextlib.AbstractAsyncContextManager[None]]:
            @contextlib.asynccontextmanager
            async def hook() -> AsyncIterator[None]:
                await turns.turn(i)
                try:
                    async with self.paused():
                        yield
                finally:
                    turns.passed(i)

            return hook

        queue = iter(todo)

        async def worker() -> None:
            for i in queue:
                try:
                    reply, records[i] = await self._one(batch[i], ask_hook(i), counted=True)
                finally:
                    turns.passed(i)
                await outbox.add(reply)

        try:
            async with trio.open_nursery() as nursery:
                for _ in range(min(self.config.max_parallel, len(todo))):
                    nursery.start_soon(worker)
        finally:  # a run that timed out mid-batch still reports the calls that ended
            self.calls.extend(r for r in records if r is not None)
        await outbox.flush(last=True)

    async def _one(
        self,
        message: dict[str, Any],
        on_ask: Callable[[], contextlib.AbstractAsyncContextManager[None]],
        *,
        counted: bool = False,
    ) -> tuple[Reply, Record | None]:
        """One call through the Gate: its reply, and its record (None past the budget)."""
        call_no = message.get("id")
        tool = message.get("tool")
        arguments = message.get("arguments")
        if not counted:
            over = self.budget_refusal(call_no, tool)
            if over is not None:
                return over, None
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            message_ = "a call needs a tool name and keyword arguments"
            return _refused(call_no, "invalid_arguments", message_), None
        if tool in NOT_FROM_SCRIPTS:
            refusal = Denied(
                f"{tool} cannot be called from inside a script: scripts do not nest "
                "(a nested run would multiply processes and escape the call budget)",
                field="tool",
            )
            record = {"tool": tool, "call_id": None, "decision": None, "ok": False}
            record["error"] = refusal.code
            # `called`, not `tool`: the emitter may be CallContext.emit, which sets `tool` itself.
            self.emit("bridge_refused_call", called=tool, detail=refusal.message)
            return _refused(call_no, refusal.code, refusal.message, "tool"), record
        outcome = await self.kernel.invoke(
            tool,
            arguments,
            origin="script",
            trace_id=self.trace_id,
            parent_id=self.parent_id,
            on_ask=on_ask,
        )
        decision = outcome.decision.to_dict() if outcome.decision is not None else None
        record = {
            "tool": tool,
            "call_id": outcome.call_id,
            "decision": decision,
            "staged": outcome.staged,
            "ok": outcome.ok,
        }
        reply: Reply = {"type": "reply", "id": call_no, "decision": decision}
        error = outcome.error
        if error is not None:
            record["error"] = error.code
            out = {"code": error.code, "message": error.message}
            if error.field is not None:
                out["field"] = error.field
            reply.update(ok=False, error=out)
        else:
            reply.update(ok=True, value=outcome.value, staged=outcome.staged)
        return reply, record


class _Outbox:
    """A batch's replies on their way: sent once they fill about half a frame, one send at
    a time, so the host holds at most that much of a batch's results (plus calls running)."""

    def __init__(self, session: ScriptSession, conn: Any) -> None:
        self._session = session
        self._conn = conn
        self._room = conn.codec.max_frame // 2
        self._held: list[Reply] = []
        self._bytes = 0
        self._sent = False
        self._lock = trio.Lock()

    async def add(self, reply: Reply) -> None:
        try:
            self._bytes += self._conn.codec.measure({"type": "replies", "replies": [reply]})
        except (_wire.ProtocolError, TypeError, ValueError, RecursionError):
            self._bytes += self._room  # sent on its own; _send_replies says why it cannot be
        self._held.append(reply)
        if self._bytes >= self._room:
            await self.flush()

    async def flush(self, *, last: bool = False) -> None:
        """Send what is held (at the end: also an empty batch's one empty ``replies``)."""
        async with self._lock:
            if not self._held and not (last and not self._sent):
                return
            held, self._held, self._bytes = self._held, [], 0
            self._sent = True
            await self._session._send_replies(self._conn, "replies", held)


# The script message holds the manifest at this depth: {"tools": [{"schema": SCHEMA}]}.
_MANIFEST_DEPTH = 3


def _fit_manifest(message: dict[str, Any], codec: _wire.Codec) -> list[str]:
    """Make the ``script`` message's tool manifest cross the bridge; the tools it trimmed.

    A tool's schema comes from whoever registered it (an untrusted MCP server): one
    nesting deeper than the bridge's bound, or schemas larger together than a frame,
    made every run of every script fail. Such a schema is left out of the manifest
    (``{}``: no script-side check for that tool, whose calls the Gate validates as
    always), the deepest first, then the largest until the message fits.
    """
    tools = message["tools"]
    trimmed: list[str] = []
    for i, entry in enumerate(tools):
        body = json.dumps(entry.get("schema"), ensure_ascii=False).encode()
        if _wire.nesting_exceeds(body, codec.max_depth - _MANIFEST_DEPTH):
            tools[i] = {**entry, "schema": {}}
            trimmed.append(str(entry.get("name")))
    try:
        codec.measure(message)
        return trimmed
    except (_wire.ProtocolError, TypeError, ValueError):
        pass
    sizes = sorted(
        ((len(json.dumps(e.get("schema"), ensure_ascii=False)), i) for i, e in enumerate(tools)),
        reverse=True,
    )
    room = codec.max_frame // 2 - len(json.dumps(message["source"], ensure_ascii=False))
    total = sum(size for size, _ in sizes)
    for size, i in sizes:
        if total <= room:
            break
        trimmed.append(str(tools[i].get("name")))
        tools[i] = {**tools[i], "schema": {}}
        total -= size
    return trimmed


def _refused(call_no: Any, code: str, message: str, field: str | None = None) -> Reply:
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return {"type": "reply", "id": call_no, "ok": False, "error": error, "decision": None}


def _uncarried(reply: Reply, exc: BaseException) -> Reply:
    """``reply`` with its value replaced by the error saying why it cannot cross the bridge."""
    why = exc.message if isinstance(exc, _wire.ProtocolError) else f"not JSON: {exc}"
    error = {"code": "tool_error", "message": f"the result cannot cross the bridge: {why}"}
    return {**reply, "ok": False, "value": None, "error": error}
