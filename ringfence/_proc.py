"""The process supervisor: spawn a child, track every process it starts, stop them all.

One home for what the local backend and the script bridge's local launcher
need from a child process tree:

- :func:`spawn` starts ``argv`` as the leader of a new session with its
  output on two pipes, undoing everything it set up when any step fails
  (an :class:`~contextlib.ExitStack` released with ``pop_all()`` once the
  child runs, trio's pattern).
- The *tree* is every process the child ever started. Where a cgroup v2
  hierarchy is writable it is a fresh cgroup per command (:func:`tracking`
  says which method this process uses, and why): membership is inherited
  by every fork and cannot be shed by ``setsid``, double-forking, closing
  descriptors or scrubbing the environment, and the kernel kills the whole
  cgroup at once (``cgroup.kill``, Linux 5.14+; before that the cgroup is
  frozen, every member gets SIGKILL, and it is thawed, so nothing forks in
  between). Elsewhere the tree is found the old way: the leader's process
  group, its live descendants, and every process whose environment still
  carries the command's random ``RINGFENCE_RUN_ID``.
- :meth:`Process.terminate` is SIGTERM to the tree, the grace period, then
  SIGKILL, shielded from cancellation, and returns only once the leader
  has exited, so a caller can re-raise ``Cancelled`` right after it.

How the child enters its cgroup without a window: it is spawned as a tiny
``/bin/sh`` gate that blocks reading its stdin (a pipe only we hold the
write end of). While it blocks, its pid is written to the cgroup's
``cgroup.procs``; only then is the gate released, and it replaces its stdin
with ``/dev/null`` and ``exec``s the command. So the command's first
instruction already runs inside the cgroup: nothing it can do happens
before the move. (``preexec_fn`` would do the move in the forked child, but
is unsafe in a process with threads, which trio has.) The gate costs one
extra ``exec`` of ``/bin/sh`` per command.

Non-guarantees: a process that may write to the cgroup hierarchy (root,
or the owner of a delegated subtree, i.e. the same user as the kernel) can
move itself out of its cgroup; under the run-id fallback a process that
leaves the session *and* scrubs ``RINGFENCE_RUN_ID`` escapes. Neither is a
sandbox: confine commands (the docker backend) when that matters. No
resource limit is set on the cgroup (no ``pids.max``): a fork bomb is
bounded by the command's timeout, at which point the whole cgroup is
killed at once.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
import trio

from .runtime import ToolError

__all__ = [
    "RUN_ID_VARIABLE",
    "ExecFailed",
    "Process",
    "Tracking",
    "spawn",
    "tracking",
]

RUN_ID_VARIABLE = "RINGFENCE_RUN_ID"


def _gate(*, keep_stdin: bool, unset_pwd: bool) -> tuple[str, ...]:
    """The gate: blocks until released (a newline on stdin), exits 125 when its spawner
    gave up instead (end of file), else execs the command with an empty stdin.

    ``keep_stdin``: the command keeps the gate's stdin (``read`` takes bytes from a pipe
    one at a time up to the newline, POSIX, so it reads exactly what follows the release).
    ``unset_pwd``: the ``PWD`` the shell exports is dropped (``exact_env``).
    """
    script = "read _ || exit 125; "
    script += "" if keep_stdin else "exec 0</dev/null; "
    script += "unset PWD; " if unset_pwd else ""
    return ("/bin/sh", "-c", script + 'exec "$@"', "ringfence-gate")


_SUBTREE = "ringfence"
# How long SIGKILLed members may take to be gone before we stop waiting (they
# cannot run any more; they only have to finish exiting).
_GONE_LIMIT = 3.0
_POLL = 0.002

Method = Literal["cgroup", "run-id"]


@dataclass(frozen=True)
class Tracking:
    """How this process tracks its children's trees: ``method`` and a human ``detail``.

    ``method`` is ``cgroup`` (a cgroup v2 per command under ``base``, killed
    with ``kill``: ``cgroup.kill`` or ``freeze``) or ``run-id`` (the process
    group plus the environment marker; ``detail`` says why cgroups were not
    used).
    """

    method: Method
    detail: str
    base: str | None = None
    kill: Literal["cgroup.kill", "freeze"] | None = None

    def to_dict(self) -> dict[str, str]:
        return {"method": self.method, "detail": self.detail}


class ExecFailed(Exception):
    """``argv[0]`` cannot be executed; ``code`` is what a shell would exit with (127, 126)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_probe_lock = threading.Lock()
