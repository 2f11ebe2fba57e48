"""The host side of one script run: spawn the runner, serve the bridge, gate every call.

:func:`run_script` is the whole lifecycle::

    listen (a 0600 Unix socket in a 0700 directory, or 127.0.0.1:0)
    spawn the runner (secret through an inherited pipe; own session; pdeathsig)
    accept → a Unix peer whose pid/uid (SO_PEERCRED) is not the runner's is
             refused at once; others handshake concurrently, each under its own
             deadline, in frames of at most 4 KiB and bounded nesting; at most
             MAX_PENDING_HANDSHAKES at a time, the oldest evicted for a new one
             (a silent peer cannot hold the runner out) → the first
             authenticated connection wins; every other connection, and every
             failed handshake, is refused and logged as a ``bridge_refused``
             event (the first MAX_REFUSAL_EVENTS, then one summary; the total is
             in ``script_finished``)
    sandboxed report ─► script ─► call/reply … ─► done ─► bye
    wait for the child; kill its process group on any exit path

Every ``call`` becomes ``kernel.invoke(name, args, origin="script",
trace_id=<the script's trace>, parent_id=<the run_tool_script call>,
on_ask=<pauses the run's deadline>)``: the same Gate as a direct call.

Every ``call`` counts against the run's budget (``ScriptConfig.max_calls``,
default 10,000): the calls past it are refused (``denied``) without running,
and without growing the result or the event stream.

Output: the script's stdout is redacted as it arrives (a secret split across
reads included), then kept whole while it fits the kernel's output cap, and
otherwise written to a 0600 spool file (up to ``output_spool_bytes``) while
the reply keeps a head and a tail: redact first, cut after.

Cancellation: the child is killed and reaped before any exception (including
``Cancelled``) leaves :func:`run_script`; the kill is shielded.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import os
import secrets
import shutil
import signal
import socket as stdsocket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import trio

from ..runtime import (
    Denied,
    InvalidArguments,
    Kernel,
    Redactor,
    RingfenceError,
    ToolError,
    Unavailable,
)
from . import _sandbox, _wire

__all__ = [
    "SANDBOX_LEVELS",
    "BridgeListener",
    "ChildProcess",
    "LaunchRequest",
    "LocalLauncher",
    "ScriptConfig",
    "ScriptLimits",
    "ScriptResult",
    "run_script",
]

RUNNER_PATH = Path(__file__).with_name("_runner.py")
SANDBOX_LEVELS = _sandbox.LEVELS  # strict, best-effort, none
# Tool names a script may not call (nesting would let a script multiply processes).
NOT_FROM_SCRIPTS = frozenset({"run_tool_script"})
# Environment variables a child inherits (values from the host); everything else is dropped.
ENV_PASSTHROUGH = ("TZ",)
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
MAX_REFUSAL_EVENTS = 20
CHILD_EXIT_SECONDS = 5.0  # how long a killed child may take to be seen gone
# Handshakes in progress at once; past this the oldest is dropped for the newcomer, so
# silent peers cannot hold the runner out (it speaks at once and finishes in ~1 ms).
MAX_PENDING_HANDSHAKES = 16
LISTEN_BACKLOG = 128
STDERR_KEEP = 8192
DEFAULT_MAX_CALLS = 10_000
# The disk cap of one run's output spool file (the full redacted stdout, when over the cap).
DEFAULT_SPOOL_BYTES = 64 * 1024 * 1024
MARKER_ROOM = 512  # bytes of the reply's output cap kept for the cut marker
# Extra characters kept around each cut, so a secret registered late (by a call made after it
# was printed) is redacted whole before the cut is made.
CUT_SLACK = 4096

Emit = Callable[..., None]


@dataclass(frozen=True)
class ScriptLimits:
    """Resource limits of the child. ``cpu_seconds=None``: the run's timeout rounded up, plus one."""

    cpu_seconds: int | None = None
    memory_bytes: int = 1024 * 1024 * 1024
    open_files: int = 64
    file_size_bytes: int = 0


