"""Connections of ringfence's HTTP servers (``serve --transport http``, the review page): one
worker, each connection's sends taking turns, and (the review page) a bound on their number.

Every accepted connection is served by hypercorn's ``TCPServer`` through :class:`_Heard`, whose
``send_all`` and ``send_eof`` take turns. hypercorn closes a connection (``send_eof``, which
holds trio's send side across a checkpoint) while its protocol sends an error answer to a
request cut off mid-body (a client that declared a large body and closed without sending it,
answered early with 413 or 401): trio refuses the second with ``BusyResourceError``, which
hypercorn does not catch there; it went out of the connection's task and ended the whole server
(any local process, no token needed). :func:`serve_bounded` is the one worker both servers use,
so neither can be given hypercorn's own (``hypercorn.trio.serve``) by mistake.

The review page's bound on connections:

hypercorn holds every connection it accepts (an idle one for its keep-alive, 5 s), with no
bound of its own; a local process without the token opening connections faster than they
expire took the process's file descriptors (accept failing with EMFILE, and with it every
file the session opens). :class:`ConnectionLimit` holds at most :data:`MAX_CONNECTIONS` at
once. A connection is *admitted* once one of its requests passed the request guard (Host,
Origin, the token); a new connection beyond the bound closes the oldest connection that was
never admitted — first among those that sent nothing (nothing read, nothing waiting to be
read) — so a flood without the token only ever
displaces itself, never the person's page (its live stream, its keep-alive connections, a
request it has sent and the page has not read yet). When every held connection is admitted
(only a holder of the token can do that) the new one is closed at once.

:func:`serve_bounded` is hypercorn's trio worker (``hypercorn.trio.run.worker_serve``: the
app's lifespan when asked, a shutdown trigger and a graceful drain of ``config.graceful_timeout``)
with the turn-taking stream, and the bound when given, in front of each connection's
``TCPServer``.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["MAX_CONNECTIONS", "Admitted", "ConnectionLimit", "serve_bounded"]

# A browser opens at most 6 connections to one host and port; tabs share them.
MAX_CONNECTIONS = 64


@dataclass
class _Held:
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    admitted: bool = False
    heard: bool = False  # the server read bytes from it (a request under way)
    fd: int = -1  # its socket, to ask the kernel whether bytes wait unread

    def sent_something(self) -> bool:
        """Whether the connection sent bytes: read already, or waiting in the socket (a
        browser's request the page has not come to read yet, on a busy machine)."""
        if not self.heard and self.fd >= 0:
            try:
                waiting = fcntl.ioctl(self.fd, termios.FIONREAD, b"\0\0\0\0")
            except OSError:  # gone: nothing to keep
                return False
            self.heard = struct.unpack("i", waiting)[0] > 0
        return self.heard


class _Heard:
    """The accepted stream as hypercorn's ``TCPServer`` uses it, noting the first bytes read:
    a connection that sent its request is not closed for one that sent nothing."""

    def __init__(self, stream: trio.SocketStream, held: _Held) -> None:
        self._stream = stream
        self._held = held
        self.socket = stream.socket
        # A client that closes mid-body (a 413 answered for a body over the bound): hypercorn
        # closes the connection (send_eof, which holds trio's send side across a checkpoint)
        # while its protocol sends an error answer to the cut request. trio refuses the second
        # with BusyResourceError, which hypercorn does not catch there: it went out of the
        # connection's task and took the whole page down (any local process, no token
        # needed). The two take turns; a send after the EOF is a broken stream, which
        # hypercorn handles.
        self._sending = trio.Lock()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self._stream.receive_some(max_bytes)
        if data:
            self._held.heard = True
        return bytes(data)

    async def send_all(self, data: bytes) -> None:
        async with self._sending:
            await self._stream.send_all(data)

    async def send_eof(self) -> None:
        async with self._sending:
            await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


@dataclass
class ConnectionLimit:
    """At most ``limit`` connections held; beyond, the oldest never admitted is closed."""

    limit: int = MAX_CONNECTIONS
    closed_early: int = 0  # connections closed to make room, or refused (all admitted)
    _held: dict[tuple[str, int], _Held] = field(default_factory=dict)

    def admit(self, client: object) -> None:
        """The connection of ``client`` (ASGI's ``scope["client"]``) passed the guard."""
        if isinstance(client, list | tuple) and len(client) >= 2:
            held = self._held.get((str(client[0]), int(client[1])))
            if held is not None:
                held.admitted = True

    def __len__(self) -> int:
        return len(self._held)

    def _make_room(self) -> bool:
        """Close the oldest connection that sent nothing, else the oldest never admitted.

        Closing the oldest never admitted alone let a flood of idle connections close the
        person's: a connection is admitted only once its request has been read and passed
        the guard, and on a busy machine the person's POST (a Confirm) sat unread while a
        flood opened 64 newer ones, so the page closed it and the Confirm was lost. Bytes the
        kernel holds for a connection count as sent: a browser's request not read yet is
        never taken for an idle connection of the flood."""
        if len(self._held) < self.limit:
            return True
        for heard in (False, True):
            for key, held in self._held.items():  # oldest first
                if not held.admitted and held.sent_something() is heard:
                    del self._held[key]
                    held.scope.cancel()
                    self.closed_early += 1
                    return True
        self.closed_early += 1
        return False

    async def handle(
        self, stream: trio.SocketStream, serve: Callable[[trio.SocketStream], Awaitable[None]]
    ) -> None:
        """Serve one accepted connection within the bound (closed at once beyond it)."""
        try:
            peer = stream.socket.getpeername()
            key = (str(peer[0]), int(peer[1]))
        except (OSError, IndexError, TypeError, ValueError):  # gone already
            await trio.aclose_forcefully(stream)
            return
        if not self._make_room():
            await trio.aclose_forcefully(stream)
            return
        held = _Held(fd=stream.socket.fileno())
        self._held[key] = held
        try:
            with held.scope:
                await serve(_Heard(stream, held))  # type: ignore[arg-type]
        finally:
            if self._held.get(key) is held:
                del self._held[key]
            await trio.aclose_forcefully(stream)


@dataclass
class Admitted:
    """ASGI: every request that reaches ``app`` (behind the guard) admits its connection."""

    app: ASGIApp
    limit: ConnectionLimit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.limit.admit(scope.get("client"))
        await self.app(scope, receive, send)


async def serve_bounded(
    app: ASGIApp,
    config: Config,
    limit: ConnectionLimit | None = None,
    *,
    lifespan: bool = False,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` (plain HTTP) until ``shutdown_trigger`` returns or it
    is cancelled; ``task_status.started(binds)`` once listening. A bind that fails raises
    OSError.

    Each connection's sends take turns (:class:`_Heard`) and, with ``limit``, connections are
    held within it. ``lifespan``: the app's ASGI lifespan runs around serving (its startup
    before the first connection is accepted, its shutdown after the drain). On the trigger,
    no connection is accepted any more, idle keep-alive connections close, and the requests
    under way have ``config.graceful_timeout`` seconds to finish (hypercorn's own worker)."""
    context = WorkerContext(None)
    wrapped = ASGIWrapper(app)  # type: ignore[arg-type]
    sockets = config.create_sockets()
    listeners = []
    binds = []
    try:
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
            listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
            binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
        state: dict[str, object] = {}

        async def one(stream: trio.SocketStream) -> None:
            connection = ConnectionState(state.copy())  # type: ignore[arg-type]
            await TCPServer(wrapped, config, context, connection, stream)  # type: ignore[arg-type]

        async def accepted(stream: trio.SocketStream) -> None:
            if limit is None:
                await _unbounded(stream, one)
            else:
                await limit.handle(stream, one)

        async with trio.open_nursery() as lifespan_nursery:
            life = Lifespan(wrapped, config, state) if lifespan else None  # type: ignore[arg-type]
            if life is not None:
                await lifespan_nursery.start(life.handle_lifespan)
                await life.wait_for_startup()
            async with trio.open_nursery() as server_nursery:
                task_status.started(binds)
                try:
                    async with trio.open_nursery() as nursery:
                        if shutdown_trigger is not None:
                            nursery.start_soon(raise_shutdown, shutdown_trigger)
                        nursery.start_soon(raise_shutdown, context.terminate.wait)
                        nursery.start_soon(
                            partial(
                                trio.serve_listeners,
                                accepted,
                                listeners,
                                handler_nursery=server_nursery,
                            )
                        )
                        await trio.sleep_forever()
                except BaseExceptionGroup as group:
                    _, other = group.split(ShutdownError)
                    if other is not None:
                        raise other from None
                finally:
                    # Idle keep-alive connections close; those under way have the grace.
                    await context.terminated.set()
                    grace = trio.current_time() + config.graceful_timeout
                    server_nursery.cancel_scope.deadline = grace
            if life is not None:
                await life.wait_for_shutdown()
            lifespan_nursery.cancel_scope.cancel()
    finally:
        for listener in listeners:
            listener.socket.close()
        for sock in sockets.insecure_sockets:
            sock.close()


async def _unbounded(
    stream: trio.SocketStream, serve: Callable[[trio.SocketStream], Awaitable[None]]
) -> None:
    """Serve one accepted connection, its sends taking turns (no bound on their number)."""
    try:
        await serve(_Heard(stream, _Held()))  # type: ignore[arg-type]
    finally:
        await trio.aclose_forcefully(stream)
