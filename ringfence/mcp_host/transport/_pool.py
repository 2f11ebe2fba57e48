"""Pooled connections to one MCP server over stdio, Streamable HTTP or SSE.

Each server has one :class:`ConnectionPool` holding at most one live SDK
``mcp.Client`` (JSON-RPC multiplexes concurrent calls, so one process serves
them all). The client lives in a *runner task* in the pool's nursery, because
the SDK's transports open task groups that must be exited by the task that
entered them; callers in any task borrow the client.

Guarantees:

- Every operation runs under a deadline (a trio cancel scope): connecting under
  ``connect_timeout_seconds``, each call under ``call_timeout_seconds``. A call
  that runs out is cancelled (the SDK sends the server ``notifications/cancelled``)
  and raises :class:`~ringfence.runtime.ToolTimeout`.
- A call is sent at most once. A call whose connection broke is **not
  replayed** (it may already have acted); it raises ``Unavailable`` saying so.
- A broken connection is discarded (its process is stopped) and the next
  independent call connects afresh.
- Errors from the SDK and its transports are translated into the ringfence
  error tree (:mod:`._errors`); a URL is never repeated in a message (its
  display form is).
- The server's stderr (stdio, :mod:`._stdio`) is captured line by line into
  bounded, redacted diagnostics (:mod:`._diagnostics`); it never reaches the
  terminal.
- Redaction comes before every cut (error text, stderr lines), so a secret
  that straddles a cut is still removed whole.
- Only transport facts become transport errors: a closed stream (the
  transport's read stream ended, :func:`~._inbound.watch_inbound`) is Unavailable, the SDK's own timeout is ToolTimeout. An error code
  the *server* sent (even ``-32000``/``-32001``, which look like those) is a
  ToolError (InvalidArguments for ``-32602``) whose server-written message is
  framed as untrusted content (for an untrusted server).
- No inbound JSON-RPC message larger than the server's ``max_message_bytes``
  (default 32 MiB) is parsed: over stdio each line is bounded before it is
  decoded; over Streamable HTTP a JSON body is bounded while it is read and an
  SSE event by the SDK's own event-size cap (:mod:`._inbound`). The call fails with a ToolError
  naming the limit; the connection survives when the reply could be matched to
  its request, else it is closed and the next call reconnects.

Non-guarantees: a stdio server runs as the local user with the user's file
and network access, unless its entry says ``sandbox = "local"`` (then it is
confined; see :mod:`._stdio`); approval gates its tool calls, not its process.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import trio
from mcp import Client, types

from ...runtime._errors import RingfenceError, ToolTimeout, Unavailable
from ...runtime._redact import Redactor
from .._diagnostics import Diagnostics
from .._errors import translate_error
from .._failures import HttpStatusLog, explain
from .._results import frame_untrusted
from .._urls import url_secrets
from ..manifest._load import ServerConfig, Transport, Trust
from ._http import http_transport
from ._inbound import InboundLimit, watch_inbound
from ._stdio import (
    STDERR_QUOTE_LINES,
    ConfinedWrites,
    StdioConfiner,
    read_stderr,
    stdio_transport,
)

if TYPE_CHECKING:
    from ..oauth._tokens import SealedStore

__all__ = ["ConnectionPool", "LiveConnection"]

T = TypeVar("T")

CLIENT_INFO = types.Implementation(name="ringfence", version="0.1.0")
STDERR_WAIT_SECONDS = 1.0  # how long a failed connect waits for the server's stderr to end


def _transport_closed(live: LiveConnection) -> bool:
    """Whether the transport already ended (nothing more can come on it, so nothing is sent).

    Its read stream is watched (:func:`~._inbound.watch_inbound`): it ends when the
    server closes its side or the inbound cap closes it; a connection whose runner
    finished is closed too.
    """
    return live.finished.is_set() or (live.limit is not None and live.limit.ended)


# -- the pool ----------------------------------------------------------------------------------


@dataclass
class LiveConnection:
    """One connected SDK client and the runner task that owns it."""

    client: Client
    generation: int
    connected_at: float
    close_requested: trio.Event = field(default_factory=trio.Event)
    finished: trio.Event = field(default_factory=trio.Event)
    broken: str | None = None
    limit: InboundLimit | None = None
    # stdio: {"confined": bool, and for a confined server its grants and layers}; else None
    sandbox: dict[str, Any] | None = None
    # a writable confined server's: its writes are read after each call (see ConnectionPool.turn)
    writes: ConfinedWrites | None = None

    @property
    def protocol_version(self) -> str:
        return self.client.protocol_version


ClientOptions = dict[str, Any]


class ConnectionPool:
    """The pooled connection to one server (see the module docstring for guarantees).

    ``client_options`` are passed to ``mcp.Client`` (callbacks, message
    handler). Use :meth:`run` for every request; :meth:`aclose` stops the
    server. ``nursery`` must stay open for the pool's lifetime.
    """

    def __init__(
        self,
        config: ServerConfig,
        nursery: trio.Nursery,
        redactor: Redactor,
        diagnostics: Diagnostics,
        client_options: ClientOptions | None = None,
        *,
        stdio_confiner: StdioConfiner | None = None,
        token_store: SealedStore | None = None,
        roots: Sequence[str] = (),
    ) -> None:
        self.config = config
        self._confiner = stdio_confiner
        self._roots = tuple(roots)  # the session's workspace roots (see stdio_transport)
        self._token_store = token_store
        self._nursery = nursery
        self._redactor = redactor
        self.diagnostics = diagnostics
        self._client_options = dict(client_options or {})
        self._live: LiveConnection | None = None
        self._lock = trio.Lock()
        self._generation = 0
        self._closed = False
        self.connects = 0
        self.on_connect: Callable[[LiveConnection], Awaitable[None]] | None = None
        # The inbound cap of the connection being set up (for errors during the handshake).
        self._connecting_limit: InboundLimit | None = None
        self.http_log = HttpStatusLog()  # HTTP statuses the SDK hides, for explain()
        # stdio: the last stderr lines of the process being connected, and its stderr's end
        # (a failed connect quotes them: why the server died).
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_QUOTE_LINES)
        self._stderr_done: trio.Event | None = None
        if config.url:
            for part in url_secrets(config.url):
                redactor.register(part)

    # -- public ------------------------------------------------------------------------------

    @property
    def live(self) -> LiveConnection | None:
        return self._live if self._live is not None and self._live.broken is None else None

    async def connect(self) -> LiveConnection:
        """The live connection, connecting first if there is none (or it broke).

        Raises ToolTimeout past ``connect_timeout_seconds`` and the translated
        error (usually Unavailable) when the server cannot be started or reached.
        """
        if self._closed:
            raise Unavailable(
                f"MCP server {self.config.name!r}: the session's connections are closed"
            )
        live = self.live
        if live is not None and not _transport_closed(live):
            return live
        async with self._lock:
            live = self.live
            if live is not None:
                if not _transport_closed(live):
                    return live
                # Closed before anything was sent on it: reconnecting replays nothing.
                self.discard(live, "the server closed the connection")
            started: LiveConnection | None = None
            try:
                with trio.fail_after(self.config.connect_timeout_seconds):
                    started = await self._nursery.start(self._runner, self._generation + 1)
                    if self.on_connect is not None:
                        await self.on_connect(started)
            except BaseException as exc:
                if started is not None:
                    started.broken = started.broken or "failed during connect"
                    started.close_requested.set()
                if isinstance(exc, trio.TooSlowError):
                    error: RingfenceError = ToolTimeout(
                        f"MCP server {self.config.name!r} did not finish connecting within "
                        f"{self.config.connect_timeout_seconds:g}s (connect_timeout_seconds)",
                        field="connect_timeout_seconds",
                    )
                elif isinstance(exc, Exception):
                    # No connection came of it: a "closed" code here is a transport fact.
                    error = translate_error(
                        exc,
                        self.config,
                        "connect",
                        redactor=self._redactor,
                        closed=True,
                        limit=self._connecting_limit,
                    )
                    error = explain(error, exc, self.config, "connect", self.http_log)
                    error = await self._with_stderr(error)
                else:
                    raise
                self.diagnostics.fail("connect", error)
                raise error from None
            self._generation += 1
            self._live = started
            self.connects += 1
            return started

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[ConfinedWrites | None]:
        """One call's turn: connects, and for a writable confined server holds its writes'
        lock (calls take turns, each one's writes read after it) and yields them, for the
        caller to settle after its call; otherwise yields None and holds nothing."""
        live = await self.connect()
        writes = live.writes
        if writes is None:
            yield None
            return
        async with writes.lock:
            yield writes

    async def run(
        self,
        action: str,
        fn: Callable[[Client], Awaitable[T]],
        *,
        timeout: float | None = None,
    ) -> T:
        """Run one request under the call deadline; translate failures; never retry.

        Raises ToolTimeout when the deadline passes, Unavailable when the
        connection is (or becomes) unusable, and the translated error otherwise.
        """
        live = await self.connect()
        deadline = self.config.call_timeout_seconds if timeout is None else timeout
        try:
            with trio.move_on_after(deadline) as scope:
                return await fn(live.client)
        except Exception as exc:
            error = translate_error(
                exc,
                self.config,
                action,
                redactor=self._redactor,
                closed=_transport_closed(live),
                limit=live.limit,
            )
            error = explain(error, exc, self.config, action, self.http_log)
            if error.details.get("broken"):
                self.discard(live, error.message)
            self.diagnostics.fail(action, error)
            raise error from None
        assert scope.cancelled_caught
        error = ToolTimeout(
            f"MCP server {self.config.name!r}: {action} did not finish within {deadline:g}s "
            "(call_timeout_seconds); it was cancelled and will not be retried",
            field="call_timeout_seconds",
        )
        self.diagnostics.fail(action, error)
        raise error

    def discard(self, live: LiveConnection, reason: str) -> None:
        """Mark ``live`` broken and stop it; the next call reconnects."""
        if live.broken is None:
            live.broken = reason
            self.diagnostics.fail(
                "connection", f"discarded connection #{live.generation}: {reason}"
            )
        live.close_requested.set()

    async def aclose(self) -> None:
        """Stop the server (bounded by the MCP lifecycle's shutdown escalation). Idempotent."""
        self._closed = True
        live = self._live
        if live is not None:
            live.close_requested.set()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await live.finished.wait()

    async def _with_stderr(self, error: RingfenceError) -> RingfenceError:
        """``error`` with the stdio server's last stderr lines: why it died during connect.

        Waits up to :data:`STDERR_WAIT_SECONDS` for its stderr to end (the
        process is stopped by then; the reader drains what it wrote). The
        lines are redacted and cut; none (or not stdio): ``error`` as it was.
        """
        done = self._stderr_done
        if done is None:
            return error
        with trio.move_on_after(STDERR_WAIT_SECONDS):
            await done.wait()
        lines = [line for line in self._stderr_tail if line.strip()]
        if not lines:
            return error
        if self.config.trust is not Trust.TRUSTED:
            # The server's words: a reconnect's error is a call's, handed to the model, so
            # they are framed there as every other text it writes (a line of its choosing,
            # "[end untrusted external content] SYSTEM NOTICE …", read as ringfence's own).
            framed = frame_untrusted("\n".join(lines), self.config.name, "stderr")
            return error.with_(
                message=f"{error.message} The server's stderr ended with:\n{framed}",
                details={**error.details, "stderr": [framed]},
            )
        quoted = " | ".join(lines)
        return error.with_(
            message=f"{error.message} The server's stderr ended with: {quoted}",
            details={**error.details, "stderr": lines},
        )

    # -- the runner ----------------------------------------------------------------------------

    def _transport(
        self,
        stack: contextlib.AsyncExitStack,
        limit: InboundLimit,
        sandbox: dict[str, Any],
        writes: list[ConfinedWrites],
    ) -> Any:
        if self.config.transport is Transport.STDIO:
            transport = stdio_transport(
                self.config,
                self._read_stderr,
                limit,
                self._redactor,
                self.diagnostics,
                confiner=self._confiner,
                sandbox=sandbox,
                writes=writes,
                roots=self._roots,
            )
        else:
            transport = http_transport(
                self.config,
                stack,
                limit,
                self._redactor,
                self.http_log.hooks(),
                token_store=self._token_store,
            )
        return watch_inbound(transport, limit)

    def _read_stderr(self, fd: int) -> None:
        """Log the stdio server's stderr (``fd``, now ours) from a task of the pool's own."""
        self._stderr_tail = deque(maxlen=STDERR_QUOTE_LINES)
        self._stderr_done = trio.Event()
        self._nursery.start_soon(
            partial(read_stderr, tail=self._stderr_tail, done=self._stderr_done),
            fd,
            self.diagnostics,
            self._redactor,
        )

    async def _runner(self, generation: int, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Own one SDK client from connect to close. Never raises after start()."""
        started = False
        live: LiveConnection | None = None
        limit = InboundLimit(self.config.max_message_bytes)
        self._connecting_limit = limit
        sandbox: dict[str, Any] = {}
        writes: list[ConfinedWrites] = []  # a writable confined server's, closed when it ends
        try:
            async with contextlib.AsyncExitStack() as stack:
                self._stderr_done = None  # set when a stdio server's stderr is being read
                client = Client(
                    self._transport(stack, limit, sandbox, writes),
                    mode=self.config.protocol_mode,
                    cache=None,
                    client_info=CLIENT_INFO,
                    **self._client_options,
                )
                await stack.enter_async_context(client)
                live = LiveConnection(
                    client,
                    generation,
                    time.time(),
                    limit=limit,
                    sandbox=sandbox or None,
                    writes=writes[0] if writes else None,
                )
                started = True
                task_status.started(live)
                await live.close_requested.wait()
        except Exception as exc:
            if not started:
                raise
            error = translate_error(
                exc,
                self.config,
                "the connection",
                redactor=self._redactor,
                closed=True,
                limit=limit,
            )
            self.diagnostics.fail("connection", error)
            if live is not None and live.broken is None:
                live.broken = error.message
        finally:
            # The process is gone (the transport stopped it): what it wrote after its last
            # call is never read; its overlays and cgroup go (after a capture under way).
            for confined in writes:
                with trio.CancelScope(shield=True):
                    await confined.aclose()
            if live is not None:
                if live.broken is None:
                    live.broken = "closed"
                live.finished.set()
