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

Where the parts live: this module spawns (:func:`spawn`, the gate) and
decides how trees are tracked (:func:`tracking`, probed once);
:mod:`ringfence._proctree` holds the :class:`Process` and the run-id hunt;
:mod:`ringfence._confine.cgroup` the cgroup files. Only this module starts processes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._confine.cgroup import (
    Cgroup,
    cgroup2_mount as _cgroup2_mount,  # also read by backends.confined
    own_cgroup,
    sweep,
)
from ._proctree import RUN_ID_VARIABLE, Method, Process, kill_and_reap
from .runtime._errors import ToolError, Unavailable

__all__ = [
    "RUN_ID_VARIABLE",
    "ExecFailed",
    "Process",
    "Tracking",
    "cgroup_entry",
    "spawn",
    "tracking",
]


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
    own = own_cgroup()
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
                sweep(parent)
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
    holds_itself: bool = False,
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

    ``holds_itself=True``: no gate. The command starts at once and is moved
    into its cgroup while it starts up; :func:`spawn` returns only once the
    move succeeded (on failure the child is killed and nothing is left). For
    a program of this package that does nothing that matters (no fork, no
    untrusted input) until the caller lets it go on over a channel of its own,
    after :func:`spawn` returned (the script runner waits for its activation
    pipe): its start-up overlaps the move, a cgroup v2 migration that waits
    for an RCU grace period (milliseconds), and the gate's ``exec`` of
    ``/bin/sh`` is saved.
    """
    how = _tracking or tracking()
    run_id = secrets.token_hex(12)
    full_env = dict(env) if exact_env else {**env, RUN_ID_VARIABLE: run_id}
    grouped = how.method == "cgroup"
    gated = grouped and not holds_itself
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
        if grouped:
            assert how.base is not None and how.kill is not None
            if gated:
                _check_executable(argv[0], cwd, full_env)
            try:
                group = Cgroup.create(how.base, how.kill)
            except OSError as exc:
                raise ToolError(f"could not create the command's cgroup: {exc}") from exc
            on_failure.callback(group.destroy)
        if gated:
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
        on_failure.callback(kill_and_reap, popen)
        try:
            if group is not None:
                group.add(popen.pid)  # gated: before the release, the command starts inside
                if gated:
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


def cgroup_entry() -> tuple[Cgroup, tuple[str, ...]]:
    """A fresh cgroup for a process another library spawns, and the argv prefix that enters it.

    For the MCP SDK's stdio servers, which the SDK spawns itself (so no gate
    of :func:`spawn`'s can hold them): the prefix is ``/bin/sh`` moving
    *itself* into the cgroup (``0`` written to its ``cgroup.procs``) and only
    then ``exec``ing the rest, so the process's first instruction already runs
    inside, as under the gate; when the move fails it exits 125, the shell's
    reason on stderr. The caller owns the cgroup (``destroy`` it once the
    process is gone). Raises Unavailable naming why when this process tracks
    trees without cgroups (:func:`tracking`) or the cgroup cannot be made.
    """
    how = tracking()
    if how.method != "cgroup" or how.base is None or how.kill is None:
        raise Unavailable(f"no cgroup v2 hierarchy ringfence can write: {how.detail}")
    try:
        group = Cgroup.create(how.base, how.kill)
    except OSError as exc:
        raise Unavailable(f"could not create a cgroup under {how.base}: {exc}") from exc
    procs = str(group.path / "cgroup.procs")
    return group, ("/bin/sh", "-c", 'echo 0 >"$0" || exit 125; exec "$@"', procs)