@dataclass(frozen=True)
class ScriptConfig:
    """How scripts run; chosen by the operator, never by the script or the model.

    ``sandbox``: ``strict`` (default: every layer or ``unavailable``),
    ``best-effort`` (what the machine offers, the gaps recorded), ``none``
    (rlimits only, recorded). ``transport``: ``tcp`` (127.0.0.1) or ``unix``.
    ``mode="plain"`` runs unrestricted Python inside the OS sandbox; it exists
    to test the OS layers without RestrictedPython in front of them.

    ``transport`` defaults to ``unix``: a local peer is identified by its pid
    and uid (SO_PEERCRED) before it may start a handshake. ``tcp`` offers no
    such check (any local process may connect and must fail the handshake).
    ``max_calls`` is the run's ``call_tool`` budget (refused past it);
    ``output_spool_bytes`` the disk cap of the file that holds the full
    redacted output when it is over the kernel's output cap.
    """

    sandbox: str = _sandbox.STRICT
    transport: str = "unix"
    limits: ScriptLimits = field(default_factory=ScriptLimits)
    uid: int = _sandbox.NOBODY
    gid: int = _sandbox.NOBODY
    handshake_seconds: float = 5.0
    max_frame: int = _wire.DEFAULT_MAX_FRAME
    mode: str = "restricted"
    max_calls: int = DEFAULT_MAX_CALLS
    output_spool_bytes: int = DEFAULT_SPOOL_BYTES

    def __post_init__(self) -> None:
        for name, number in (
            ("max_calls", self.max_calls),
            ("output_spool_bytes", self.output_spool_bytes),
        ):
            if type(number) is not int or number < 1:
                raise InvalidArguments(
                    f"script {name} must be a positive integer, not {number!r}", field=name
                )
        for name, value, choices in (
            ("sandbox", self.sandbox, _sandbox.LEVELS),
            ("transport", self.transport, ("tcp", "unix")),
            ("mode", self.mode, ("restricted", "plain")),
        ):
            if value not in choices:
                raise InvalidArguments(
                    f"script {name} must be one of {', '.join(choices)}, not {value!r}", field=name
                )


@dataclass(frozen=True)
class ScriptResult:
    """What one run produced.

    ``status``: ``ok`` (ran to the end), ``error`` (the script raised; see
    ``error``), ``compile_error`` (refused before running; ``error.errors``),
    ``timeout`` (killed at the deadline), ``killed`` (a resource limit or a
    signal ended it; ``error.message`` says which). ``output`` is everything
    printed, redacted; when longer than the kernel's output cap, a head and a
    tail around a marker naming the spool file with the rest. ``calls`` lists
    every ``call_tool`` with its decision, in order, up to the call budget.
    """

    status: str
    output: str
    calls: tuple[dict[str, Any], ...]
    result: Any = None
    has_result: bool = False
    error: dict[str, Any] | None = None
    sandbox: dict[str, Any] | None = None
    returncode: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "output": self.output}
        if self.has_result:
            out["result"] = self.result
        out["calls"] = list(self.calls)
        if self.error is not None:
            out["error"] = self.error
        return out


# -- output capture -------------------------------------------------------------------


