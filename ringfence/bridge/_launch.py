"""Launching the script runner: the :class:`Launcher` protocol and the local launcher.

A launcher turns a :class:`LaunchRequest` (the runner's config, the run's
secret, the listener to connect to, the environment) into a started
:class:`ChildProcess`. :class:`LocalLauncher` starts the runner on this host
through :mod:`ringfence._proc` (its own session; a cgroup per runner where
cgroup v2 is writable, else its process group and live descendants), with the
secret on an inherited pipe, never argv or the environment, and keeps a pool
of *warm* runners (interpreter started, imports done, waiting on that pipe),
refilled in the background. The Docker backend's launcher is
:mod:`ringfence.bridge._docker`.

Runners are started by one long-lived thread (:class:`_Spawner`), not the trio
thread: a start blocks for milliseconds (fork, exec, the cgroup move), which
would stall every task of the kernel, and the runner's ``PR_SET_PDEATHSIG``
fires when the *thread* that forked it exits, so that thread must outlive
every runner it started (trio's worker threads retire when idle).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import trio

from .. import _proc
from .._confine.boot import argv as boot_argv
from .._confine.cgroup import cgroup2_mount
from ..runtime._errors import RingfenceError, Unavailable
from ._channel import BridgeListener

__all__ = [
    "BASE_ENV",
    "CHILD_EXIT_SECONDS",
    "ENV_PASSTHROUGH",
    "RUNNER_MODULE",
    "RUNNER_PATH",
    "ChildProcess",
    "LaunchRequest",
    "Launcher",
    "LocalChild",
    "LocalLauncher",
    "child_env",
    "default_warm_runners",
]

RUNNER_PATH = Path(__file__).with_name("_runner.py")
RUNNER_MODULE = f"{__package__}._runner"  # started by ringfence._confine.boot
# Environment variables a child inherits (values from the host); everything else is dropped.
ENV_PASSTHROUGH = ("TZ",)
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
CHILD_EXIT_SECONDS = 5.0  # how long a killed child may take to be seen gone
# After a run that had to start a fresh interpreter, the pool is refilled only once no
# run has been launched for this long: that run's own start-up (imports) is not slowed by
# interpreters starting beside it. After a run that took a warm runner, at once.
REFILL_QUIET_SECONDS = 0.2
# While runs are going on, the pool is refilled only once none has started or ended for
# this long: a start would take the interpreter's lock (and a core) from the runs.
REFILL_BUSY_SECONDS = 1.0
WARM_RUNNERS_CAP = 8

T = TypeVar("T")


def default_warm_runners() -> int:
    """One warm runner per core this process may run on, at most :data:`WARM_RUNNERS_CAP`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(WARM_RUNNERS_CAP, cores))


class _Spawner:
    """The one thread that starts runners for every :class:`LocalLauncher` of this process.

    It lives as long as the process (a daemon thread, started on first use),
    so no runner's parent-death signal fires early. :meth:`run` waits for
    its job shielded: a runner started for a cancelled caller is still
    handed back (and ended by it), never left running unseen.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            self._jobs.get()()

    async def run(self, fn: Callable[[], T]) -> T:
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: dict[str, Any] = {}

        def job() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed back to the caller, raised there
                box["error"] = exc
            finally:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(done.set)

        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="ringfence script runner spawner", daemon=True
                )
                self._thread.start()
        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]


_SPAWNER = _Spawner()


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


class LocalChild:
    """A runner on this host: a :class:`ringfence._proc.Process` and its tree."""

    def __init__(self, process: _proc.Process, on_closed: Callable[[], None] | None = None) -> None:
        self.process = process
        self.pid: int | None = process.pid
        self.stdout = trio.lowlevel.FdStream(process.stdout)
        self.stderr = trio.lowlevel.FdStream(process.stderr)
        self._on_closed = on_closed  # the launcher's: this run is over (refill the pool now)

    async def pump(self, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, self.stdout, out)
            nursery.start_soon(_drain, self.stderr, err)

    async def wait(self) -> int:
        await self.process.wait_leader()
        code = self.process.exit_code_when_done()
        assert code is not None  # the leader exited
        return code

    def kill(self) -> None:
        """SIGKILL the child's whole tree (its cgroup, else its process group); immediate."""
        self.process.kill_rest_now()

    async def aclose(self) -> None:
        """Kill the tree, wait until it is gone, reap the leader, close the pipes. Shielded."""
        with trio.CancelScope(shield=True):
            self.process.kill_rest_now()
            with trio.move_on_after(CHILD_EXIT_SECONDS):
                await self.process.wait_leader()
            await self.process.kill_rest()  # the run-id hunt too, where there is no cgroup
            self.process.close()
            await self.stdout.aclose()
            await self.stderr.aclose()
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed()


