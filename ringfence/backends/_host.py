"""The ``host`` backend: commands run as child processes of the kernel, unconfined.

Not a sandbox: a command can do whatever the kernel's user can (read
``~/.ssh``, write anywhere that user can, reach the network, read the
kernel's environment through ``/proc``). It is what the ``local`` backend was
before it became confined (:mod:`.confined._session`), kept under an explicit name.
What it does guarantee is process hygiene and a clean environment:

- Every command is its own session and process group (``setsid``).
- Every process a command starts belongs to its *tree*, tracked by
  :mod:`ringfence._proc`: a cgroup v2 per command where the hierarchy is
  writable (membership survives ``setsid``, double-forking, closed
  descriptors and a scrubbed environment), else the process group plus
  every process still carrying the command's random ``RINGFENCE_RUN_ID``.
  :attr:`LocalSession.process_tracking` says which, and why.
- When the command's main process ends, the rest of its tree is killed:
  nothing a command starts outlives it.
- On timeout or cancellation the whole tree gets SIGTERM, then after the
  grace period SIGKILL.
- The environment is built from an allowlist (``PATH``, ``HOME``, ``LANG``,
  ``TERM``, the session's ``passthrough_env``) plus what the caller passes:
  nothing else of the kernel's environment reaches the command.

Non-guarantees: with cgroup tracking, a command allowed to write to the
cgroup hierarchy (root; the kernel's own user on a delegated subtree) can
move a process out of its cgroup; with the run-id fallback, a process that
both leaves the group *and* scrubs ``RINGFENCE_RUN_ID`` escapes the kill.
Use the docker backend when that matters.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from .. import _proc
from ..runtime._errors import InvalidArguments, Unavailable
from ._output import Capture, shell_result
from ._types import (
    Command,
    OutputCallback,
    SessionSpec,
    ShellResult,
    check_command,
    check_env,
    check_run_arguments,
)

__all__ = ["BASE_ENV_ALLOWLIST", "HostSession", "start_host"]

BASE_ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "TERM")
RUN_ID_VARIABLE = _proc.RUN_ID_VARIABLE
# After the main process exited and its group was killed, how long the output
# pipes may stay open (held by an escaped process) before the tree is hunted down.
_DRAIN_GRACE = 0.25
_READ_SIZE = 65536


async def start_host(spec: SessionSpec) -> HostSession:
    """Start a host (unconfined) session.

    Raises InvalidArguments for options it does not know, Unavailable where
    the OS lacks process descriptors (pidfd: Linux 5.3+), which the exit
    watch and the race-free group kill rely on. Probes the process tracking
    method on first use (a few ms, in a thread; see :func:`ringfence._proc.tracking`).
    """
    if not hasattr(os, "pidfd_open"):
        raise Unavailable("the host backend needs pidfd (Linux 5.3 or newer)")
    if spec.options:
        raise InvalidArguments(
            f"the host backend takes no options (got {sorted(spec.options)})", field="options"
        )
    tracking = await trio.to_thread.run_sync(_proc.tracking)
    return HostSession(spec, tracking)


class HostSession:
    """Commands as unconfined host child processes. See the module docstring for guarantees."""

    name = "host"

    def __init__(self, spec: SessionSpec, tracking: _proc.Tracking | None = None) -> None:
        self._spec = spec
        self._tracking = tracking or _proc.tracking()
        self._closed = False
        self._lock = trio.Lock()
        names = dict.fromkeys((*BASE_ENV_ALLOWLIST, *spec.passthrough_env))
        self._base_env = {n: os.environ[n] for n in names if n in os.environ}

    @property
    def metadata(self) -> dict[str, Any]:
        """For the ``backend_started`` event: this backend is unconfined, say so."""
        return {"confined": False, "sandbox": "none", "network": True, "unconfined": True}

    @property
    def process_tracking(self) -> dict[str, str]:
        """How command trees are tracked: ``{"method": "cgroup" | "run-id", "detail": …}``.

        ``run-id`` is the weaker fallback (cgroups not writable here); ``detail``
        says why. For events and ``ringfence doctor``.
        """
        return self._tracking.to_dict()

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self._base_env, **check_env(env)}

    async def aclose(self) -> None:
        # Commands never outlive run(), so there is nothing left to stop.
        self._closed = True

    async def run(
        self,
        command: Command,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> ShellResult:
        cmd = check_command(command)
        cwd = check_run_arguments(cwd, timeout, output_cap)
        child_env = self.environment(env)
        if not cwd.is_dir():
            raise InvalidArguments(f"cwd {cwd} is not a directory", field="cwd")
        if self._closed:
            raise trio.ClosedResourceError("the host backend session is closed")
        argv = [*self._spec.shell, cmd] if isinstance(cmd, str) else cmd
        async with self._lock:
            return await self._run(argv, cwd, child_env, timeout, output_cap, on_output, redact)

    async def _run(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None,
        redact: Callable[[str], str] | None,
    ) -> ShellResult:
        out = Capture("stdout", on_output)
        err = Capture("stderr", on_output)
        started = time.monotonic()
        try:
            proc = _proc.spawn(argv, cwd=cwd, env=env, _tracking=self._tracking)
        except _proc.ExecFailed as exc:  # like a shell: 127 not found, 126 not executable
            err.feed(exc.message.encode())
            return _result(exc.code, None, started, out, err, output_cap, self._spec, redact)
        grace = self._spec.kill_grace
        timed_out = False
        try:
            watch = _Watch(proc.stdout, proc.stderr, proc.pidfd, out, err)
        except BaseException:
            os.close(proc.stdout)
            os.close(proc.stderr)
            proc.close()
            raise
        try:
            with trio.move_on_after(timeout) as deadline:
                await watch.until(lambda: watch.exited)
            if deadline.cancelled_caught:
                timed_out = True
                await proc.terminate(grace)
            # The main process has ended: nothing it started may outlive it.
            await proc.kill_rest()
            with trio.move_on_after(_DRAIN_GRACE) as drain:
                await watch.until(lambda: watch.pipes_closed)
            if drain.cancelled_caught:
                # Something outside the tracked tree still holds the pipes.
                await proc.terminate(grace)
                with trio.move_on_after(grace + _DRAIN_GRACE):
                    await watch.until(lambda: watch.pipes_closed)
        except BaseException:
            await proc.terminate(grace)  # shielded: the tree is gone before Cancelled goes on
            raise
        finally:
            watch.close()
            proc.close()
        out.flush()
        err.flush()
        code = proc.exit_code_when_done()
        sig = -code if code is not None and code < 0 else None
        exit_code = 128 + sig if sig is not None else code
        return _result(exit_code, sig, started, out, err, output_cap, self._spec, redact, timed_out)


def _result(
    exit_code: int | None,
    sig: int | None,
    started: float,
    out: Capture,
    err: Capture,
    cap: int,
    spec: SessionSpec,
    redact: Callable[[str], str] | None,
    timed_out: bool = False,
) -> ShellResult:
    return shell_result(
        out.finish(cap, spec.spool_dir, redact),
        err.finish(cap, spec.spool_dir, redact),
        exit_code=exit_code,
        signal=sig,
        started=started,
        timed_out=timed_out,
    )


class _Watch:
    """A command's two output pipes and its exit (pidfd), multiplexed through one epoll.

    One task waiting on one descriptor instead of a task per pipe plus one for
    the exit: most of what the local backend costs over a bare
    ``subprocess.run`` was trio scheduling those tasks.
    """

    def __init__(self, out_fd: int, err_fd: int, pidfd: int, out: Capture, err: Capture) -> None:
        self._epoll = select.epoll()
        self._pipes = {out_fd: out, err_fd: err}
        self._pidfd = pidfd
        self.exited = False
        for fd in (out_fd, err_fd, pidfd):
            self._epoll.register(fd, select.EPOLLIN)

    @property
    def pipes_closed(self) -> bool:
        return not self._pipes

    async def until(self, done: Callable[[], bool]) -> None:
        """Read output and note the exit until ``done()``; a cancel point."""
        while not done():
            await trio.lowlevel.wait_readable(self._epoll.fileno())
            for fd, _events in self._epoll.poll(0):
                if fd == self._pidfd:
                    self.exited = True
                    self._epoll.unregister(fd)
                    continue
                capture = self._pipes.get(fd)
                if capture is None:
                    continue
                data = os.read(fd, _READ_SIZE)
                if data:
                    capture.feed(data)
                else:  # end of stream: every holder of the write end is gone
                    self._epoll.unregister(fd)
                    os.close(fd)
                    del self._pipes[fd]

    def close(self) -> None:
        for fd in self._pipes:
            os.close(fd)
        self._pipes.clear()
        self._epoll.close()
