"""Scripts on a remote Docker engine: the bridge carried over the exec's own stream.

A remote engine (``tcp://`` with TLS, or any engine the workspace is shipped
to) shares no file system with this host: no socket can be bind-mounted into
the container, and no port is opened for the runner to call back (neither on
the engine's host nor here). Instead the runner is started behind a relay
(:mod:`._relay`) by one ``docker exec`` whose attached stdin and stdout, the
hijacked stream of the Docker API connection this host already has (our own
verified TLS connection to a TLS engine, :func:`..backends.docker._tls.attach_tls`),
carry the bridge's bytes, the runner's stdout and its exit status, each in a
small frame (:data:`._relay.HEADER`). Docker's stream 2 is the runner's stderr.

Here, :class:`RelayChild` connects to the run's usual listener (a 0600 Unix
socket in a 0700 directory of this host, owned by this process's uid) and moves
bytes between that connection and the stream: the host side of the bridge is
unchanged (the same admission and HMAC handshake, every frame authenticated,
sequenced and size- and depth-checked, each call one gated ``Kernel.invoke``),
so neither the relay nor the stream is trusted with anything but bytes.

Files: the runner's package directories (``bridge/``, ``_confine/``) and
RestrictedPython are shipped once per container, as one gzip tar on the stdin
of a root exec of the image's ``python3`` that extracts them into the
session's root-owned tmpfs (:attr:`DockerSession.shipped_files_dir`):
``put_archive`` cannot write into a tmpfs, and a volume the container user can
write would let a command change the runner. Read-only for every command and
for the runner (they run as other uids; no capabilities). On a TLS engine that
shares our files (``ship = "never"``), the bind-mounted copies are used.

Killing: there is no host pid to signal. :meth:`RelayChild.kill` sends a
``KILL`` frame (the relay SIGKILLs the runner's session); a host that is gone
closes the connection, the relay reads end of file and does the same, and the
runner's parent-death signal is the relay. Warm runs: as on a local engine, the
next run's relay and runner are started when a run's runner is closed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import socket as stdsocket
import struct
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from .. import _confine
from .._confine.boot import argv as boot_argv
from ..runtime._errors import Unavailable
from ._docker import LIB_MOUNT, PACKAGE_MOUNT, runner_ids
from ._launch import RUNNER_MODULE, RUNNER_PATH, LaunchRequest
from ._relay import ACTIVATE, BRIDGE, EXIT, HEADER, KILL, OUT

__all__ = ["RELAY_MODULE", "RelayChild", "RemoteScriptLauncher", "runner_files_tar"]

RELAY_MODULE = f"{__package__}._relay"
_DOCKER_FRAME = struct.Struct(">BxxxL")
DRAIN_SECONDS = 5.0  # how long a closed run's stream is read for its end (Engine 20.10 hangs)
# The largest frame read from the stream, Docker's or the relay's: the relay writes at most
# 64 KiB a frame and Docker's are smaller; a larger announcement (a hostile engine or relay)
# would have the host buffer up to 4 GiB for it, so it ends the run instead.
MAX_FRAME = 1 << 20

# Run by root in the container: read the tar (its length in argv[1]) from stdin, extract it.
_EXTRACT = """\
import io, sys, tarfile
n = int(sys.argv[1]); data = b""
while len(data) < n:
    chunk = sys.stdin.buffer.read1(n - len(data))
    if not chunk:
        sys.exit("ringfence: the runner's files arrived short")
    data += chunk
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
    t.extractall(sys.argv[2], **kw)
