"""The ``local`` backend: commands run as child processes of the kernel, on the host.

Not a sandbox: a command can do whatever the kernel's user can. What it does
guarantee is process hygiene and a clean environment:

- Every command is its own session and process group (``setsid``).
- When the command's main process ends, its process group is killed, so
  background jobs never outlive the command.
- On timeout or cancellation the whole tree gets SIGTERM, then after the
  grace period SIGKILL. Processes that left the group (``setsid``,
  double-fork) are found too: every command's environment carries a random
  ``RINGFENCE_RUN_ID`` and every process that still has it is part of the
  tree, as are the live descendants :mod:`psutil` can see.
- The environment is built from an allowlist (``PATH``, ``HOME``, ``LANG``,
  ``TERM``, the session's ``passthrough_env``) plus what the caller passes:
  nothing else of the kernel's environment reaches the command.

Non-guarantees: a process that both leaves the group *and* scrubs
``RINGFENCE_RUN_ID`` from its environment after its parent died escapes the
kill; use the docker backend when that matters.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil
import trio

from ..runtime import InvalidArguments, ToolError, Unavailable
from ._output import Capture
from ._types import (
    Command,
    OutputCallback,
    SessionSpec,
    ShellResult,
    check_command,
    check_env,
    check_run_arguments,
)

__all__ = ["BASE_ENV_ALLOWLIST", "LocalSession", "start_local"]

BASE_ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "TERM")
RUN_ID_VARIABLE = "RINGFENCE_RUN_ID"
# After the main process exited and its group was killed, how long the output
# pipes may stay open (held by an escaped process) before the tree is hunted down.
_DRAIN_GRACE = 0.25
_READ_SIZE = 65536


async def start_local(spec: SessionSpec) -> LocalSession:
    """Start a local session.

    Raises InvalidArguments for options it does not know, Unavailable where
    the OS lacks process descriptors (pidfd: Linux 5.3+), which the exit
    watch and the race-free group kill rely on.
    """
    if not hasattr(os, "pidfd_open"):
        raise Unavailable("the local backend needs pidfd (Linux 5.3 or newer)")
    if spec.options:
        raise InvalidArguments(
            f"the local backend takes no options (got {sorted(spec.options)})", field="options"
        )
    return LocalSession(spec)


class LocalSession:
    """Commands as host child processes. See the module docstring for guarantees."""

    name = "local"

    def __init__(self, spec: SessionSpec) -> None:
        self._spec = spec
        self._closed = False
        self._lock = trio.Lock()
        names = dict.fromkeys((*BASE_ENV_ALLOWLIST, *spec.passthrough_env))
        self._base_env = {n: os.environ[n] for n in names if n in os.environ}

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
            raise trio.ClosedResourceError("the local backend session is closed")
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
        run_id = secrets.token_hex(12)
        env = {**env, RUN_ID_VARIABLE: run_id}
        out = Capture("stdout", on_output)
        err = Capture("stderr", on_output)
        started = time.monotonic()
        try:
            popen, out_fd, err_fd = _spawn(argv, cwd, env)
        except _ExecFailed as exc:  # like a shell: 127 not found, 126 not executable
            err.feed(exc.message.encode())
            return _result(exc.code, None, started, out, err, output_cap, self._spec, redact)
        tree = _Tree(popen, run_id, self._spec.kill_grace)
        watch = _Watch(out_fd, err_fd, tree.pidfd, out, err)
        timed_out = False
        try:
            with trio.move_on_after(timeout) as deadline:
                await watch.until(lambda: watch.exited)
            if deadline.cancelled_caught:
                timed_out = True
                await tree.terminate()
            # The main process has ended: nothing it started may outlive it.
            tree.kill_group()
            with trio.move_on_after(_DRAIN_GRACE) as drain:
                await watch.until(lambda: watch.pipes_closed)
            if drain.cancelled_caught:
                # Something that left the group still holds the pipes.
                await tree.terminate()
                with trio.move_on_after(self._spec.kill_grace + _DRAIN_GRACE):
                    await watch.until(lambda: watch.pipes_closed)
        except BaseException:
            with trio.CancelScope(shield=True):
                await tree.terminate()
            raise
        finally:
            watch.close()
            tree.reap()
        # SIGKILL is asynchronous: wait until the killed processes are really gone.
        await tree.wait_gone()
        out.flush()
        err.flush()
        code = popen.returncode
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
    o = out.finish(cap, spec.spool_dir, redact)
    e = err.finish(cap, spec.spool_dir, redact)
    return ShellResult(
        exit_code=exit_code,
        signal=sig,
        duration=time.monotonic() - started,
        stdout=o.text,
        stderr=e.text,
        stdout_truncated=o.truncated,
        stderr_truncated=e.truncated,
        stdout_bytes=o.total_bytes,
        stderr_bytes=e.total_bytes,
        stdout_spool=o.spool_path,
        stderr_spool=e.spool_path,
        timed_out=timed_out,
    )


class _ExecFailed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _spawn(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int, int]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        # Popen is called directly (not in a thread): with vfork it takes well
        # under a millisecond, and a thread hop would cost as much again.
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        for fd in (out_r, err_r):
            os.close(fd)
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        why = "command not found" if code == 127 else "permission denied"
        raise _ExecFailed(code, f"ringfence: {argv[0]}: {why}\n") from None
    except OSError as exc:
        for fd in (out_r, err_r):
            os.close(fd)
        raise ToolError(f"could not start {argv[0]!r}: {exc}") from exc
    finally:
        os.close(out_w)
        os.close(err_w)
    return popen, out_r, err_r


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


class _Tree:
    """The processes of one command: its group, its descendants, its marked escapees."""

    def __init__(self, popen: subprocess.Popen[bytes], run_id: str, grace: float) -> None:
        self.popen = popen
        self.pgid = popen.pid  # start_new_session: the leader's pid is the group id
        self.run_id = run_id
        self.grace = grace
        self.pidfd = os.pidfd_open(popen.pid)
        self._pidfd: int | None = self.pidfd

    def leader_exited(self) -> bool:
        # WNOWAIT: look without reaping, so the pid (and so the group id) stays ours.
        try:
            info = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    async def wait_leader(self) -> None:
        """Return when the main process has exited; it stays unreaped (a zombie)."""
        if self._pidfd is None:  # already reaped
            return
        await trio.lowlevel.wait_readable(self._pidfd)

    def kill_group(self) -> None:
        _killpg(self.pgid, signal.SIGKILL)

    def _members(self) -> list[psutil.Process]:
        """Live processes of the tree other than the leader."""
        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.popen.pid).children(recursive=True):
                found[child.pid] = child
        me = os.getpid()
        for proc in psutil.process_iter():
            if proc.pid in (me, self.popen.pid) or proc.pid in found:
                continue
            try:
                if proc.environ().get(RUN_ID_VARIABLE) == self.run_id:
                    found[proc.pid] = proc
            except (psutil.Error, OSError):
                continue
        return [p for p in found.values() if _is_alive(p)]

    def _signal(self, members: list[psutil.Process], sig: int) -> None:
        _killpg(self.pgid, sig)
        for proc in members:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    async def terminate(self) -> None:
        """SIGTERM to the whole tree, wait up to the grace period, then SIGKILL. Shielded."""
        with trio.CancelScope(shield=True):
            members = await trio.to_thread.run_sync(self._members)
            self._signal(members, signal.SIGTERM)
            deadline = trio.current_time() + self.grace
            with trio.move_on_at(deadline):
                await self.wait_leader()
            remaining = max(deadline - trio.current_time(), 0.0)
            if members and remaining:
                await _wait_dead(members, remaining)
            # A fresh look: the tree may have forked during the grace period.
            for _ in range(3):
                members = await trio.to_thread.run_sync(self._members)
                self._signal(members, signal.SIGKILL)
                if not members:
                    break
                await _wait_dead(members, 1.0)
            with trio.move_on_after(self.grace + 1.0):
                await self.wait_leader()

    async def wait_gone(self, limit: float = 3.0) -> None:
        """After the leader was reaped: wait (bounded) until its group has no live member.

        Dead members may linger as zombies until init reaps them (on some hosts
        that takes seconds); a zombie runs nothing, so it does not count.
        """
        if not _group_exists(self.pgid):  # the common case: one syscall
            return
        with trio.move_on_after(limit), trio.CancelScope(shield=True):
            while True:
                live = await trio.to_thread.run_sync(_live_in_group, self.pgid)
                if not live:
                    return
                for proc in live:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                await trio.sleep(0.005)

    def reap(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self.leader_exited():
            self.popen.wait()
        else:  # only on a failure path: never leave the leader running
            _killpg(self.pgid, signal.SIGKILL)
            self.popen.kill()
            self.popen.wait()


def _is_alive(proc: psutil.Process) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def _wait_dead(procs: list[psutil.Process], limit: float) -> None:
    with trio.move_on_after(limit):
        while any(_is_alive(p) for p in procs):
            await trio.sleep(0.005)


def _live_in_group(pgid: int) -> list[psutil.Process]:
    live = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and _is_alive(proc):
                live.append(proc)
        except (OSError, psutil.Error):
            continue
    return live


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # the id now belongs to someone else's group
    return True


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:  # the group id was reused by someone else's process
        if exc.errno != errno.EPERM:
            raise
