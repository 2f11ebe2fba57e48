"""Launching the script runner: the :class:`Launcher` protocol and the local launcher.

A launcher turns a :class:`LaunchRequest` (the runner's config, the run's
secret, the listener to connect to, the environment) into a started
:class:`ChildProcess`. :class:`LocalLauncher` starts the runner on this host
through :mod:`ringfence._proc` (its own session; a cgroup per runner where
cgroup v2 is writable, else its process group and live descendants), with the
secret on an inherited pipe, never argv or the environment. The Docker
backend's launcher is :mod:`ringfence.bridge._docker`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

from .. import _proc
from .._confine.boot import argv as boot_argv
from ..runtime import RingfenceError, Unavailable
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
]

RUNNER_PATH = Path(__file__).with_name("_runner.py")
RUNNER_MODULE = f"{__package__}._runner"  # started by ringfence._confine.boot
# Environment variables a child inherits (values from the host); everything else is dropped.
ENV_PASSTHROUGH = ("TZ",)
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
CHILD_EXIT_SECONDS = 5.0  # how long a killed child may take to be seen gone


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

    def __init__(self, process: _proc.Process) -> None:
        self.process = process
        self.pid: int | None = process.pid
        self.stdout = trio.lowlevel.FdStream(process.stdout)
        self.stderr = trio.lowlevel.FdStream(process.stderr)

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


@dataclass(frozen=True)
class LaunchRequest:
    """What a launcher needs to start one runner."""

    config: dict[str, Any]  # the runner's JSON config, without ``connect``/``secret_fd``
    secret: bytes
    listener: BridgeListener
    env: Mapping[str, str]


class Launcher(Protocol):
    """Starts runners for :func:`~ringfence.bridge.run_script`; chosen by the operator.

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
    socket_owner: tuple[int, int] | None = None  # None: decided from the sandbox config

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
        self._spare: tuple[LocalChild, int] | None = None
        self._closed = False

    def runner_argv(self, boot_json: str) -> list[str]:
        return [*self.wrapper, self.python, *boot_argv(RUNNER_MODULE, RUNNER_PATH), boot_json]

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
        # The first use probes the process tracking (blocking, a few ms): not on the trio thread.
        await trio.to_thread.run_sync(_proc.tracking)
        spare, self._spare = self._spare, None
        if spare is not None and spare[0].process.leader_exited():
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

    def _spawn(self, env: Mapping[str, str]) -> tuple[LocalChild, int]:
        """Start a runner (on this thread: see the class docstring); it and its secret pipe."""
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
                )
            except (_proc.ExecFailed, RingfenceError) as exc:
                raise Unavailable(
                    f"could not start the script runner ({argv[0]}): {exc.message.strip()}",
                    field="python",
                ) from None
            on_failure.pop_all()
        if process.stdin is not None:
            w = process.stdin
        return LocalChild(process), w

    async def aclose(self) -> None:
        """End the spare runner, if any. Idempotent."""
        self._closed = True
        spare, self._spare = self._spare, None
        if spare is not None:
            await _discard(spare)


async def _discard(spare: tuple[LocalChild, int]) -> None:
    child, w = spare
    os.close(w)
    await child.aclose()


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