"""


@functools.cache
def runner_files_tar() -> bytes:
    """The runner's files as a gzip tar: ``package/bridge``, ``package/_confine``, ``lib/…``.

    Sources only (no bytecode caches), owned by root, files 0644, directories 0755.
    """
    import RestrictedPython

    restricted = Path(RestrictedPython.__file__).resolve().parent
    trees = [
        (RUNNER_PATH.parent, "package/bridge"),
        (Path(_confine.__file__).parent, "package/_confine"),
        (restricted, "lib/RestrictedPython"),
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        made: set[str] = set()
        for source, target in trees:
            for path in sorted(source.rglob("*.py")):
                rel = path.relative_to(source)
                if "__pycache__" in rel.parts:
                    continue
                name = f"{target}/{rel.as_posix()}"
                parts = name.split("/")
                for i in range(1, len(parts)):
                    directory = "/".join(parts[:i])
                    if directory not in made:
                        made.add(directory)
                        info = tarfile.TarInfo(directory)
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(info)
                data = path.read_bytes()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class RemoteScriptLauncher:
    """Runs the script runner in ``session``'s container on a remote (or TLS) engine."""

    name = "docker-remote"
    transport: str | None = "unix"  # the host's end: a private Unix listener, this uid only
    peer_is_child = False  # the peer is this process's own relay task
    bridge_parent: Path | None

    def __init__(self, session: Any, bridge_dir: Path | None, python: str = "python3") -> None:
        self.session = session
        self.bridge_parent = bridge_dir
        self.python = python
        self.socket_owner = (os.geteuid(), os.getegid())
        self.runner_user = "{}:{}".format(*runner_ids(session.user))
        self._ready_for: str | None = None  # the container the files were shipped to
        self._spare: tuple[str | None, RelayChild] | None = None
        self._closed = False

    def _root(self) -> str:
        return self.session.shipped_files_dir or "/opt/ringfence"

    def _paths(self) -> tuple[str, str]:
        """The runner's package root and RestrictedPython's parent in the container."""
        if self.session.shipped_files_dir is None:  # bind-mounted (a TLS engine sharing files)
            return PACKAGE_MOUNT, LIB_MOUNT
        return f"{self._root()}/package", f"{self._root()}/lib"

    async def _prepare(self, env: dict[str, str]) -> None:
        """Ship the runner's files (once per container) and check ``python3`` is there."""
        container = self.session.container_id
        if self._ready_for == container:
            return
        tar = runner_files_tar()
        if self.session.shipped_files_dir is None:
            argv, user, data = [self.python, "-I", "-S", "-c", "pass"], self.runner_user, b""
        else:
            argv = [self.python, "-I", "-S", "-c", _EXTRACT, str(len(tar)), self._root()]
            user, data = "0:0", tar
        exec_id, sock = await self.session.exec_attached(argv, user=user, env=env)
        child = RelayChild(self.session, exec_id, sock)
        err = bytearray()
        try:
            with trio.move_on_after(60):
                await _send_all(sock, data)
                await child.drain(err.extend)
        finally:
            await child.aclose()
        code = await _exit_code(self.session, exec_id)
        if code != 0:
            detail = bytes(err).decode(errors="replace").strip()[-500:]
            raise Unavailable(
                f"run_tool_script on engine {self.session.engine.name} needs {self.python} in "
                f"the session's image, and it did not start there or could not take the "
                f"runner's files (exit {code}{': ' + detail if detail else ''}); use the debian "
                "image (`ringfence images build debian`, option image=debian)",
                field="image",
            )
        self._ready_for = container

    def _argv(self, env: dict[str, str]) -> list[str]:
        package, lib = self._paths()
        relay = f"{package}/bridge/_relay.py"
        runner = f"{package}/bridge/{RUNNER_PATH.name}"
        spec = {"runner": boot_argv(RUNNER_MODULE, runner), "sys_path": [lib], "env": env}
        return [self.python, *boot_argv(RELAY_MODULE, relay), _json(spec)]

    async def _start(self, env: dict[str, str]) -> RelayChild:
        exec_id, sock = await self.session.exec_attached(
            self._argv(env), user=self.runner_user, env=env
        )
        return RelayChild(self.session, exec_id, sock)

    async def launch(self, request: LaunchRequest) -> RelayChild:
        env = dict(request.env)
        await self._prepare(env)
        spare, self._spare = self._spare, None
        address = request.listener.address
        assert address[0] == "unix", "the remote launcher's host end is a Unix listener"
        config = {**request.config, "connect": None}  # the relay fills in its socket
        activation = request.secret + _json(config).encode()
        child: RelayChild | None = None
        if spare is not None and spare[0] == self.session.container_id:
            child = spare[1]
            try:
                await child.send(ACTIVATE, activation)
            except _STREAM_ERRORS:  # the spare's stream is gone: a fresh one below
                await child.aclose()
                child = None
        elif spare is not None:  # a new container: the old one's spare is gone with it
            await spare[1].aclose()
        try:
            if child is None:
                child = await self._start(env)
                await child.send(ACTIVATE, activation)
            await child.connect(address[1])
        except _STREAM_ERRORS as exc:
            if child is not None:
                await child.aclose()
            raise Unavailable(
                f"run_tool_script on engine {self.session.engine.name}: the runner's stream "
                f"to the container broke before the run started ({type(exc).__name__}: {exc})",
                field="backend",
            ) from None
        except BaseException:
            if child is not None:
                await child.aclose()
            raise
        if not self._closed:  # the next run's relay and runner, once this one is closed
            child.on_close = lambda: (
                self._closed or trio.lowlevel.spawn_system_task(self._start_spare, env)
            )
        return child

    async def _start_spare(self, env: dict[str, str]) -> None:
        """The next run's relay and runner, started now (a system task: it must never raise)."""
        container = self.session.container_id
        try:
            child = await self._start(env)
        except Exception:  # the next run starts its own and says why
            return
        if self._closed or self._spare is not None:
            await child.aclose()
        else:
            self._spare = (container, child)

    async def aclose(self) -> None:
        """End the spare relay and runner, if any. Idempotent."""
        self._closed = True
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare[1].aclose()


