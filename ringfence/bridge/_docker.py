"""Scripts inside the Docker backend's session container, over a mounted Unix socket.

The session container is started by the backends package with four extra
bind mounts (:func:`bridge_mounts`): this package's directory and
:mod:`ringfence._confine`'s (read-only, below one package root: ``_runner.py``,
its siblings and the Linux primitives they import, started by
:mod:`ringfence._confine.boot`), RestrictedPython (read-only), and a per-kernel
bridge directory in which each run's listener makes its private ``0700``
directory with a ``0600`` socket. The runner is started with ``docker exec``
(not through the session's shell: that holds the session while a command runs,
and the script's own ``run_shell`` calls need it) as a uid that is *not* the
shell's (the shell kills every process of its uid after each command), with
the secret and the run's config on its stdin. Inside, the runner applies the
same layers as on the host (Landlock, seccomp, rlimits; it is not root there,
so there is nothing to drop), on top of the container's own hardening.

A killed host leaves no runner: the bridge socket closes and the runner's
watchdog exits. ``kill()`` sends SIGKILL to the exec's host pid (a local
daemon, a root host); where that cannot reach, closing the bridge does.

Warm runs: when a run's runner is closed, the launcher starts the next one in
the background (a system task), so it has started its interpreter and done its
imports, waiting on its stdin, when the next script comes: a run then costs no
``docker exec`` (~70 ms here) on its path, only the activation (the secret and
the config on that stdin). Not earlier: an exec starting while the run's own
runner exits held that exit's end of stream back by ~55 ms here (the engine
serialises them). A spare that died meanwhile is dropped and a fresh one
started. :meth:`DockerScriptLauncher.aclose` ends the spare.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import socket as stdsocket
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from .. import _confine
from .._confine.boot import argv as boot_argv
from ..runtime._errors import Unavailable
from ._launch import RUNNER_MODULE, RUNNER_PATH, LaunchRequest

__all__ = [
    "BRIDGE_MOUNT",
    "DockerScriptLauncher",
    "bridge_mounts",
    "make_bridge_dir",
    "remove_bridge_dir",
    "sweep_bridge_dirs",
]

PACKAGE_MOUNT = "/opt/ringfence/package"  # the runner's package root: bridge/, _confine/
LIB_MOUNT = "/opt/ringfence/lib"
BRIDGE_MOUNT = "/run/ringfence-bridge"
_FRAME = struct.Struct(">BxxxL")


BRIDGES_PREFIX = "ringfence-bridges-"
# In a kernel's bridge directory (never mounted): a file its process holds an exclusive
# flock on for as long as the directory is its; the kernel drops the lock when the process
# ends, however it ends, so a directory whose lock can be taken has no owner left.
_LOCK = "owner.lock"
_SOCKETS = "s"  # the subdirectory mounted in the container, where listeners are made
# This process's bridge directories: the lock's descriptor and the pid that made it (a
# forked child inherits the table, and its exit must not remove its parent's directory).
_HELD: dict[Path, tuple[int, int]] = {}


def make_bridge_dir() -> Path:
    """A fresh host directory for one kernel's listeners (0711: enter, not list).

    It is ``$TMPDIR/ringfence-bridges-*/s``; its parent (0700) holds the owner's lock, out of
    the container's reach. Making one first removes the bridge directories of this user whose
    owner is gone (:func:`sweep_bridge_dirs`): a killed kernel (SIGKILL, OOM) closes nothing,
    and before, its directory stayed in the temporary directory for good."""
    sweep_bridge_dirs()
    top = Path(tempfile.mkdtemp(prefix=BRIDGES_PREFIX))
    # Locked before it takes its name: no sweeper ever finds it free while its owner lives.
    temp = top / f"{_LOCK}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(temp, top / _LOCK)
        path = top / _SOCKETS
        path.mkdir()
        path.chmod(0o711)
    except BaseException:
        os.close(fd)
        shutil.rmtree(top, ignore_errors=True)
        raise
    _HELD[path] = (fd, os.getpid())
    return path


def remove_bridge_dir(path: Path) -> None:
    """Remove a bridge directory of :func:`make_bridge_dir` (idempotent), then its lock; in a
    forked child, nothing (the directory is its parent's)."""
    held = _HELD.get(path)
    if held is not None and held[1] != os.getpid():
        return
    top = (
        path.parent
        if path.name == _SOCKETS and path.parent.name.startswith(BRIDGES_PREFIX)
        else path
    )
    shutil.rmtree(top, ignore_errors=True)
    if held is not None:
        del _HELD[path]
        os.close(held[0])


def sweep_bridge_dirs(parent: Path | None = None) -> int:
    """Remove this user's bridge directories in ``parent`` (the temporary directory) whose
    owner is gone: their lock (:data:`_LOCK`) can be taken. One without a lock is left alone
    (being made this moment, or an older ringfence's). Returns how many were removed."""
    base = parent or Path(tempfile.gettempdir())
    mine = {p.parent for p in _HELD}
    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(BRIDGES_PREFIX) or Path(entry.path) in mine:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue  # another user's
            fd = os.open(
                Path(entry.path) / _LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            )
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its kernel lives
        else:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed


def bridge_mounts(bridge_dir: Path) -> list[tuple[Path, str, bool]]:
    """The ``(host, container, read_only)`` mounts a session container needs for scripts.

    Every one is read-only, the bridge directory too: the host makes the listeners'
    directories and sockets, and a runner only connects (a socket is connected to, not
    written, on a read-only mount). Before, the bridge directory was mounted writable, so
    where the container user owns it (ringfence not running as root: change sets force
    ringfence's own uid) a command wrote files into a host directory outside the roots,
    past the change set and undo, kept until the kernel closed (for ever if it was killed).
    """
    import RestrictedPython

    restricted = Path(RestrictedPython.__file__).resolve().parent
    return [
        (RUNNER_PATH.parent, f"{PACKAGE_MOUNT}/bridge", True),
        (Path(_confine.__file__).parent, f"{PACKAGE_MOUNT}/_confine", True),
        (restricted, f"{LIB_MOUNT}/RestrictedPython", True),
        (bridge_dir, BRIDGE_MOUNT, True),
    ]


def kill_in_container(pid: int, container_id: str | None) -> None:
    """SIGKILL ``pid`` only while it is a process of that container (its cgroup names it).

    The pid is the engine's word (``exec_inspect``), in the engine's pid namespace, which
    need not be ours: a daemon in another pid namespace (ringfence in a container with the
    host's socket), a socket forwarded from another machine, a proxy that lies. Before, this
    root process sent SIGKILL to whatever pid of its own that number was. A pidfd holds the
    process while its cgroup is read, so a pid reused meanwhile is not signalled either;
    where the check fails, closing the bridge ends the runner instead."""
    if not container_id:
        return
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone, or no pidfds here: not signalled
        return
    try:
        try:
            cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return
        if container_id not in cgroup:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)