_tracking: Tracking | None = None


def tracking() -> Tracking:
    """The tracking method of this process: probed once (blocking, a few ms), then cached.

    The probe finds the cgroup2 mount in ``/proc/self/mountinfo``, creates
    ``ringfence/<pid>-<random>`` inside this process's own cgroup (else next
    to it, else under the hierarchy's root) and proves the whole cycle on a real child
    (create, move, kill, remove); any failure selects ``run-id`` with the
    reason. Never raises. On the way it kills and removes what crashed
    ringfence processes left under ``ringfence/``.
    """
    global _tracking
    with _probe_lock:
        if _tracking is None:
            _tracking = _probe()
        return _tracking


def _probe() -> Tracking:
    mount = _cgroup2_mount()
    if mount is None:
        return Tracking("run-id", "no cgroup2 hierarchy is mounted")
    own = _own_cgroup()
    if own is None:
        return Tracking("run-id", "this process is not in a cgroup2 group (/proc/self/cgroup)")
    # Inside our own cgroup first: whatever contains this process (a systemd unit, a
    # container, an outer ringfence command) then contains, and stops, its commands
    # too. Next to it, then the root, where our own cgroup cannot have children.
    candidates = dict.fromkeys([own, os.path.dirname(own.rstrip("/")) or "/", "/"])
    why: list[str] = []
    for rel in candidates:
        parent = Path(mount) / rel.lstrip("/") / _SUBTREE
        try:
            parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):  # a failed sweep is retried by the next process
                _sweep(parent)
            base = parent / f"{os.getpid()}-{secrets.token_hex(4)}"
            base.mkdir()
        except OSError as exc:
            why.append(f"{parent}: {exc.strerror or exc}")
            continue
        kill: Literal["cgroup.kill", "freeze"] | None
        if (base / "cgroup.kill").exists():
            kill = "cgroup.kill"
        elif (base / "cgroup.freeze").exists():
            kill = "freeze"
        else:
            kill = None
        found = Tracking(
            "cgroup", f"a cgroup v2 per command under {base} ({kill})", str(base), kill
        )
        problem = None if kill else "neither cgroup.kill nor cgroup.freeze (Linux < 5.2)"
        problem = problem or _self_check(found)
        if problem is None:
            atexit.register(_remove_quietly, base)  # the next process's sweep covers a crash
            return found
        why.append(f"{base}: {problem}")
        with contextlib.suppress(OSError):
            base.rmdir()
    return Tracking("run-id", "cgroup2 is not usable: " + "; ".join(why))


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def _self_check(found: Tracking) -> str | None:
    """Run the whole per-command cycle once on a real child; the problem, or None."""
    try:
        proc = spawn(["true"], cwd=Path("/"), env={"PATH": os.defpath}, _tracking=found)
    except (ExecFailed, ToolError, OSError) as exc:
        return str(exc)
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        proc.kill_rest_now()
        return None if proc.exit_code_when_done() == 0 else "the gated child failed"
    except OSError as exc:
        return str(exc)
    finally:
        for fd in (proc.stdout, proc.stderr):
            os.close(fd)
        proc.close()


def _cgroup2_mount() -> str | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        # "<id> <parent> <dev> <root> <mount point> <options> [optional…] - <fstype> <source> <super>"
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and len(fields) >= 5 and fields[3] == "/":
            return fields[4].replace("\\040", " ")
    return None


def _own_cgroup() -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            path = line[3:]
            return None if path.endswith(" (deleted)") else path
    return None


def _sweep(parent: Path) -> None:
    """Kill and remove what ringfence processes that died left under ``parent``."""
    for entry in os.scandir(parent):
        pid, _, _ = entry.name.partition("-")
        if not entry.is_dir() or not pid.isdigit() or psutil.pid_exists(int(pid)):
            continue
        for cmd in Path(entry.path).iterdir():
            if cmd.is_dir():
                _Cgroup(
                    cmd, "cgroup.kill" if (cmd / "cgroup.kill").exists() else "freeze"
                ).destroy()
        with contextlib.suppress(OSError):
            os.rmdir(entry.path)


