"""The authenticated channel between the host and one runner.

:class:`BridgeListener` is the run's listening socket (a 0600 Unix socket in
a 0700 directory, or 127.0.0.1 on a random port). :class:`Admission` decides
which connection becomes the run's one :class:`Channel`: peer credentials
first, then the mutual HMAC handshake of :mod:`ringfence.bridge._wire`, each
under its own deadline, the first authenticated connection winning. A
:class:`Channel` is the host's end of it: framed, sequenced, tagged after the
handshake; the frames are buffered and checked by the wire codec.

Both are plain non-blocking sockets driven by :func:`trio.lowlevel.wait_readable`
and :func:`~trio.lowlevel.wait_writable`: a call's round trip then yields to
trio's scheduler only where it must wait for the peer, not once more for every
send and receive that completes at once (as :class:`trio.SocketStream`'s
checkpoints would).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket as stdsocket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ..runtime._errors import Unavailable
from . import _wire

__all__ = [
    "LISTEN_BACKLOG",
    "MAX_PENDING_HANDSHAKES",
    "MAX_REFUSAL_EVENTS",
    "Admission",
    "BridgeListener",
    "Channel",
    "new_secret",
]

MAX_REFUSAL_EVENTS = 20
# Handshakes in progress at once; past this the oldest is dropped for the newcomer, so
# silent peers cannot hold the runner out (it speaks at once and finishes in ~1 ms).
MAX_PENDING_HANDSHAKES = 16
LISTEN_BACKLOG = 128
# sun_path holds 108 bytes with its NUL (Linux): a longer address cannot be bound.
MAX_UNIX_ADDRESS = 107


def new_secret() -> bytes:
    """A fresh run secret: the only thing that lets a connection through the handshake."""
    return secrets.token_bytes(_wire.SECRET_BYTES)


class BridgeListener:
    """The run's listening socket: 127.0.0.1 on a random port, or a Unix socket.

    The Unix socket is ``bridge.sock`` (0600) in a fresh 0700 directory; when
    the runner connects as another uid (a container's), both are handed to it (socket first,
    links not followed); a local runner connects before it drops privileges. ``aclose``
    removes the directory.
    """

    def __init__(self, sock: stdsocket.socket, address: list[Any], directory: Path | None):
        self.sock = sock
        self.address = address
        self.directory = directory

    @classmethod
    async def open(
        cls, transport: str, owner: tuple[int, int] | None = None, parent: Path | None = None
    ) -> BridgeListener:
        if transport == "tcp":
            sock = stdsocket.socket(stdsocket.AF_INET, stdsocket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", 0))
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            return cls(sock, ["tcp", "127.0.0.1", sock.getsockname()[1]], None)
        directory = Path(tempfile.mkdtemp(prefix="ringfence-bridge-", dir=parent))
        path = directory / "bridge.sock"
        if len(os.fsencode(path)) > MAX_UNIX_ADDRESS:
            shutil.rmtree(directory, ignore_errors=True)
            raise Unavailable(
                f"the script bridge's socket {path} is {len(os.fsencode(path))} bytes long, past "
                f"the {MAX_UNIX_ADDRESS} a Unix socket address holds: it is made in the "
                f"temporary directory ({directory.parent}, from TMPDIR); use a shorter one"
            )
        sock = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
        try:
            os.chmod(directory, 0o700)
            old = os.umask(0o177)
            try:
                sock.bind(str(path))
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            if owner is not None:
                # The socket first, while the directory is still ours alone: once the
                # directory is the owner's, it could put a link where the socket was.
                os.chown(path, *owner, follow_symlinks=False)
                os.chown(directory, *owner, follow_symlinks=False)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return cls(sock, ["unix", str(path)], directory)

    async def accept(self) -> tuple[stdsocket.socket, Any]:
        """The next connection (non-blocking) and its peer: ``host:port``, or its pid and uid."""
        while True:
            try:
                conn, peer = self.sock.accept()
                break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)
        conn.setblocking(False)
        if conn.family == stdsocket.AF_INET:
            conn.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
            return conn, f"{peer[0]}:{peer[1]}"
        cred = conn.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_PEERCRED, 12)
        pid, uid, _gid = (int.from_bytes(cred[i : i + 4], sys.byteorder) for i in (0, 4, 8))
        return conn, {"pid": pid, "uid": uid}

    def aclose_sync(self) -> None:
        _close(self.sock)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def _close(sock: stdsocket.socket) -> None:
    """Close ``sock``, first waking any task waiting on it (ClosedResourceError there)."""
    if sock.fileno() != -1:
        trio.lowlevel.notify_closing(sock)
        sock.close()


def _broken(exc: OSError) -> trio.BrokenResourceError:
    return trio.BrokenResourceError(f"the bridge connection failed: {exc}")


class Channel:
    """The host's end of one bridge connection: framed, sequenced, tagged after the handshake.

    Over a connected non-blocking socket. A peer that is gone is
    :class:`trio.BrokenResourceError`; a closed channel :class:`trio.ClosedResourceError`.
    """

    def __init__(self, sock: stdsocket.socket, max_frame: int) -> None:
        self.sock = sock
        self.codec = _wire.Codec(_wire.TO_CHILD, _wire.TO_HOST, max_frame)

    async def send(self, message: dict[str, Any]) -> None:
        view = memoryview(self.codec.encode(message))
        while view:
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)
                continue
            except OSError as exc:
                raise _broken(exc) from None
            view = view[sent:]

    async def recv(self) -> dict[str, Any]:
        while (message := self.codec.next_message()) is None:
            try:
                chunk = self.sock.recv(max(65536, self.codec.missing))
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)
                continue
            except OSError as exc:
                raise _broken(exc) from None
            if not chunk:
                raise _wire.ProtocolError("closed", "the child closed the bridge")
            self.codec.receive_data(chunk)
        return message

    def close(self) -> None:
        """Close the connection (a task waiting on it gets ClosedResourceError). Idempotent."""
        _close(self.sock)

    async def handshake(self, secret: bytes) -> None:
        hello = self.codec.expect(await self.recv(), "hello")
        if hello.get("protocol") != _wire.PROTOCOL:
            raise _wire.ProtocolError("unexpected", f"unknown protocol {hello.get('protocol')!r}")
        nc = _wire.decode_nonce(hello.get("nonce"))
        nh = _wire.new_nonce()
        await self.send(
            {
                "type": "challenge",
                "nonce": nh.hex(),
                "proof": _wire.host_proof(secret, nc, nh).hex(),
            }
        )
        auth = self.codec.expect(await self.recv(), "auth")
        _wire.check_proof(_wire.child_proof(secret, nc, nh), auth.get("proof"))
        self.codec.key = _wire.session_key(secret, nc, nh)
        await self.send({"type": "welcome"})


class Admission:
    """Who may talk to the run: every connection to the listener, until one authenticates.

    :meth:`accept_loop` refuses at once a Unix peer whose pid/uid
    (SO_PEERCRED) is not the runner's (``expected_peer_pid``, called per
    connection: the child may not exist yet; ``expected_peer_uids``), lets
    the others handshake concurrently, each under ``handshake_seconds``, at
    most :data:`MAX_PENDING_HANDSHAKES` at a time (the oldest evicted for a
    newcomer), and makes the first authenticated connection :attr:`channel`.
    Every other connection, and every failed handshake, is refused and
    logged through ``emit`` as a ``bridge_refused`` event (the first
    :data:`MAX_REFUSAL_EVENTS`, then one summary; :attr:`refusals` counts all).
    Nothing a peer sends can end the run.
    """

    def __init__(
        self,
        emit: Callable[..., None],
        *,
        handshake_seconds: float,
        max_frame: int,
        expected_peer_pid: Callable[[], int | None],
        expected_peer_uids: frozenset[int] | None = None,
    ) -> None:
        self.emit = emit
        self.handshake_seconds = handshake_seconds
        self.max_frame = max_frame
        self.secret = new_secret()
        self.refusals = 0
        self.channel: Channel | None = None
        self.authenticated = trio.Event()
        # Handshakes in progress, oldest first: their cancel scopes and peers.
        self._pending: dict[trio.CancelScope, Any] = {}
        self._expected_peer_pid = expected_peer_pid
        self._expected_peer_uids = expected_peer_uids

    def refuse(self, reason: str, peer: Any, detail: str) -> None:
        self.refusals += 1
        if self.refusals <= MAX_REFUSAL_EVENTS:
            self.emit("bridge_refused", reason=reason, peer=peer, detail=detail)
        elif self.refusals == MAX_REFUSAL_EVENTS + 1:
            self.emit(
                "bridge_refused", reason="many", peer=None, detail="further refusals not logged"
            )

    def peer_refusal(self, peer: Any) -> str | None:
        """Why a Unix peer may not even start a handshake (SO_PEERCRED), or None."""
        if not isinstance(peer, dict):
            return None
        expected = self._expected_peer_pid()
        if expected is not None and not _descends_from(peer["pid"], expected):
            return f"peer pid {peer['pid']} is not the runner ({expected}) nor its descendant"
        uids = self._expected_peer_uids
        if uids is not None and peer["uid"] not in uids:
            return (
                f"peer uid {peer['uid']} is not the runner's ({', '.join(map(str, sorted(uids)))})"
            )
        return None

    async def accept_loop(self, listener: BridgeListener, nursery: trio.Nursery) -> None:
        while True:
            sock, peer = await listener.accept()
            if self.authenticated.is_set():
                self.refuse("second_connection", peer, "the run's one connection is taken")
                _close(sock)
                continue
            why = self.peer_refusal(peer)
            if why is not None:
                self.refuse("not_the_child", peer, why)
                _close(sock)
                continue
            if len(self._pending) >= MAX_PENDING_HANDSHAKES:
                # Drop the oldest: the runner speaks at once, so only a peer that dawdles
                # (or floods) loses its place; refusing the newcomer would let silent
                # peers keep the runner out.
                oldest, oldest_peer = next(iter(self._pending.items()))
                del self._pending[oldest]
                oldest.cancel()
                self.refuse(
                    "evicted",
                    oldest_peer,
                    f"{MAX_PENDING_HANDSHAKES} handshakes were in progress; the oldest was dropped",
                )
            scope = trio.CancelScope()
            self._pending[scope] = peer
            nursery.start_soon(self.handshake, sock, peer, scope)

    async def handshake(
        self, sock: stdsocket.socket, peer: Any, scope: trio.CancelScope | None = None
    ) -> None:
        """One peer's handshake under its own deadline; refused peers are closed and logged.

        Nothing a peer sends can end the run: every refusal is a ``bridge_refused``
        event. ``scope`` is how :meth:`accept_loop` evicts it.
        """
        scope = scope or trio.CancelScope()
        conn = Channel(sock, self.max_frame)
        accepted = False
        try:
            with scope, trio.fail_after(self.handshake_seconds):
                await conn.handshake(self.secret)
                if self.authenticated.is_set():
                    self.refuse("second_connection", peer, "another connection authenticated first")
                    return
                self.channel = conn
                accepted = True
                self.authenticated.set()
        except _wire.ProtocolError as exc:
            self.refuse(f"handshake_{exc.reason}", peer, exc.message)
        except trio.Cancelled:  # the run ended (an eviction is caught by `scope`, above)
            self.refuse("handshake_unfinished", peer, "the run ended before it authenticated")
            raise
        except (
            trio.TooSlowError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            OSError,
        ) as exc:
            self.refuse("handshake_failed", peer, f"{type(exc).__name__}: {exc}")
        finally:
            self._pending.pop(scope, None)
            if not accepted:
                _close(sock)


def _descends_from(pid: int, ancestor: int, max_depth: int = 16) -> bool:
    """Whether ``pid`` is ``ancestor`` or below it (a wrapper such as ``sh -c`` may fork).

    Reads ``/proc/<pid>/stat`` (procfs: no disk I/O) up to ``max_depth`` parents.
    """
    for _ in range(max_depth):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return False
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return False