def runner_ids(shell_user: str) -> tuple[int, int]:
    """A uid/gid for the runner that differs from the session shell's uid."""
    uid = int(str(shell_user).split(":")[0])
    other = 65534 if uid != 65534 else 65533
    return other, other


class DockerScriptLauncher:
    """Runs the script runner in ``session``'s container (a ``DockerSession``)."""

    name = "docker"
    transport: str | None = "unix"
    peer_is_child = False  # the peer's pid is in the container's namespace

    def __init__(self, session: Any, bridge_dir: Path, python: str = "python3") -> None:
        self.session = session
        self.bridge_parent = bridge_dir
        self.python = python
        self.socket_owner = runner_ids(session.user)
        self._checked = False
        self._spare: _ExecChild | None = None  # a runner started ahead of need
        self._closed = False

    async def _check_python(self, env: dict[str, str]) -> None:
        if self._checked:
            return
        child = await self._exec([self.python, "-I", "-S", "-c", "pass"], env)
        code = await _collect(child)
        if code != 0:
            raise Unavailable(
                f"run_tool_script needs {self.python} in the docker session's image and it "
                f"did not start there (exit {code}); use the debian image "
                "(`ringfence images build debian`, option image=debian)",
                field="image",
            )
        self._checked = True

    async def _exec(self, argv: list[str], env: dict[str, str]) -> _ExecChild:
        uid, gid = self.socket_owner
        exec_id, sock = await self.session.exec_attached(argv, user=f"{uid}:{gid}", env=env)
        child = _ExecChild(self.session, exec_id, sock)
        with contextlib.suppress(Exception):
            child.pid = (await self.session.exec_info(exec_id)).get("Pid") or None
        return child

    async def launch(self, request: LaunchRequest) -> _ExecChild:
        if os.geteuid() != 0:
            raise Unavailable(
                "run_tool_script under the docker backend hands the bridge socket to a uid in "
                "the container, which needs the host process to run as root",
                field="backend",
            )
        env = dict(request.env)
        await self._check_python(env)
        directory = request.listener.directory
        assert directory is not None, "the docker launcher needs the unix transport"
        config = {
            **request.config,
            "connect": ["unix", f"{BRIDGE_MOUNT}/{directory.name}/bridge.sock"],
        }
        spare, self._spare = self._spare, None
        if spare is not None and not spare.waiting():
            await spare.aclose()
            spare = None
        child = spare if spare is not None else await self._exec(self._argv(), env)
        try:
            data = memoryview(request.secret + _json(config).encode())
            while data:
                data = data[await child.sock.send(data) :]
            child.sock.shutdown(stdsocket.SHUT_WR)  # EOF on the runner's stdin
        except BaseException:
            await child.aclose()
            raise
        if not self._closed:  # the next run's runner, once this one is closed
            child.on_close = lambda: (
                self._closed or trio.lowlevel.spawn_system_task(self._start_spare, env)
            )
        return child

    def _argv(self) -> list[str]:
        boot = {"secret_fd": 0, "parent_pid": 0, "sys_path": [LIB_MOUNT]}
        runner = f"{PACKAGE_MOUNT}/bridge/{RUNNER_PATH.name}"
        return [self.python, *boot_argv(RUNNER_MODULE, runner), _json(boot)]

    async def _start_spare(self, env: dict[str, str]) -> None:
        """The next run's runner, started now (a system task: it must never raise)."""
        try:
            child = await self._exec(self._argv(), env)
        except Exception:  # the next run starts its own and says why
            return
        if self._closed or self._spare is not None:
            await child.aclose()
        else:
            self._spare = child

    async def aclose(self) -> None:
        """End the spare runner, if any. Idempotent."""
        self._closed = True
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare.aclose()