class _Capture:
    """One output stream of the child: redacted as it arrives, cut only afterwards.

    Bytes are decoded (UTF-8, invalid bytes replaced) and passed through a
    :class:`~ringfence.runtime.StreamRedactor` before anything is kept, so a
    secret can never be cut in two and leave a prefix behind. While the
    redacted text fits ``cap`` bytes it is kept whole in memory. Past that it
    goes to a new 0600 file in ``spool_dir`` (at most ``spool_cap`` bytes;
    none without a ``spool_dir``) and memory keeps only a head and a tail,
    with :data:`CUT_SLACK` characters to spare. :meth:`finish` redacts once
    more with every secret known by then (the spool file too) and returns the
    whole text, or head + marker + tail within ``cap`` bytes.

    :meth:`feed` writes to the spool from the calling (trio) thread: appends of
    at most one read (64 KiB) to the page cache, like :func:`cap_text`'s spool.
    """

    def __init__(
        self,
        redactor: Redactor,
        cap: int,
        spool_dir: Path | None = None,
        spool_cap: int = 0,
        what: str = "script output",
    ) -> None:
        self.cap = max(cap, 1)
        self.room = max(self.cap - MARKER_ROOM, 2)  # head + tail when cut
        self.total = 0  # bytes received
        self.size = 0  # bytes of redacted text
        self.spooled = 0
        self.spool_path: str | None = None
        self.eof = trio.Event()
        self._what = what
        self._redactor = redactor
        self._stream = redactor.stream()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._head: list[str] = []  # everything, until it is over the cap; then frozen
        self._head_bytes = 0
        self._tail = ""
        self._over = False
        self._spool_dir = spool_dir
        self._spool_cap = spool_cap
        self._spool: BinaryIO | None = None

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._add(self._stream.feed(self._decoder.decode(data)))

    def _add(self, text: str) -> None:
        if not text:
            return
        raw = text.encode()
        self.size += len(raw)
        self._tail = (self._tail + text)[-(self.room + CUT_SLACK) :]
        if self._over:
            self._write(raw)
            return
        self._head.append(text)
        self._head_bytes += len(raw)
        if self._head_bytes > self.cap:
            self._over = True
            self._write("".join(self._head).encode())

    def _write(self, raw: bytes) -> None:
        if self._spool_dir is None or self.spooled >= self._spool_cap:
            return
        try:
            if self._spool is None:
                self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd, self.spool_path = tempfile.mkstemp(
                    prefix="script-output-", suffix=".txt", dir=self._spool_dir
                )
                self._spool = os.fdopen(fd, "wb")
            raw = raw[: self._spool_cap - self.spooled]
            self._spool.write(raw)
            self.spooled += len(raw)
        except OSError:  # a full or unwritable disk loses the spool, never the run
            self.close(remove=True)
            self._spool_dir = None

    def close(self, *, remove: bool = False) -> None:
        """Close the spool file (and delete it with ``remove``). Idempotent."""
        if self._spool is not None:
            with contextlib.suppress(OSError):
                self._spool.close()
            self._spool = None
        if remove and self.spool_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.spool_path)
            self.spool_path = None

    async def finish(self) -> str:
        """End the stream; the text to report (whole, or cut within ``cap`` bytes)."""
        self._add(self._stream.feed(self._decoder.decode(b"", final=True)))
        self._add(self._stream.flush())
        self.close()
        if not self._over:
            return self._redactor.redact("".join(self._head))
        if self.spool_path is not None:
            try:
                await trio.to_thread.run_sync(self._rewrite_spool)
            except OSError:
                self.close(remove=True)
        # Redact (late secrets included), then cut: never the other way round.
        head = _cut_bytes(self._redactor.redact("".join(self._head)), self.room // 2, tail=False)
        tail = _cut_bytes(self._redactor.redact(self._tail), self.room - self.room // 2, tail=True)
        cut = self.size - len(head.encode()) - len(tail.encode())
        if self.spool_path is None:
            where = ""
        elif self.spooled < self.size:
            where = (
                f"; the first {self.spooled} bytes are in {self.spool_path} "
                f"(the {self._spool_cap}-byte spool cap)"
            )
        else:
            where = f"; full output in {self.spool_path}"
        return (
            f"{head}\n[… ringfence cut {cut} of {self.size} bytes of {self._what}{where} …]\n{tail}"
        )

    def _rewrite_spool(self) -> None:
        """Redact the spool file again with every secret known now (blocking; in a thread)."""
        assert self.spool_path is not None
        path = self.spool_path
        stream = self._redactor.stream()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        fd, fresh = tempfile.mkstemp(prefix="script-output-", suffix=".tmp", dir=Path(path).parent)
        try:
            with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(stream.feed(decoder.decode(chunk)).encode())
                dst.write((stream.feed(decoder.decode(b"", final=True)) + stream.flush()).encode())
                if self.spooled < self.size:
                    dst.write(
                        f"\n[… ringfence stopped spooling at the {self._spool_cap}-byte cap; "
                        f"{self.size - self.spooled} more bytes of {self._what} not kept …]\n".encode()
                    )
            os.replace(fresh, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(fresh)
            raise


def _cut_bytes(text: str, limit: int, *, tail: bool) -> str:
    """The first (or last) ``limit`` UTF-8 bytes of ``text``, on a character boundary."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return (raw[-limit:] if tail else raw[:limit]).decode("utf-8", "ignore")


# -- processes ------------------------------------------------------------------------


class ChildProcess(Protocol):
    """A started runner, as the host sees it (a local process, or a process in a container).

    ``pump`` feeds the child's stdout and stderr to the two callbacks until
    both end; ``wait`` returns the exit status (negative: the signal);
    ``kill`` is best effort and immediate; ``aclose`` kills, reaps and
    releases everything, shielded, and may be called twice.
    """

    pid: int | None

    async def pump(self, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> None: ...
    async def wait(self) -> int: ...
    def kill(self) -> None: ...
    async def aclose(self) -> None: ...


class _LocalChild:
    def __init__(self, popen: subprocess.Popen[bytes], stdout: int, stderr: int) -> None:
        self.popen = popen
        self.pid: int | None = popen.pid
        self.stdout = trio.lowlevel.FdStream(stdout)
        self.stderr = trio.lowlevel.FdStream(stderr)
        self._pidfd = os.pidfd_open(popen.pid)
        self._descendants: list[Any] = []

    async def pump(self, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, self.stdout, out)
            nursery.start_soon(_drain, self.stderr, err)

    async def wait(self) -> int:
        if self.popen.returncode is None:
            await trio.lowlevel.wait_readable(self._pidfd)
            self.popen.wait()
        return self.popen.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        """SIGKILL the child's whole process group (and any descendant that left it)."""
        if self.popen.returncode is not None:
            return
        with contextlib.suppress(Exception):
            import psutil  # only on this path: the child is normally alone in its group

            self._descendants = psutil.Process(self.popen.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        for proc in self._descendants:
            with contextlib.suppress(Exception):
                proc.kill()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            self.kill()
            await self.wait()
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            await self.stdout.aclose()
            await self.stderr.aclose()


@dataclass(frozen=True)
class LaunchRequest:
    """What a launcher needs to start one runner."""

    config: dict[str, Any]  # the runner's JSON config, without ``connect``/``secret_fd``
    secret: bytes
    listener: BridgeListener
    env: Mapping[str, str]


class LocalLauncher:
    """Starts the runner as a subprocess of this (the trio) thread.

    The process is created by the calling thread on purpose: the runner's
    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked it exits, and
    trio's ``open_process`` forks from a worker thread that may retire.

    The secret and the run's config go through a pipe the child inherits
    (``pass_fds``), or, with ``secret_on_stdin``, through its stdin (for a
    wrapper such as a container runtime that does not pass descriptors on).
    With ``spare=True`` the launcher keeps one runner started ahead of need:
    it has done its imports and waits on its pipe, so a run skips interpreter
    start-up; :meth:`aclose` ends it (the kernel does, when it closes).
    ``wrapper`` is a command the runner's argv is appended to; with
    ``track_parent=False`` the runner does not require this process to be its
    parent and relies on its bridge watchdog. Subclasses adapt paths for
    another filesystem view (:meth:`runner_argv`, :meth:`connect_address`,
    :meth:`sys_path`).
    """

    name = "local"
    transport: str | None = None  # None: the configured one
    bridge_parent: Path | None = None  # where a Unix listener's private directory is made
    peer_is_child = True  # a Unix peer's pid (SO_PEERCRED) must be the child's

    def __init__(
        self,
        python: str | None = None,
        *,
        wrapper: Sequence[str] = (),
        track_parent: bool = True,
        secret_on_stdin: bool = False,
        spare: bool = False,
    ) -> None:
        self.python = python or sys.executable
        self.wrapper = list(wrapper)
        self.track_parent = track_parent
        self.secret_on_stdin = secret_on_stdin
        self.keep_spare = spare
        self._spare: tuple[_LocalChild, int] | None = None
        self._closed = False

    def runner_argv(self, boot_json: str) -> list[str]:
        return [*self.wrapper, self.python, "-I", "-S", str(RUNNER_PATH), boot_json]

    def connect_address(self, listener: BridgeListener) -> list[Any]:
        return listener.address

    def sys_path(self) -> list[str]:
        import RestrictedPython

        return [str(Path(RestrictedPython.__file__).resolve().parent.parent)]

    async def launch(self, request: LaunchRequest) -> ChildProcess:
        """Start (or activate the spare) runner for one run; raises Unavailable if it cannot start."""
        if not hasattr(os, "pidfd_open"):
            raise Unavailable(
                "run_tool_script's local runner needs Linux >= 5.3 (pidfd_open, PR_SET_PDEATHSIG)",
                field="platform",
            )
        run_config = {**request.config, "connect": self.connect_address(request.listener)}
        activation = request.secret + _json(run_config).encode()
        spare, self._spare = self._spare, None
        if spare is not None and spare[0].popen.poll() is not None:
            await _discard(spare)
            spare = None
        child, w = spare if spare is not None else self._spawn(request.env)
        try:
            view = memoryview(activation)
            while view:
                view = view[os.write(w, view) :]
        finally:
            os.close(w)
        if self.keep_spare and not self._closed:
            with contextlib.suppress(RingfenceError):  # the next run will say why
                self._spare = self._spawn(request.env)
        return child

    def _spawn(self, env: Mapping[str, str]) -> tuple[_LocalChild, int]:
        r, w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        boot = {
            "secret_fd": 0 if self.secret_on_stdin else r,
            "parent_pid": os.getpid() if self.track_parent else 0,
            "sys_path": self.sys_path(),
        }
        argv = self.runner_argv(_json(boot))
        try:
            popen = subprocess.Popen(
                argv,
                stdin=r if self.secret_on_stdin else subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                pass_fds=() if self.secret_on_stdin else (r,),
                close_fds=True,
                env=dict(env),
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (w, out_r, err_r):
                os.close(fd)
            raise Unavailable(
                f"could not start the script runner ({argv[0]}): {exc}", field="python"
            ) from None
        finally:
            for fd in (r, out_w, err_w):
                os.close(fd)
        return _LocalChild(popen, out_r, err_r), w

    async def aclose(self) -> None:
        """End the spare runner, if any. Idempotent."""
        self._closed = True
        spare, self._spare = self._spare, None
        if spare is not None:
            await _discard(spare)


async def _discard(spare: tuple[_LocalChild, int]) -> None:
    child, w = spare
    os.close(w)
    await child.aclose()


def _json(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


# -- the listener ---------------------------------------------------------------------


class BridgeListener:
    """The run's listening socket: 127.0.0.1 on a random port, or a Unix socket.

    The Unix socket is ``bridge.sock`` (0600) in a fresh 0700 directory; when
    the child will drop to another uid, both are handed to that uid. ``aclose``
    removes the directory.
    """

    def __init__(self, sock: trio.socket.SocketType, address: list[Any], directory: Path | None):
        self.sock = sock
        self.address = address
        self.directory = directory

    @classmethod
    async def open(
        cls, transport: str, owner: tuple[int, int] | None = None, parent: Path | None = None
    ) -> BridgeListener:
        if transport == "tcp":
            sock = trio.socket.socket(stdsocket.AF_INET, stdsocket.SOCK_STREAM)
            await sock.bind(("127.0.0.1", 0))
            sock.listen(LISTEN_BACKLOG)
            return cls(sock, ["tcp", "127.0.0.1", sock.getsockname()[1]], None)
        directory = Path(tempfile.mkdtemp(prefix="ringfence-bridge-", dir=parent))
        path = directory / "bridge.sock"
        sock = trio.socket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
        try:
            os.chmod(directory, 0o700)
            old = os.umask(0o177)
            try:
                await sock.bind(str(path))
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            if owner is not None:
                os.chown(directory, *owner)
                os.chown(path, *owner)
            sock.listen(LISTEN_BACKLOG)
        except BaseException:
            sock.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return cls(sock, ["unix", str(path)], directory)

    async def accept(self) -> tuple[trio.SocketStream, Any]:
        conn, peer = await self.sock.accept()
        if conn.family == stdsocket.AF_INET:
            conn.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
            return trio.SocketStream(conn), f"{peer[0]}:{peer[1]}"
        cred = conn.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_PEERCRED, 12)
        pid, uid, _gid = (int.from_bytes(cred[i : i + 4], sys.byteorder) for i in (0, 4, 8))
        return trio.SocketStream(conn), {"pid": pid, "uid": uid}

    def aclose_sync(self) -> None:
        self.sock.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


# -- one connection ---------------------------------------------------------------------


class _Connection:
    """The host's end of one bridge connection: framed, sequenced, tagged after the handshake."""

    def __init__(self, stream: trio.SocketStream, max_frame: int) -> None:
        self.stream = stream
        self.codec = _wire.Codec(_wire.TO_CHILD, _wire.TO_HOST, max_frame)
        self._buf = bytearray()

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(self.codec.encode(message))

    async def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = await self.stream.receive_some(max(65536, n - len(self._buf)))
            if not chunk:
                raise _wire.ProtocolError("closed", "the child closed the bridge")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def recv(self) -> dict[str, Any]:
        length = self.codec.frame_length(await self._exactly(_wire.HEADER.size))
        return self.codec.decode(await self._exactly(length))

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


# -- the run ----------------------------------------------------------------------------


class _Run:
    def __init__(
        self,
        kernel: Kernel,
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
        self.secret = _wire_secret()
        self.calls: list[dict[str, Any]] = []
        self.call_count = 0  # every call message, refused ones included
        self.over_budget = 0
        self.refusals = 0
        # Handshakes in progress, oldest first: their cancel scopes and peers.
        self._pending: dict[trio.CancelScope, Any] = {}
        self.conn: _Connection | None = None
        self.authenticated = trio.Event()
        self.scope: trio.CancelScope | None = None
        self.paused_seconds = 0.0
        self.sandbox_report: dict[str, Any] | None = None
        self._expected_peer_pid = expected_peer_pid
        self._expected_peer_uids = expected_peer_uids

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
            stream, peer = await listener.accept()
            if self.authenticated.is_set():
                self.refuse("second_connection", peer, "the run's one connection is taken")
                await stream.aclose()
                continue
            why = self.peer_refusal(peer)
            if why is not None:
                self.refuse("not_the_child", peer, why)
                await stream.aclose()
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
            nursery.start_soon(self.handshake, stream, peer, scope)

    async def handshake(
        self, stream: trio.SocketStream, peer: Any, scope: trio.CancelScope | None = None
    ) -> None:
        """One peer's handshake under its own deadline; refused peers are closed and logged.

        Nothing a peer sends can end the run: every refusal is a ``bridge_refused``
        event. ``scope`` is how :meth:`accept_loop` evicts it.
        """
        scope = scope or trio.CancelScope()
        conn = _Connection(stream, self.config.max_frame)
        accepted = False
        try:
            with scope, trio.fail_after(self.config.handshake_seconds):
                await conn.handshake(self.secret)
                if self.authenticated.is_set():
                    self.refuse("second_connection", peer, "another connection authenticated first")
                    return
                self.conn = conn
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
                with trio.CancelScope(shield=True):
                    await stream.aclose()

    async def serve(self, script: str) -> dict[str, Any]:
        """Run the session over the authenticated connection; return the ``done`` message."""
        await self.authenticated.wait()
        conn = self.conn
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


def _wire_secret() -> bytes:
    return secrets.token_bytes(_wire.SECRET_BYTES)


def child_env() -> dict[str, str]:
    """The child's whole environment: a fixed base plus the allowlisted host variables."""
    env = dict(BASE_ENV)
    for name in ENV_PASSTHROUGH:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


_KILL_REASONS = {
    "SIGXCPU": "the CPU-time limit ({cpu} s) was reached",
    "SIGKILL": "it was killed (SIGKILL: the hard CPU-time limit, or the system)",
    "SIGSYS": "it made a system call the sandbox forbids",
    "SIGSEGV": "it crashed (SIGSEGV)",
    "SIGXFSZ": "it tried to write a file (the file-size limit is 0)",
}


async def run_script(
    kernel: Kernel,
    script: str,
    *,
    timeout: float,
    trace_id: str,
    parent_id: str | None = None,
    config: ScriptConfig | None = None,
    launcher: Any = None,
    emit: Emit | None = None,
) -> ScriptResult:
    """Run ``script`` in a sandboxed child with every ``call_tool`` gated by ``kernel``.

    Returns a :class:`ScriptResult` for every way the *script* can end (ok,
    error, compile_error, timeout, killed). Raises :class:`Unavailable` when
    the sandbox (at the configured level) or the runner cannot start, and
    :class:`ToolError` when the bridge itself fails (protocol violation, child
    gone before reporting). The child is dead and reaped when this returns or
    raises, cancellation included. The deadline (``timeout`` seconds) pauses
    while the kernel's approver is asking about one of the script's calls.
    """
    config = config or ScriptConfig()
    launcher = launcher or LocalLauncher()
    emit = emit or (
        lambda kind, **data: kernel.events.emit(kind, trace_id, call_id=parent_id, **data)
    )
    if config.sandbox != _sandbox.STRICT or config.mode != "restricted":
        emit("script_sandbox_level", level=config.sandbox, mode=config.mode)
    # One second over the timeout: the wall clock (which reports "timeout" with the output)
    # normally wins; start-up CPU, a spare's imports included, counts against the limit.
    cpu = config.limits.cpu_seconds or math.ceil(timeout) + 1
    policy = {
        "level": config.sandbox,
        "cpu_seconds": cpu,
        "memory_bytes": config.limits.memory_bytes,
        "open_files": config.limits.open_files,
        "file_size_bytes": config.limits.file_size_bytes,
        "uid": config.uid,
        "gid": config.gid,
    }
    child: ChildProcess | None = None
    peer_is_child = getattr(launcher, "peer_is_child", True)
    # A local runner connects before it drops privileges: as this process's uid (or, when
    # this process is root, the uid it was started as; root's own processes are root).
    peer_uids = frozenset({os.geteuid(), os.getuid()}) if peer_is_child else None
    run = _Run(
        kernel, config, emit, trace_id, parent_id,
        lambda: child.pid if child is not None and peer_is_child else None,
        peer_uids,
    )  # fmt: skip
    out = _Capture(
        kernel.redactor, kernel.output_cap_bytes, kernel.spool_dir, config.output_spool_bytes
    )
    err = _Capture(kernel.redactor, STDERR_KEEP, what="runner diagnostics")
    owner = getattr(launcher, "socket_owner", None) or (
        (config.uid, config.gid) if os.geteuid() == 0 and config.sandbox != _sandbox.NONE else None
    )
    started = time.monotonic()
    done: dict[str, Any] | None = None
    serve_error: BaseException | None = None
    timed_out = False
    returncode: int | None = None
    listener = await BridgeListener.open(
        config.transport, owner, getattr(launcher, "bridge_parent", None)
    )
    try:
        request = LaunchRequest(
            {"policy": policy, "max_frame": config.max_frame}, run.secret, listener, child_env()
        )
        child = await launcher.launch(request)
        emit(
            "script_started",
            pid=child.pid,
            launcher=getattr(launcher, "name", type(launcher).__name__),
            address=listener.address,
            sandbox=config.sandbox,
            timeout_seconds=timeout,
            cpu_seconds=cpu,
            memory_bytes=config.limits.memory_bytes,
        )
        exited = trio.Event()

        async def watch_child() -> None:
            nonlocal returncode
            returncode = await child.wait()
            exited.set()

        async def serve(session: trio.Nursery) -> None:
            nonlocal done, serve_error
            try:
                done = await run.serve(script)
            except (
                RingfenceError,
                _wire.ProtocolError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
            ) as exc:
                serve_error = exc
            session.cancel_scope.cancel()

        async def child_gone(session: trio.Nursery) -> None:
            await exited.wait()
            await trio.sleep(0.5)  # what the child sent before exiting is still readable
            session.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, child, out, err)
            nursery.start_soon(run.accept_loop, listener, nursery)
            nursery.start_soon(watch_child)
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                run.scope = scope
                async with trio.open_nursery() as session:
                    session.start_soon(serve, session)
                    session.start_soon(child_gone, session)
            timed_out = scope.cancelled_caught and done is None and serve_error is None
            if done is not None:
                with trio.move_on_after(2.0):
                    await exited.wait()
            child.kill()
            if run.conn is not None:  # the runner's watchdog ends it where kill() cannot reach
                await run.conn.stream.aclose()
            with trio.move_on_after(CHILD_EXIT_SECONDS):
                await exited.wait()
            if not exited.is_set():
                emit("script_not_reaped", pid=child.pid, waited_seconds=CHILD_EXIT_SECONDS)
            with trio.move_on_after(1.0):  # the child is dead: its output reaches EOF promptly
                await out.eof.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        out.close(remove=True)  # nobody will be told where it is
        raise
    finally:
        with trio.CancelScope(shield=True):
            if child is not None:
                await child.aclose()
            if run.conn is not None:
                await run.conn.stream.aclose()
            listener.aclose_sync()
    try:
        output = await out.finish()
        diagnostics = await err.finish()
        return _result(
            run, output, diagnostics, done, serve_error, timed_out, returncode, timeout, cpu, emit,
            time.monotonic() - started,
        )  # fmt: skip
    except BaseException:  # no result names the spool file: do not leave it behind
        out.close(remove=True)
        raise


async def _drain(stream: trio.abc.ReceiveStream, feed: Callable[[bytes], None]) -> None:
    try:
        while data := await stream.receive_some(65536):
            feed(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _pump(child: ChildProcess, out: _Capture, err: _Capture) -> None:
    try:
        await child.pump(out.feed, err.feed)
    finally:
        out.eof.set()
        err.eof.set()


def _result(
    run: _Run,
    output: str,
    diagnostics: str,
    done: dict[str, Any] | None,
    serve_error: BaseException | None,
    timed_out: bool,
    returncode: int | None,
    timeout: float,
    cpu: int,
    emit: Emit,
    seconds: float,
) -> ScriptResult:
    """Turn how the run ended into a ScriptResult, or raise for a broken bridge or sandbox."""
    report = run.sandbox_report
    calls = tuple(run.calls)
    base = {"sandbox": report, "returncode": returncode, "seconds": seconds}
    # Bounded totals: the refusal events stop at MAX_REFUSAL_EVENTS, the call records at
    # the budget; the counts are always here.
    totals = {"refused_peers": run.refusals, "refused_over_budget": run.over_budget}
    if isinstance(serve_error, RingfenceError):  # the sandbox could not be applied
        emit("script_finished", status=serve_error.code, detail=serve_error.message)
        raise serve_error
    if done is not None:
        status = str(done.get("status"))
        error = None
        if status == "error":
            error = dict(done.get("error") or {})
        elif status == "compile_error":
            error = {"errors": [str(e) for e in done.get("errors") or []]}
        emit(
            "script_finished",
            status=status,
            calls=len(calls),
            seconds=round(seconds, 3),
            paused_seconds=round(run.paused_seconds, 3),
            **totals,
        )
        return ScriptResult(
            status, output, calls, done.get("result"), bool(done.get("has_result")), error, **base
        )
    if timed_out:
        emit(
            "script_finished",
            status="timeout",
            calls=len(calls),
            seconds=round(seconds, 3),
            **totals,
        )
        message = f"the script ran past its {timeout:g} s timeout and was killed"
        return ScriptResult("timeout", output, calls, error={"message": message}, **base)
    if isinstance(serve_error, _wire.ProtocolError) and serve_error.reason != "closed":
        run.refuse(f"protocol_{serve_error.reason}", "runner", serve_error.message)
        emit("script_finished", status="bridge_failed", reason=serve_error.reason)
        raise ToolError(
            f"the script bridge refused a message and stopped the run: {serve_error.message}",
            reason=serve_error.reason,
        )
    sig = _signal_name(returncode)
    if sig is not None and report is not None:
        why = _KILL_REASONS.get(sig, f"it was killed by {sig}").format(cpu=cpu)
        emit(
            "script_finished",
            status="killed",
            signal=sig,
            calls=len(calls),
            seconds=round(seconds, 3),
            **totals,
        )
        error = {"message": f"the script was stopped: {why}", "signal": sig}
        return ScriptResult("killed", output, calls, error=error, **base)
    detail = _cut_bytes(diagnostics.strip(), 2000, tail=True)  # redacted already
    stage = "before running the script" if report is None else "without reporting an outcome"
    emit("script_finished", status="failed", returncode=returncode, detail=detail)
    raise ToolError(
        f"the script runner exited with code {returncode} {stage}"
        + (f": {detail}" if detail else ""),
        returncode=returncode,
    )
