"""A spawned child and its tree: :class:`Process` (wait, terminate, close) and the run-id hunt.

A :class:`Process` is made by :func:`ringfence._proc.spawn` only. Its tree is
its :class:`~ringfence._confine.cgroup.Cgroup` where the supervisor tracks by cgroup;
otherwise the leader's process group, its live descendants and every process
whose environment carries the command's ``RINGFENCE_RUN_ID`` (:func:`_marked`,
one scan of ``/proc/*/environ``). Stopping is shielded and bounded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import trio

from ._confine.cgroup import GONE_LIMIT, POLL, Cgroup

if TYPE_CHECKING:  # psutil is imported by the run-id fallback's functions, where they run:
    import psutil  # a cgroup-tracked command never needs it (~5-10 ms of a CLI's start)

__all__ = ["RUN_ID_VARIABLE", "Method", "Process", "kill_and_reap"]

RUN_ID_VARIABLE = "RINGFENCE_RUN_ID"

Method = Literal["cgroup", "run-id"]


def kill_and_reap(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL the leader's group and the leader, then reap it (a failed spawn, a last resort)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        popen.kill()
    popen.wait()


class Process:
    """A spawned child and its tree. Made by :func:`ringfence._proc.spawn` only.

    ``pidfd`` becomes readable when the leader exits; the leader stays
    unreaped (a zombie) until :meth:`close`, so its pid, which is also its
    process group id, cannot be reused meanwhile. ``stdout``, ``stderr`` and
    ``stdin`` (with ``stdin_pipe``) are the caller's descriptors to close.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pidfd: int,
        stdout: int,
        stderr: int,
        run_id: str,
        group: Cgroup | None,
        stdin: int | None = None,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pidfd = pidfd
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = stdin  # the write end of the command's stdin (``stdin_pipe``), else None
        self.run_id = run_id
        self._group = group
        self._closed = False

    @property
    def cgroup(self) -> Path | None:
        """The tree's cgroup v2 directory (``cgroup`` tracking), for limits; else None."""
        return self._group.path if self._group is not None else None

    @property
    def method(self) -> Method:
        """How this tree is tracked: ``cgroup`` or ``run-id``."""
        return "cgroup" if self._group is not None else "run-id"

    def leader_exited(self) -> bool:
        # WNOWAIT: look without reaping, so the pid (and so the group id) stays ours.
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    async def wait_leader(self) -> None:
        """Return when the leader has exited (it stays a zombie until :meth:`close`)."""
        if self._closed:
            return
        await trio.lowlevel.wait_readable(self.pidfd)

    def kill_rest_now(self) -> None:
        """SIGKILL the whole tree (blocking, fast). Does not wait for anything."""
        if self._group is not None:
            self._group.kill()
        else:
            self._killpg(signal.SIGKILL)

    def _killpg(self, sig: int) -> None:
        # Only while the leader is unreaped: then its pid, the group id, cannot be reused.
        if self.popen.returncode is None:
            _killpg(self.pid, sig)

    async def kill_rest(self) -> None:
        """After the leader exited: SIGKILL what it left behind and wait until it is gone.

        Shielded and bounded. With a cgroup: one write, one read when nothing
        is left. With the run-id fallback: the process group, then a hunt for
        the run id (one scan of ``/proc/*/environ``, in a thread), then, as
        before cgroups, the leader is reaped and the group waited for.
        """
        with trio.CancelScope(shield=True):
            self.kill_rest_now()
            if self._group is None:
                marked = await trio.to_thread.run_sync(_marked, self.run_id)
                _signal_all(marked, signal.SIGKILL)
                # Reap now: otherwise the zombie leader keeps the group "existing"
                # and every command would pay a full process scan below.
                self.exit_code_when_done()
                if marked:
                    await _wait_dead(marked, GONE_LIMIT)
            await self._wait_gone(GONE_LIMIT)

    async def terminate(self, grace: float) -> None:
        """SIGTERM to the whole tree, wait up to ``grace``, then SIGKILL; shielded.

        Returns once the leader has exited (bounded: if even SIGKILL did not
        end it within ``grace`` + 1 s, it returns anyway and :meth:`close`
        finishes the job), so the caller may re-raise ``Cancelled`` next.
        """
        with trio.CancelScope(shield=True):
            if self._group is not None:
                await self._terminate_cgroup(grace)
            else:
                await self._terminate_hunt(grace)
            with trio.move_on_after(grace + 1.0):
                await self.wait_leader()

    async def _terminate_cgroup(self, grace: float) -> None:
        assert self._group is not None
        self._group.signal(signal.SIGTERM)
        with trio.move_on_after(grace):
            while self._group.populated():
                await trio.sleep(POLL)
        self._group.kill()
        await self._wait_gone(GONE_LIMIT)

    async def _terminate_hunt(self, grace: float) -> None:
        members = await trio.to_thread.run_sync(self._members)
        self._killpg(signal.SIGTERM)
        _signal_all(members, signal.SIGTERM)
        deadline = trio.current_time() + grace
        with trio.move_on_at(deadline):
            await self.wait_leader()
        remaining = max(deadline - trio.current_time(), 0.0)
        if members and remaining:
            await _wait_dead(members, remaining)
        # A fresh look: the tree may have forked during the grace period.
        for _ in range(3):
            members = await trio.to_thread.run_sync(self._members)
            self._killpg(signal.SIGKILL)
            _signal_all(members, signal.SIGKILL)
            if not members:
                break
            await _wait_dead(members, 1.0)

    async def _wait_gone(self, limit: float) -> None:
        """Wait (bounded) until no member of the tree runs; zombies do not count."""
        with trio.move_on_after(limit):
            if self._group is not None:
                # SIGKILLed members are usually gone within a millisecond or two: look again
                # soon, then every POLL (a fixed POLL cost every command's end ~2 ms).
                pause = POLL / 8
                while self._group.populated():
                    await trio.sleep(pause)
                    pause = min(pause * 2, POLL)
                return
            if not _group_exists(self.pid):  # the common case: one syscall
                return
            while True:
                live = await trio.to_thread.run_sync(_live_in_group, self.pid)
                if not live:
                    return
                _signal_all(live, signal.SIGKILL)
                await trio.sleep(POLL)

    def _members(self) -> list[psutil.Process]:
        """Live processes of the tree other than the leader (the run-id hunt). Blocking."""
        import psutil

        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children(recursive=True):
                found[child.pid] = child
        for proc in _marked(self.run_id):
            found.setdefault(proc.pid, proc)
        found.pop(self.pid, None)
        return [p for p in found.values() if _is_alive(p)]

    def exit_code_when_done(self) -> int | None:
        """The leader's ``returncode`` once reaped (:meth:`close`), reaping it if it exited."""
        if self.popen.returncode is None and self.leader_exited():
            self.popen.wait()
        return self.popen.returncode

    def close(self) -> None:
        """Reap the leader (SIGKILL to the tree first if it still runs), remove the cgroup.

        Idempotent; blocking and fast on the normal path (the tree was already
        stopped by :meth:`kill_rest` or :meth:`terminate`). Never leaves the
        leader running.
        """
        if self._closed:
            return
        self._closed = True
        os.close(self.pidfd)
        if not self.leader_exited():  # only on a failure path
            self.kill_rest_now()
            kill_and_reap(self.popen)
        else:
            self.popen.wait()
        if self._group is not None and not self._group.remove():
            self._group.destroy()


def _marked(run_id: str) -> list[psutil.Process]:
    """Every other process whose environment carries ``RINGFENCE_RUN_ID=run_id``. Blocking.

    Reads ``/proc/*/environ`` directly: a third of what psutil's per-process
    objects cost, and this runs after every command under the fallback.
    """
    import psutil

    needle = f"\0{RUN_ID_VARIABLE}={run_id}\0".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = b"\0" + f.read() + b"\0"
            if needle in environ:
                found.append(psutil.Process(int(name)))
        except (OSError, psutil.Error):
            continue
    return found


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    import psutil

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def _is_alive(proc: psutil.Process) -> bool:
    """Running (not gone, not a zombie)."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def _wait_dead(procs: list[psutil.Process], limit: float) -> None:
    with trio.move_on_after(limit):
        while any(_is_alive(p) for p in procs):
            await trio.sleep(0.005)


def _live_in_group(pgid: int) -> list[psutil.Process]:
    import psutil

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