class _ExecChild:
    """A runner started with ``docker exec``: one socket, Docker's stream frames."""

    def __init__(self, session: Any, exec_id: str, sock: Any) -> None:
        self.session = session
        self.exec_id = exec_id
        self.sock = sock
        self.pid: int | None = None
        self._eof = trio.Event()
        self._code: int | None = None
        self.on_close: Callable[[], object] | None = None

    def waiting(self) -> bool:
        """Whether the runner is still there (a spare's stream has not ended; no blocking)."""
        try:
            ready = select.select([self.sock.fileno()], [], [], 0)[0]
        except (OSError, ValueError):
            return False
        return not ready  # a waiting runner writes nothing before its activation

    async def pump(self, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> None:
        buf = b""
        try:
            while data := await self.sock.recv(65536):
                buf += data
                while len(buf) >= _FRAME.size:
                    kind, size = _FRAME.unpack_from(buf)
                    if len(buf) < _FRAME.size + size:
                        break
                    payload = buf[_FRAME.size : _FRAME.size + size]
                    buf = buf[_FRAME.size + size :]
                    (err if kind == 2 else out)(payload)
        except OSError:
            pass
        finally:
            self._eof.set()

    async def wait(self) -> int:
        if self._code is not None:
            return self._code
        await self._eof.wait()
        info: dict[str, Any] = {}
        pause = 0.002
        for _ in range(200):  # the stream ends a moment before the exec is marked done
            info = await self.session.exec_info(self.exec_id)
            if not info.get("Running"):
                break
            await trio.sleep(pause)
            pause = min(pause * 2, 0.05)
        code = info.get("ExitCode")
        code = 1 if code is None else int(code)
        # 128+N is how a container reports death by signal N; the host convention is -N.
        self._code = -(code - 128) if 128 < code < 128 + 65 else code
        return self._code

    def kill(self) -> None:
        if self.pid and self._code is None:
            kill_in_container(self.pid, self.session.container_id)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            self.kill()
            self.sock.close()
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()


async def _collect(child: _ExecChild) -> int:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(child.pump, lambda _b: None, lambda _b: None)
        with trio.move_on_after(30):
            code = await child.wait()
            await child.aclose()
            return code
        nursery.cancel_scope.cancel()
    await child.aclose()
    return -1


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