class RelayChild:
    """The runner behind its relay: one exec stream carrying the bridge, stdout and the status.

    :meth:`pump` moves the bridge's bytes between the stream and the host's
    connection to the run's listener (:meth:`connect`), and feeds the runner's
    stdout and stderr to the capture. ``pid`` is None: nothing of this host
    can signal it (:meth:`kill` asks the relay).
    """

    def __init__(self, session: Any, exec_id: str, sock: Any) -> None:
        self.session = session
        self.exec_id = exec_id
        self.sock = sock  # a trio socket, or ..backends.docker._tls.TLSStreamSocket
        self.pid: int | None = None
        self.on_close: Callable[[], object] | None = None
        self._host: stdsocket.socket | None = None  # our connection to the run's listener
        self._send_lock = trio.Lock()
        self._kill = trio.Event()
        self._eof = trio.Event()
        self._code: int | None = None
        self._buf = b""  # Docker's frames not yet whole
        self._ours = b""  # the relay's frames (stream 1) not yet whole
        self._overlong = False  # a frame over MAX_FRAME was announced: the stream is done
        self._closed = False

    async def send(self, kind: int, payload: bytes) -> None:
        async with self._send_lock:
            await _send_all(self.sock, HEADER.pack(kind, len(payload)) + payload)

    async def connect(self, path: str) -> None:
        host = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
        try:
            host.setblocking(False)
            host.connect(path)  # a listening Unix socket: at once, or EAGAIN when its queue is full
        except BlockingIOError:
            await trio.lowlevel.wait_writable(host)
        except BaseException:
            host.close()
            raise
        self._host = host

    async def drain(
        self,
        err: Callable[[bytes], None],
        out: Callable[[bytes], None] | None = None,
    ) -> None:
        """Read the stream to its end: the relay's frames dispatched, stream 2 to ``err``."""
        try:
            while not self._overlong and (data := await self.sock.recv(65536)):
                self._buf += data
                while len(self._buf) >= _DOCKER_FRAME.size:
                    kind, size = _DOCKER_FRAME.unpack_from(self._buf)
                    if size > MAX_FRAME:
                        self._stop_overlong("the engine's stream", size, err)
                        break
                    if len(self._buf) < _DOCKER_FRAME.size + size:
                        break
                    payload = self._buf[_DOCKER_FRAME.size : _DOCKER_FRAME.size + size]
                    self._buf = self._buf[_DOCKER_FRAME.size + size :]
                    if kind == 2:
                        err(payload)
                    else:
                        await self._relay_frames(payload, out, err)
                    if self._overlong:
                        break
        except (OSError, trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        finally:
            self._eof.set()

    async def _relay_frames(
        self, data: bytes, out: Callable[[bytes], None] | None, err: Callable[[bytes], None]
    ) -> None:
        self._ours += data
        while len(self._ours) >= HEADER.size:
            kind, size = HEADER.unpack_from(self._ours)
            if size > MAX_FRAME:
                self._stop_overlong("the relay", size, err)
                return
            if len(self._ours) < HEADER.size + size:
                return
            payload = self._ours[HEADER.size : HEADER.size + size]
            self._ours = self._ours[HEADER.size + size :]
            if kind == BRIDGE and self._host is not None:
                await _host_send(self._host, payload)
            elif kind == OUT and out is not None:
                out(payload)
            elif kind == EXIT:
                with contextlib.suppress(ValueError):
                    self._code = int(payload)

    def _stop_overlong(self, who: str, size: int, err: Callable[[bytes], None]) -> None:
        """A frame announced over :data:`MAX_FRAME`: nothing more is read, the runner is
        killed, and the run's stderr says why."""
        self._overlong = True
        self._buf = self._ours = b""
        self._code = 1 if self._code is None else self._code  # no exec status to wait for
        self._kill.set()
        err(
            f"ringfence: {who} announced a frame of {size} bytes, over the limit of "
            f"{MAX_FRAME} (MAX_FRAME); the run was stopped\n".encode()
        )

    async def _to_runner(self) -> None:
        """The host's bridge bytes to the relay; the host's end closing kills the runner."""
        host = self._host
        if host is not None:
            with contextlib.suppress(OSError, trio.ClosedResourceError):
                while True:
                    try:
                        data = host.recv(65536)
                    except BlockingIOError:
                        await trio.lowlevel.wait_readable(host)
                        continue
                    if not data:
                        break
                    await self.send(BRIDGE, data)
        self._kill.set()  # like a local runner's watchdog: the bridge closed, the run is over

    async def _killer(self) -> None:
        await self._kill.wait()
        with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            await self.send(KILL, b"")

    async def pump(self, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._to_runner)
            nursery.start_soon(self._killer)
            await self.drain(err, out)
            nursery.cancel_scope.cancel()

    async def wait(self) -> int:
        await self._eof.wait()
        if self._code is None:  # the relay itself failed: its exec's status
            code = await _exit_code(self.session, self.exec_id)
            code = 1 if code is None else code
            self._code = -(code - 128) if 128 < code < 128 + 65 else code
        return self._code

    def kill(self) -> None:
        """Ask the relay to SIGKILL the runner (sent by :meth:`pump`, or :meth:`aclose`)."""
        self._kill.set()

    async def aclose(self) -> None:
        """Kill the runner, read the stream to its end (bounded), close everything. Shielded."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            if not self._eof.is_set():
                with contextlib.suppress(
                    OSError,
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    trio.BusyResourceError,
                ):
                    with trio.move_on_after(DRAIN_SECONDS):
                        await self.send(KILL, b"")
                with trio.move_on_after(DRAIN_SECONDS):  # Engine 20.10: never leave it unread
                    await self.drain(lambda _b: None)
            with contextlib.suppress(OSError):
                self.sock.close()
            if self._host is not None:
                with contextlib.suppress(OSError):
                    trio.lowlevel.notify_closing(self._host)
                    self._host.close()
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()


_STREAM_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


async def _exit_code(session: Any, exec_id: str) -> int | None:
    """An ended exec's exit code (its stream ends a moment before it is marked done)."""
    info: dict[str, Any] = {}
    pause = 0.002
    for _ in range(100):
        info = await session.exec_info(exec_id)
        if not info.get("Running"):
            break
        await trio.sleep(pause)
        pause = min(pause * 2, 0.05)
    code = info.get("ExitCode")
    return None if code is None else int(code)


async def _send_all(sock: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[await sock.send(view) :]


async def _host_send(host: stdsocket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[host.send(view) :]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(host)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