def _read(path: Path) -> str:
    # os-level: a cgroup file is one small read; pathlib's wrappers cost as much again.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class _Cgroup:
    """One command's cgroup. Blocking file operations, each a single small read or write."""

    _names = itertools.count()

    def __init__(self, path: Path, kill: Literal["cgroup.kill", "freeze"]) -> None:
        self.path = path
        self._kill = kill

    @classmethod
    def create(cls, base: str, kill: Literal["cgroup.kill", "freeze"]) -> _Cgroup:
        path = Path(base) / f"cmd-{next(cls._names)}"
        path.mkdir()
        return cls(path, kill)

    def add(self, pid: int) -> None:
        _write(self.path / "cgroup.procs", f"{pid}\n")

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self.path / "cgroup.procs").split()]
        except FileNotFoundError:
            return []

    def populated(self) -> bool:
        """Whether a live process is in the cgroup (exited ones, zombies too, are not)."""
        try:
            return "populated 1" in _read(self.path / "cgroup.events")
        except FileNotFoundError:
            return False

    def signal(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every member at once: no member can fork a survivor meanwhile."""
        if self._kill == "cgroup.kill":
            with contextlib.suppress(FileNotFoundError):
                _write(self.path / "cgroup.kill", "1")
            return
        # Before Linux 5.14: freeze, kill each member (a fatal signal reaches a
        # frozen task), thaw. A frozen task cannot fork, so the list is complete.
        freeze = self.path / "cgroup.freeze"
        try:
            _write(freeze, "1")
            for _ in range(500):  # freezing is asynchronous; bounded (about 1 s)
                if "frozen 1" in _read(self.path / "cgroup.events"):
                    break
                time.sleep(_POLL)
            self.signal(signal.SIGKILL)
        except FileNotFoundError:
            return
        finally:
            with contextlib.suppress(OSError):
                _write(freeze, "0")

    def remove(self) -> bool:
        """Remove the cgroup and any cgroups below it (a nested ringfence's); False while busy."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            # Busy: members still exiting, or child cgroups. Remove those bottom-up.
            try:
                for top, dirs, _files in os.walk(self.path, topdown=False):
                    for name in dirs:
                        os.rmdir(os.path.join(top, name))
                self.path.rmdir()
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                raise
        return True

    def destroy(self) -> None:
        """Kill, wait (bounded) until empty, remove. For the sweep and the last resort."""
        for _ in range(int(_GONE_LIMIT / _POLL)):
            self.kill()
            if self.remove():
                return
            time.sleep(_POLL)


def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    stdin_pipe: bool = False,
    exact_env: bool = False,
    uid: int | None = None,
    gid: int | None = None,
    _tracking: Tracking | None = None,
) -> Process:
    """Start ``argv`` in a new session, stdin ``/dev/null``, stdout/stderr on fresh pipes.

    ``env`` is the whole environment (plus ``RINGFENCE_RUN_ID``). The
    returned :class:`Process` owns its tree; the caller owns the read ends
    ``process.stdout``/``process.stderr`` and must :meth:`Process.close`
    it. Raises :class:`ExecFailed` (127/126, like a shell) when ``argv[0]``
    is not found or not executable, ``ToolError`` for any other failure to
    start. On any failure nothing is left behind: no child, no cgroup, no
    descriptor. Blocking but fast (no thread hop: with vfork a spawn takes
    well under a millisecond).

    ``stdin_pipe=True``: the command's stdin is a fresh pipe whose write end
    is ``process.stdin`` (the caller's to write and close). Under the cgroup
    gate that pipe is the gate's own stdin: the release newline goes first,
    the gate consumes exactly it, and the command reads only what the caller
    writes after :func:`spawn` returned (for a wrapper such as ``docker run
    -i`` that passes stdin on but no other descriptor).

    ``exact_env=True``: the command's environment is exactly ``env``: no
    ``RINGFENCE_RUN_ID`` (the run-id fallback then finds the tree by its
    process group and live descendants only) and no ``PWD`` from the gate's
    shell. For a child whose environment is part of its contract (the script
    runner).

    ``uid``/``gid`` (root only): the user and group the child runs as, with
    no supplementary groups; the cgroup move is still done by this process.
    """
    how = _tracking or tracking()
    run_id = secrets.token_hex(12)
    full_env = dict(env) if exact_env else {**env, RUN_ID_VARIABLE: run_id}
    gated = how.method == "cgroup"
    with contextlib.ExitStack() as always, contextlib.ExitStack() as on_failure:
        out_r, out_w = os.pipe()
        on_failure.callback(os.close, out_r)
        always.callback(os.close, out_w)
        err_r, err_w = os.pipe()
        on_failure.callback(os.close, err_r)
        always.callback(os.close, err_w)
        group = None
        stdin: int = subprocess.DEVNULL
        gate_w = -1
        stdin_w: int | None = None
        if stdin_pipe:
            stdin, stdin_w = os.pipe()
            always.callback(os.close, stdin)
            on_failure.callback(os.close, stdin_w)  # also releases a gate we never opened
        if gated:
            assert how.base is not None and how.kill is not None
            _check_executable(argv[0], cwd, full_env)
            try:
                group = _Cgroup.create(how.base, how.kill)
            except OSError as exc:
                raise ToolError(f"could not create the command's cgroup: {exc}") from exc
            on_failure.callback(group.destroy)
            if stdin_w is not None:
                gate_w = stdin_w
            else:
                stdin, gate_w = os.pipe()
                always.callback(os.close, stdin)
                # Also releases a gate we never opened: it exits 125.
                always.callback(os.close, gate_w)
        gate = _gate(keep_stdin=stdin_w is not None, unset_pwd=exact_env and "PWD" not in env)
        try:
            popen = subprocess.Popen(
                [*gate, *argv] if gated else list(argv),
                stdin=stdin,
                stdout=out_w,
                stderr=err_w,
                cwd=cwd,
                env=full_env,
                start_new_session=True,
                close_fds=True,
                pass_fds=tuple(pass_fds),
                user=uid,
                group=gid,
                extra_groups=[] if uid is not None else None,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            why = "command not found" if code == 127 else "permission denied"
            raise ExecFailed(code, f"ringfence: {argv[0]}: {why}\n") from None
        except OSError as exc:
            raise ToolError(f"could not start {argv[0]!r}: {exc}") from exc
        on_failure.callback(_kill_and_reap, popen)
        try:
            if group is not None:
                group.add(popen.pid)  # before the release: the command starts inside
                os.write(gate_w, b"\n")
            pidfd = os.pidfd_open(popen.pid)
        except OSError as exc:
            raise ToolError(f"could not track {argv[0]!r}: {exc}") from exc
        on_failure.pop_all()
    return Process(popen, pidfd, out_r, err_r, run_id, group, stdin_w)


def _check_executable(name: str, cwd: Path, env: Mapping[str, str]) -> None:
    """What ``Popen`` would refuse, refused before the gate, with the same messages.

    Only a courtesy: the gate's ``exec`` still decides (a race here ends in
    the shell's own 127/126 message).
    """
    if "/" in name:
        path = cwd / name
        if not path.exists():
            raise ExecFailed(127, f"ringfence: {name}: command not found\n")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise ExecFailed(126, f"ringfence: {name}: permission denied\n")
    elif shutil.which(name, path=env.get("PATH", os.defpath)) is None:
        raise ExecFailed(127, f"ringfence: {name}: command not found\n")


def _kill_and_reap(popen: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        popen.kill()
    popen.wait()


class Process:
    """A spawned child and its tree. Made by :func:`spawn` only.

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
        group: _Cgroup | None,
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
                    await _wait_dead(marked, _GONE_LIMIT)
            await self._wait_gone(_GONE_LIMIT)

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
                await trio.sleep(_POLL)
        self._group.kill()
        await self._wait_gone(_GONE_LIMIT)

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
                while self._group.populated():
                    await trio.sleep(_POLL)
                return
            if not _group_exists(self.pid):  # the common case: one syscall
                return
            while True:
                live = await trio.to_thread.run_sync(_live_in_group, self.pid)
                if not live:
                    return
                _signal_all(live, signal.SIGKILL)
                await trio.sleep(_POLL)

    def _members(self) -> list[psutil.Process]:
        """Live processes of the tree other than the leader (the run-id hunt). Blocking."""
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
            _kill_and_reap(self.popen)
        else:
            self.popen.wait()
        if self._group is not None and not self._group.remove():
            self._group.destroy()


def _marked(run_id: str) -> list[psutil.Process]:
    """Every other process whose environment carries ``RINGFENCE_RUN_ID=run_id``. Blocking.

    Reads ``/proc/*/environ`` directly: a third of what psutil's per-process
    objects cost, and this runs after every command under the fallback.
    """
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
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


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