@dataclass(frozen=True)
class LaunchRequest:
    """What a launcher needs to start one runner."""

    config: dict[str, Any]  # the runner's JSON config, without ``connect``/``secret_fd``
    secret: bytes
    listener: BridgeListener
    env: Mapping[str, str]


class Launcher(Protocol):
    """Starts runners for :func:`~ringfence.bridge._host.run_script`; chosen by the operator.

    ``name`` goes into the ``script_started`` event. ``transport``: the
    transport this launcher needs (``"unix"``), or None for the configured
    one. ``bridge_parent``: where a Unix listener's private directory is made
    (None: the system's temporary directory). ``peer_is_child``: whether a
    Unix peer's pid (SO_PEERCRED) must be the launched child or below it
    (False where the child's pid is in another namespace). ``socket_owner``:
    the uid/gid the listener is handed to (None: decided from the sandbox
    config). :meth:`launch` starts one runner or raises ``Unavailable``.
    """

    name: str
    transport: str | None
    bridge_parent: Path | None
    peer_is_child: bool
    socket_owner: tuple[int, int] | None

    async def launch(self, request: LaunchRequest) -> ChildProcess: ...


class LocalLauncher:
    """Starts the runner as a subprocess of this process, from the spawner thread.

    The secret and the run's config go through a pipe the child inherits
    (``pass_fds``), or, with ``secret_on_stdin``, through its stdin (for a
    wrapper such as a container runtime that does not pass descriptors on).
    With ``warm=n`` the launcher keeps up to ``n`` runners started ahead of
    need: each has done its imports and waits on its pipe, so a run skips
    interpreter start-up; a run takes one and the pool is refilled in the
    background when that run is over, one runner at a time, and while other
    runs go on only once none has started or ended for
    :data:`REFILL_BUSY_SECONDS` (after a run that started a fresh interpreter,
    once launches pause: :data:`REFILL_QUIET_SECONDS`). A warm
    runner is generic: it learns its run (secret, sandbox, limits) only when
    taken, and serves exactly one run. :meth:`aclose` ends the pool (the
    kernel does, when it closes). ``wrapper`` is a command the runner's argv
    is appended to; with ``track_parent=False`` the runner does not require
    this process to be its parent and relies on its bridge watchdog.
    Subclasses adapt paths for another filesystem view (:meth:`runner_argv`,
    :meth:`connect_address`, :meth:`sys_path`).
    """

    name = "local"
    transport: str | None = None  # None: the configured one
    bridge_parent: Path | None = None  # where a Unix listener's private directory is made
    peer_is_child = True  # a Unix peer's pid (SO_PEERCRED) must be the child's
    socket_owner: tuple[int, int] | None = None  # None: decided from the sandbox config

    def __init__(
        self,
        python: str | None = None,
        *,
        wrapper: Sequence[str] = (),
        track_parent: bool = True,
        secret_on_stdin: bool = False,
        warm: int = 0,
    ) -> None:
        self.python = python or sys.executable
        self.wrapper = list(wrapper)
        self.track_parent = track_parent
        self.secret_on_stdin = secret_on_stdin
        self.warm = warm
        self._ready: deque[tuple[LocalChild, int]] = deque()
        self._closed = False
        self._env: Mapping[str, str] | None = None
        self._refill_after = 0.0  # trio time before which the pool is not refilled
        self._active = 0  # runs launched and not yet over
        self._last_change = 0.0  # trio time a run last started or ended
        self._refill_wanted: trio.Event | None = None
        self._refill_scope: trio.CancelScope | None = None
        self._refill_done: trio.Event | None = None
        # Why the pool last failed to refill (the next launch starts its own runner and says).
        self.refill_error: Exception | None = None

    @property
    def ready(self) -> int:
        """How many warm runners are waiting now."""
        return len(self._ready)

    def runner_argv(self, boot_json: str) -> list[str]:
        return [*self.wrapper, self.python, *boot_argv(RUNNER_MODULE, RUNNER_PATH), boot_json]

    def connect_address(self, listener: BridgeListener) -> list[Any]:
        return listener.address

    def sys_path(self) -> list[str]:
        import RestrictedPython

        return [str(Path(RestrictedPython.__file__).resolve().parent.parent)]

    async def launch(self, request: LaunchRequest) -> ChildProcess:
        """Start (or take a warm) runner for one run; raises Unavailable if it cannot start."""
        if not hasattr(os, "pidfd_open"):
            raise Unavailable(
                "run_tool_script's local runner needs Linux >= 5.3 (pidfd_open, PR_SET_PDEATHSIG)",
                field="platform",
            )
        if self._closed:
            raise Unavailable("the script launcher is closed (its kernel closed)", field="launcher")
        run_config = {**request.config, "connect": self.connect_address(request.listener)}
        self._env = request.env
        taken = None
        while self._ready:
            candidate = self._ready.popleft()
            if not candidate[0].process.leader_exited():
                taken = candidate
                break
            await _discard(candidate)  # a warm runner that died is replaced, not used
        if taken is None:  # a fresh runner, its activation written as soon as it exists
            self._refill_after = trio.current_time() + REFILL_QUIET_SECONDS
            start = partial(self._start, request.env, (request.secret, run_config))
            process, _ = await _SPAWNER.run(start)
            child: LocalChild = LocalChild(process)
        else:
            child, w = taken
            _activate(w, self._activation(child.process, request.secret, run_config))
        # Refilled when this run is over: a start holds the interpreter's lock for a few
        # milliseconds (fork, exec, the cgroup move), which would land on this run.
        self._active += 1
        self._last_change = trio.current_time()
        child._on_closed = self._run_over
        return child

    def _run_over(self) -> None:
        self._active -= 1
        self._last_change = trio.current_time()
        if self.warm:
            self._want_refill()

    def _want_refill(self) -> None:
        if self._closed:
            return
        if self._refill_wanted is None:
            self._refill_wanted = trio.Event()
            self._refill_done = trio.Event()
            self._refill_scope = trio.CancelScope()
            trio.lowlevel.spawn_system_task(
                self._refill, self._refill_scope, name="ringfence warm script runners"
            )
        self._refill_wanted.set()

    async def _refill(self, scope: trio.CancelScope) -> None:
        """Keep :attr:`warm` runners ready; ends when the launcher closes. Never raises.

        A runner that cannot be started stops the refilling until the next
        launch, which starts its own runner and says why if it cannot.
        """
        assert self._refill_done is not None
        try:
            with scope:
                while not self._closed:
                    assert self._refill_wanted is not None
                    await self._refill_wanted.wait()
                    self._refill_wanted = trio.Event()
                    while not self._closed and len(self._ready) < self.warm:
                        now = trio.current_time()
                        quiet = self._refill_after - now
                        if self._active:  # runs going on: wait until they pause
                            quiet = max(quiet, self._last_change + REFILL_BUSY_SECONDS - now)
                        if quiet > 0:
                            await trio.sleep(quiet)
                            continue
                        env = self._env if self._env is not None else child_env()
                        try:
                            process, w = await _SPAWNER.run(partial(self._start, env))
                        except Exception as exc:
                            self.refill_error = exc
                            break
                        spare = (LocalChild(process), w)
                        if self._closed:
                            with trio.CancelScope(shield=True):
                                await _discard(spare)
                            break
                        self._ready.append(spare)
        finally:
            self._refill_done.set()

    def _activation(
        self, process: _proc.Process, secret: bytes, run_config: dict[str, Any]
    ) -> bytes:
        """A runner's activation: the secret, then its run's config.

        The config names the cgroup the runner must find itself in
        (``/proc/self/cgroup``) before it does anything for the run: a second
        check of the move :func:`ringfence._proc.spawn` made before it
        returned (the runner starts before the move, see :meth:`_start`).
        Only for a runner this launcher starts itself (:meth:`_runs_directly`).
        """
        if process.cgroup is not None and self._runs_directly():
            view = _cgroup_view(process.cgroup)
            if view is not None:
                run_config = {**run_config, "cgroup": view}
        return secret + _json(run_config).encode()

    def _runs_directly(self) -> bool:
        """Whether the process started is the runner itself, in this host's view (its
        interpreter, no ``wrapper``): not a program that starts it elsewhere (a container)."""
        return not self.wrapper and self.runner_argv("{}")[0] == self.python

    def _start(
        self, env: Mapping[str, str], run: tuple[bytes, dict[str, Any]] | None = None
    ) -> tuple[_proc.Process, int]:
        """Start a runner (in the spawner thread: see the module docstring); it and its pipe.

        With ``run`` (the secret and the run's config) the runner is activated
        at once (the pipe is then closed: -1 comes back); without, it is a
        spare that waits for its activation. Raises Unavailable (naming the
        interpreter) when it cannot start.

        The runner holds itself (``_proc.spawn(holds_itself=True)``): its
        interpreter starts and imports while it is moved into its cgroup,
        and it reads, connects to and runs nothing of a run before its
        activation, which is written only after :func:`ringfence._proc.spawn`
        returned, so with the move done. Another program first (a
        ``wrapper``, a subclass's container runtime), which could start
        processes before the move, goes through the gate instead.
        """
        with contextlib.ExitStack() as always, contextlib.ExitStack() as on_failure:
            r, w = 0, -1  # secret_on_stdin: _proc's pipe, the runner's stdin after the gate
            if not self.secret_on_stdin:
                r, w = os.pipe()
                always.callback(os.close, r)  # the child has its own copy once it runs
                on_failure.callback(os.close, w)
            boot = {
                "secret_fd": r,
                "parent_pid": os.getpid() if self.track_parent else 0,
                "sys_path": self.sys_path(),
                "spare": run is None,
            }
            argv = self.runner_argv(_json(boot))
            try:
                process = _proc.spawn(
                    argv,
                    cwd=Path("/"),
                    env=env,
                    pass_fds=() if self.secret_on_stdin else (r,),
                    stdin_pipe=self.secret_on_stdin,
                    exact_env=True,  # the runner's environment is child_env(), nothing else
                    holds_itself=argv[0] == self.python and not self.wrapper,
                )
            except (_proc.ExecFailed, RingfenceError) as exc:
                raise Unavailable(
                    f"could not start the script runner ({argv[0]}): {exc.message.strip()}",
                    field="python",
                ) from None
            on_failure.pop_all()
        if process.stdin is not None:
            w = process.stdin
        if run is None:
            return process, w
        try:
            _activate(w, self._activation(process, *run))
        except OSError:
            process.kill_rest_now()  # its run says why: the runner ends without a bridge
        return process, -1

    async def aclose(self) -> None:
        """End the warm runners and stop refilling. Idempotent."""
        self._closed = True
        with trio.CancelScope(shield=True):
            if self._refill_scope is not None:
                self._refill_scope.cancel()
            if self._refill_done is not None:
                with trio.move_on_after(CHILD_EXIT_SECONDS * 2):
                    await self._refill_done.wait()
            while self._ready:
                await _discard(self._ready.popleft())


def _activate(w: int, activation: bytes) -> None:
    """Write a runner's activation (secret, then its run's config) and close the pipe."""
    try:
        view = memoryview(activation)
        while view:
            view = view[os.write(w, view) :]
    finally:
        os.close(w)


async def _discard(spare: tuple[LocalChild, int]) -> None:
    child, w = spare
    os.close(w)
    await child.aclose()


_MOUNT: list[str | None] = []


def _cgroup_view(path: Path) -> str | None:
    """``path`` as ``/proc/self/cgroup`` shows it (below the cgroup2 mount), or None."""
    if not _MOUNT:
        _MOUNT.append(cgroup2_mount())
    mount = _MOUNT[0]
    if mount is None:
        return None
    try:
        rel = path.relative_to(mount).as_posix()
    except ValueError:
        return None
    return "/" if rel == "." else "/" + rel


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def child_env() -> dict[str, str]:
    """The child's whole environment: a fixed base plus the allowlisted host variables."""
    env = dict(BASE_ENV)
    for name in ENV_PASSTHROUGH:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


async def _drain(stream: trio.abc.ReceiveStream, feed: Callable[[bytes], None]) -> None:
    try:
        while data := await stream.receive_some(65536):
            feed(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
