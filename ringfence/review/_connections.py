"""The review page's connections, bounded: a local flood cannot take the page from the person.

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

:func:`serve_bounded` is hypercorn's trio worker (``hypercorn.trio.run.worker_serve``) with
the bound in front of each connection's ``TCPServer``; the page's app keeps no lifespan state.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr
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
    limit: ConnectionLimit,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` (plain HTTP) until cancelled, each connection within
    ``limit``; ``task_status.started(binds)`` once listening. A bind that fails raises OSError."""
    context = WorkerContext(None)
    wrapped = ASGIWrapper(app)  # type: ignore[arg-type]
    sockets = config.create_sockets()
    listeners = []
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")

    async def one(stream: trio.SocketStream) -> None:
        await TCPServer(wrapped, config, context, ConnectionState({}), stream)  # type: ignore[arg-type]

    async def accepted(stream: trio.SocketStream) -> None:
        await limit.handle(stream, one)

    async with trio.open_nursery() as nursery:
        task_status.started(binds)
        await trio.serve_listeners(accepted, listeners, handler_nursery=nursery)
