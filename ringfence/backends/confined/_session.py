"""The ``local`` backend: commands confined on this machine, in a warm sandbox per session.

One sandbox per session (bubblewrap, then the supervisor inside it, :mod:`._supervisor`); every
command is then one ``posix_spawn`` of that supervisor, so confinement costs a one-time start,
not a per-command namespace setup. Every layer (namespaces, file system, network, seccomp,
Landlock, rlimits, uid, pids/memory, overlay, process tree) applies or the session refuses with
``unavailable`` naming it, unless the operator chose ``sandbox="best-effort"`` (recorded in the
``backend_started`` event). Over 500 lines on purpose: one session's lifecycle, start to close,
with its wire to the supervisor.

Why bubblewrap, each layer, and what is not guaranteed: docs/design/confined-session.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from ... import _proc
from ...runtime._errors import InvalidArguments, ToolError, Unavailable
from .._host import BASE_ENV_ALLOWLIST, _result, _Watch
from .._output import Capture
from .._shellstate import STATE_LIMIT, ShellKeeper
from .._trees import remove_tree
from .._types import (
    Command,
    OutputCallback,
    SessionSpec,
    ShellResult,
    Upper,
    check_command,
    check_run_arguments,
)
from ._execrules import ExecRules
from ._layers import DENIED_SYSCALLS, LayerUnavailable, landlock_plan, layer_filter, seccomp_program
from ._limits import _join_limit_cgroups, _make_limit_cgroups, _remove_cgroup, _v2_limits
from ._plan import (
    FIXES,
    STRICT,
    ConfinedOptions,
    Layer,
    SandboxArgv,
    _empty_uppers,
    _hidden_dirs,
    _refuse,
    _session_user,
    _uppers_ready,
    claimed_layers,
)

__all__ = [
    "FIXES",
    "ConfinedOptions",
    "ConfinedSession",
    "Layer",
    "start_confined",
]

# bubblewrap's words when a mount below / changed while it was binding it (see _spawn)
_MOUNT_RACE = re.compile(
    r"bwrap: Can't (?:bind mount|remount) .*: (?:Invalid argument|No such file)"
)
_START_LIMIT = 20.0  # a loaded machine can be slow; a sandbox that does not start by then is broken
_REPLY_LIMIT = 5.0  # how long the supervisor may take to report after a kill
_DRAIN_GRACE = 0.25


async def start_confined(spec: SessionSpec) -> ConfinedSession:
    """Start a confined session: the sandbox and its supervisor, ready for commands.

    Raises InvalidArguments for bad options, Unavailable naming the layer and
    its fix when a layer cannot be applied (strict), ToolError when the
    sandbox fails for another reason.
    """
    options = ConfinedOptions.from_mapping(spec.options)
    session = ConfinedSession(spec, options)
    await session._start()
    return session


class ConfinedSession(SandboxArgv):
    """Commands in a warm, confined sandbox. See the module docstring for the layers."""

    name = "local"

    def __init__(self, spec: SessionSpec, options: ConfinedOptions) -> None:
        if options.network and not spec.network:
            spec = replace(spec, network=True)
        self._spec = spec
        self._options = options
        self._lock = trio.Lock()
        self._closed = False
        self._proc: _proc.Process | None = None
        self._sock: socket.socket | None = None
        self._limits: list[Path] = []
        self.layers: list[Layer] = []
        self.start_seconds = 0.0
        names = dict.fromkeys((*BASE_ENV_ALLOWLIST, *spec.passthrough_env))
        self._base_env = {n: os.environ[n] for n in names if n in os.environ}
        self._degraded: str | None = None  # why the namespaces are missing (best-effort)
        self._layer_fd: int | None = None
        self._rbuf = b""  # supervisor bytes received beyond the last message
        self._exec_sent = b""  # the exec rules the running supervisor has (``E``)
        self._exec_probe: Layer | None = None  # the ``exec checks`` layer, once probed
        self._exec_report: dict[str, Any] | None = None  # the last command's exec checks
        self._unmount_due = False  # a ``U`` (overlays unmounted) is still to come
        self._readonly: list[Path] = []
        self._kernel_layers: list[Layer] = []
        self._landlock: str | None = None
        self._seccomp: bytes | None = None
        self._layered = spec.change_sets
        self._layer_filter: bytes | None = None
        self._layers_dir: Path | None = None
        self._layers_claim: int | None = None  # the lock marking _layers_dir in use
        try:
            self._landlock = landlock_plan(spec.network or options.network)
        except LayerUnavailable as exc:
            self._kernel_layers.append(Layer("landlock", False, exc.message))
        try:
            self._seccomp = seccomp_program(layered=self._layered)
            if self._layered:
                self._layer_filter = layer_filter()
            self._kernel_layers.append(
                Layer(
                    "seccomp",
                    True,
                    f"{len(DENIED_SYSCALLS)} syscalls denied, no new namespaces, foreign ABIs "
                    "killed (installed by bubblewrap before the supervisor starts)",
                )
            )
        except LayerUnavailable as exc:
            self._kernel_layers.append(Layer("seccomp", False, exc.message))
        self._keeper = ShellKeeper(spec.shell, self._base_env, enabled=options.persist_shell_state)
        self._hidden = _hidden_dirs([Path(os.path.realpath(r)) for r in spec.roots])
        self._uid, self._gid = _session_user(spec.roots, self._hidden)

    # -- what the session is ----------------------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """For the ``backend_started`` event and ``doctor``: confined, level, layers, network."""
        missing = [layer.name for layer in self.layers if not layer.ok]
        return {
            "confined": True,
            "sandbox": self._options.sandbox,
            "network": self._spec.network,
            "missing_layers": missing,
            "layers": [layer.to_dict() for layer in self.layers],
            "start_ms": round(self.start_seconds * 1000, 1),
            "persist_shell_state": self._keeper.enabled,
            "exec_checks": self.exec_checks,
        }

    @property
    def exec_checks(self) -> bool:
        """Whether commands given deny rules have every exec checked against them: the
        option is on and the probe (made before the first such command) did not fail."""
        probed = self._exec_probe
        return self._options.exec_checks and (probed is None or probed.ok)

    async def probe_exec_checks(self) -> Layer:
        """The ``exec checks`` layer: probed now if it was not yet (see
        :meth:`_probe_exec_checks`); a sandbox that died is started again first."""
        async with self._lock:
            for _attempt in range(2):
                if self._sock is None:
                    await self._start()
                try:
                    return await self._probe_exec_checks()
                except _NotSent:
                    continue
            raise ToolError("the local sandbox died twice before its exec checks were probed")

    async def _probe_exec_checks(self) -> Layer:
        """The ``exec checks`` layer, probed in the sandbox the first time it is needed
        (``P``: a child installs the filter, the supervisor reads its exec); recorded in
        :attr:`layers`. Raises _NotSent when the sandbox is gone."""
        if self._exec_probe is not None:
            return self._exec_probe
        if not self._options.exec_checks:
            layer = Layer("exec checks", False, "switched off (local backend option exec_checks)")
        else:
            try:
                self._send(b"P")
            except OSError:
                await self._lost()
                raise _NotSent() from None
            reply = await self._reply(_START_LIMIT)
            if reply is None or reply[:2] not in (b"P+", b"P-"):
                await self._lost()
                raise _NotSent()
            detail = reply[2:].decode("utf-8", "replace")
            layer = Layer("exec checks", reply[:2] == b"P+", detail)
        self._exec_probe = layer
        self.layers = [*self.layers, layer]
        return layer

    @property
    def process_tracking(self) -> dict[str, str]:
        return {"method": "pid-namespace", "detail": "every process of the sandbox's PID namespace"}

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return self._keeper.environment(env)  # under persist_shell_state: the shell's exports

    # -- start ----------------------------------------------------------------------------

    async def _start(self) -> None:
        started = time.monotonic()
        self._readonly = [Path(os.path.realpath(p)) for p in self._spec.readonly_paths]
        if self._layered and self._layers_dir is None:
            self._layers_dir, self._layers_claim = await trio.to_thread.run_sync(
                claimed_layers, self._spec, len(self._spec.roots)
            )
        try:
            await self._spawn()
        except BaseException as exc:
            if self._layers_dir is not None and self._proc is None:  # nothing will use it
                with trio.CancelScope(shield=True):
                    await self._remove_layers()
            if not isinstance(exc, Unavailable):
                raise
            layer = getattr(exc, "layer", None)
            if self._options.sandbox == STRICT or layer != "namespaces" or self._layered:
                if self._layered and layer == "namespaces":
                    raise _refuse(
                        "overlay",
                        f"change sets need the sandbox's namespaces ({exc.message})",
                    ) from None
                raise
            # best-effort: the same supervisor without bubblewrap (see _degraded_argv)
            self._degraded = getattr(exc, "why", exc.message)
            await self._spawn()
        self.start_seconds = time.monotonic() - started

    async def _spawn(self) -> None:
        """:meth:`_spawn_once`, again (twice at most) when bubblewrap lost a race with the
        host's mount table: its read-only bind of ``/`` remounts each mount below it, and one
        that goes away meanwhile (a container's overlay, stopping) fails that with EINVAL.
        Nothing of that sandbox ran; the next try reads the table as it is then."""
        for attempt in range(3):
            try:
                await self._spawn_once()
                return
            except Unavailable as exc:
                if attempt == 2 or not _MOUNT_RACE.search(exc.message):
                    raise
            await trio.sleep(0.05 * (attempt + 1))

    async def _spawn_once(self) -> None:
        missing = [layer for layer in self._kernel_layers if not layer.ok]
        if missing and (self._options.sandbox == STRICT or self._layered):
            raise _refuse(missing[0].name, missing[0].detail)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        seccomp_r, seccomp_w = os.pipe()
        layer_r, layer_w = os.pipe()
        try:
            if self._seccomp is not None:  # a filter is a few hundred bytes: the pipe holds it
                os.write(seccomp_w, self._seccomp)
            os.close(seccomp_w)
            if self._layer_filter is not None:
                os.write(layer_w, self._layer_filter)
            os.close(layer_w)
            seccomp_fd = seccomp_r if self._seccomp is not None else None
            self._layer_fd = layer_r if self._layer_filter is not None else None
            argv, layers = self._argv(child.fileno(), info_w, block_r, seccomp_fd)
            fds = [child.fileno(), seccomp_r, layer_r]
            if self._switch_uid:
                fds += [info_w, block_r]
            try:
                proc = _proc.spawn(
                    argv,
                    cwd=Path("/"),
                    env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
                    pass_fds=fds,
                )
            except _proc.ExecFailed as exc:
                raise _refuse("namespaces", exc.message.strip()) from None
        except BaseException:
            parent.close()
            os.close(info_r)
            os.close(block_w)
            raise
        finally:
            child.close()
            os.close(info_w)
            os.close(block_r)
            os.close(seccomp_r)
            os.close(layer_r)
        self._proc = proc
        self._sock = parent
        made: list[tuple[list[Path], str]] = []

        async def make_limits() -> None:
            # In a thread, while the sandbox starts: making and joining cgroups is slow.
            group = proc.cgroup
            v2 = await trio.to_thread.run_sync(_v2_limits, group, self._options)
            if v2 is not None:  # the session's own cgroup (removed by _proc) holds the limits
                made.append(([group] if group else [], v2))
                return
            found = await trio.to_thread.run_sync(
                _make_limit_cgroups, self._options.pids, self._options.memory
            )
            self._limits = found[0]  # removed by _kill_sandbox, whatever happens next
            made.append(await trio.to_thread.run_sync(_join_limit_cgroups, proc.pid, *found))

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(make_limits)
                try:
                    if self._switch_uid:
                        await self._map_uid(info_r, block_w)
                finally:
                    os.close(info_r)
                    os.close(block_w)
                reply = await self._reply(_START_LIMIT)
            if reply is None or not reply.startswith(b"READY\n"):
                raise self._start_failure(reply)
            for line in reply.decode().splitlines()[1:]:
                sign, _, rest = line.partition("\t")
                layers.append(Layer(sign[1:], sign[0] == "+", rest))
            layers.append(self._apply_limits(*made[0]))
            missing = [layer for layer in layers if not layer.ok]
            if missing and self._options.sandbox == STRICT:
                raise _refuse(missing[0].name, missing[0].detail)
            if self._exec_probe is not None:  # a restarted sandbox: the same machine
                layers.append(self._exec_probe)
            self.layers = layers
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._kill_sandbox()
            raise

    async def _map_uid(self, info_r: int, block_w: int) -> None:
        """Map the sandbox's root to host root and the roots' owner to itself, then release it."""
        data = b""
        with trio.move_on_after(_START_LIMIT):
            while b"}" not in data:
                await trio.lowlevel.wait_readable(info_r)
                chunk = os.read(info_r, 4096)
                if not chunk:
                    break
                data += chunk
        m = re.search(rb'"child-pid":\s*(\d+)', data)
        if m is None:
            return  # bwrap failed: its stderr says why (read by the caller)
        pid = int(m.group(1))
        for kind, own in (("uid", self._uid), ("gid", self._gid)):
            Path(f"/proc/{pid}/{kind}_map").write_text(f"0 0 1\n{own} {own} 1\n")
        os.write(block_w, b"1")

    def _start_failure(self, reply: bytes | None) -> Exception:
        if reply is not None and reply.startswith(b"FAIL\n"):
            layer, _, message = reply[5:].decode().partition("\t")
            return _refuse(layer, message)
        assert self._proc is not None
        stderr = _read_available(self._proc.stderr)
        if "bwrap" in stderr or "namespace" in stderr or not stderr:
            why = stderr.strip() or "the sandbox exited before its supervisor started"
            return _refuse("namespaces", why)
        return ToolError(f"the local sandbox did not start: {stderr.strip()}")

    def _apply_limits(self, made: list[Path], detail: str) -> Layer:
        """The pids layer: the limit cgroups, else RLIMIT_NPROC (enough for a non-root uid)."""
        if made:
            return Layer("pids", True, detail)
        if self._uid != 0:
            return Layer("pids", True, f"RLIMIT_NPROC {self._options.pids} (uid {self._uid})")
        return Layer(
            "pids",
            False,
            f"commands run as host root, where RLIMIT_NPROC is not enforced, and no cgroup "
            f"with the pids controller is writable ({detail})",
        )

    # -- commands -------------------------------------------------------------------------

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
        follow_shell: bool = False,
        exec_rules: ExecRules | None = None,
    ) -> ShellResult:
        """Run one command in the sandbox (the :class:`BackendSession` contract).

        A sandbox that died between commands is started again first, and the
        result says ``session_restarted``; one that dies under the command
        gives ``status == "lost"``. Under ``persist_shell_state``,
        ``follow_shell`` starts the command in the shell's own directory
        rather than ``cwd`` (which stays the fallback), and the result's
        ``shell`` says what became of the state. ``exec_rules``: every exec of
        the command is checked against them (:mod:`._execcheck`); the
        result's ``exec_denied`` lists what was refused. Raises InvalidArguments,
        Unavailable (a restart found a layer gone, or ``exec_rules`` were given
        and the session has no exec checks), ToolError, ``trio.ClosedResourceError``.
        """
        cmd = check_command(command)
        cwd = check_run_arguments(cwd, timeout, output_cap)
        self.environment(env)  # env checked before the queue
        if not cwd.is_dir():
            raise InvalidArguments(f"cwd {cwd} is not a directory", field="cwd")
        if self._closed:
            raise trio.ClosedResourceError("the local backend session is closed")
        async with self._lock:
            if self._closed:
                raise trio.ClosedResourceError("the local backend session is closed")
            shell_run = self._keeper.begin(cmd, env, follow=follow_shell)  # the state now
            made: tuple[int, ...] = ()  # the uppers' modes as the command starts
            if self._layers_dir is not None:  # the last command's writes: read by now
                await self._layers_unmounted()
                ready = _uppers_ready(self._layers_dir, self._spec.roots)
                made = ready or await trio.to_thread.run_sync(
                    _empty_uppers, self._layers_dir, self._spec.roots
                )
            restarted = False
            for _attempt in range(2):
                if self._sock is None:  # the sandbox died under an earlier command
                    await self._start()
                    restarted = True
                if exec_rules is not None:
                    try:
                        probed = await self._probe_exec_checks()
                    except _NotSent:
                        continue
                    if not probed.ok:
                        raise _refuse("exec checks", probed.detail)
                keep = self._keeper.enabled  # the state comes back through a memfd
                state = os.memfd_create("ringfence-shell-state") if keep else None
                try:
                    await self._send_exec_rules(exec_rules)
                    result = await self._run(
                        shell_run.argv, cwd, shell_run.env, timeout, output_cap, on_output,
                        redact, state,
                    )  # fmt: skip
                    data = os.pread(state, STATE_LIMIT + 1, 0) if state is not None else b""
                    result = self._keeper.finish(shell_run, result, data)
                except _NotSent:  # the sandbox was gone before the command reached it
                    continue
                finally:
                    if state is not None:
                        os.close(state)
                if restarted and not result.session_restarted:
                    result = _replace_restarted(result)
                report = self._exec_report
                if report is not None:
                    denied = report if report.get("denied") else None
                    result = replace(
                        result,
                        execs_checked=int(report.get("checked", 0)),
                        exec_denied=denied and {k: v for k, v in denied.items() if k != "checked"},
                    )
                if self._layers_dir is not None:
                    result = replace(result, uppers=self._uppers(made))
                return result
            raise ToolError("the local sandbox died twice before a command could reach it")

    async def _send_exec_rules(self, rules: ExecRules | None) -> None:
        """``E`` + the rules, when they differ from what the supervisor has. Raises
        _NotSent when the sandbox is gone."""
        payload = rules.payload if rules is not None else b""
        if payload == self._exec_sent:
            return
        try:
            self._send(b"E" + payload)
        except OSError:
            await self._lost()
            raise _NotSent() from None
        self._exec_sent = payload

    async def _run(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None,
        redact: Callable[[str], str] | None,
        state: int | None = None,
    ) -> ShellResult:
        """One command on the wire; ``state`` (persist_shell_state) becomes its descriptor 3."""
        assert self._sock is not None
        self._exec_report = None
        out = Capture("stdout", on_output)
        err = Capture("stderr", on_output)
        started = time.monotonic()
        fields = [str(cwd), str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
        payload = b"R" + "\0".join(fields).encode("utf-8", "surrogateescape")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self._send(payload, (out_w, err_w) if state is None else (out_w, err_w, state))
        except OSError:
            for fd in (out_r, err_r):
                os.close(fd)
            await self._lost()
            raise _NotSent() from None
        finally:
            os.close(out_w)
            os.close(err_w)
        try:
            watch = _Watch(out_r, err_r, self._sock.fileno(), out, err)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        timed_out = False
        status: int | None = None
        try:
            with trio.move_on_after(timeout) as deadline:
                await watch.until(lambda: watch.exited)
            if deadline.cancelled_caught:
                timed_out = True
                status = await self._stop(watch)
            else:
                status = await self._status()
            if status is not None:
                with trio.move_on_after(_DRAIN_GRACE):
                    await watch.until(lambda: watch.pipes_closed)
        except BaseException:
            with trio.CancelScope(shield=True):
                if await self._stop(watch) is None:
                    await self._lost()
                elif self._layers_dir is not None:  # it ended: its overlays' ``U`` follows
                    self._unmount_due = True
            raise
        finally:
            watch.close()
        out.flush()
        err.flush()
        if status is None:  # the supervisor died or stopped answering: the sandbox is gone
            await self._lost()
            return _lost_result(started, out, err, output_cap, self._spec, redact, timed_out)
        if self._layers_dir is not None:
            self._unmount_due = True  # unmounting while run_shell reads the upper directories
        if os.WIFSIGNALED(status):
            sig: int | None = os.WTERMSIG(status)
            code = 128 + os.WTERMSIG(status)
        else:
            sig, code = None, os.WEXITSTATUS(status)
        return _result(code, sig, started, out, err, output_cap, self._spec, redact, timed_out)

    async def _stop(self, watch: _Watch) -> int | None:
        """SIGTERM to the command's processes, the grace period, SIGKILL; its wait status."""
        with contextlib.suppress(OSError):
            self._send(b"T")
        with trio.move_on_after(self._spec.kill_grace):
            await watch.until(lambda: watch.exited)
        if not watch.exited:
            with contextlib.suppress(OSError):
                self._send(b"K")
            with trio.move_on_after(_REPLY_LIMIT):
                await watch.until(lambda: watch.exited)
        if not watch.exited:
            return None
        return await self._status()

    async def _status(self) -> int | None:
        """The command's wait status (``X``), and its exec-check report when one follows."""
        reply = await self._reply(_REPLY_LIMIT)
        if reply is None or not reply.startswith(b"X"):
            return None
        status, _, report = reply[1:].partition(b"\n")
        if report:
            try:
                self._exec_report = json.loads(report.decode("utf-8", "surrogateescape"))
            except ValueError:
                self._exec_report = {"denied": 1, "denials": [], "unreadable": True}
        return int(status)

    def _send(self, payload: bytes, fds: tuple[int, ...] = ()) -> None:
        assert self._sock is not None
        data = len(payload).to_bytes(4, "big") + payload
        anc = [
            (
                socket.SOL_SOCKET,
                socket.SCM_RIGHTS,
                b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds),
            )
        ]
        sent = self._sock.sendmsg([data], anc if fds else [])
        if sent < len(data):
            self._sock.sendall(data[sent:])

    async def _reply(self, limit: float) -> bytes | None:
        """One message from the supervisor; None at end of file or after ``limit`` seconds.

        Bytes of the next message that arrived with this one stay buffered.
        """
        assert self._sock is not None
        sock = self._sock
        with trio.move_on_after(limit):
            while True:
                buf = self._rbuf
                if len(buf) >= 4 and len(buf) >= 4 + (n := int.from_bytes(buf[:4], "big")):
                    self._rbuf = buf[4 + n :]
                    return buf[4 : 4 + n]
                try:  # usually already there (the exit status): no trip through the loop
                    chunk = sock.recv(65536, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(sock)
                    continue
                if not chunk:
                    return None
                self._rbuf += chunk
        return None

    async def _lost(self) -> None:
        with trio.CancelScope(shield=True):
            await self._kill_sandbox()

    async def _kill_sandbox(self) -> None:
        """Stop the whole sandbox (its cgroup through _proc), remove its limit cgroups. Shielded.

        With its PID namespace, everything in it is SIGKILLed at once: nothing in it needs
        a graceful end (the overlays go with the supervisor's mount namespace), and
        waiting for the supervisor to see the socket close and exit added its exit to
        every close. Without one (best-effort, no bubblewrap) the supervisor itself stops
        its commands (they left its process group), so it is given the time to.
        """
        sock, self._sock = self._sock, None
        proc, self._proc = self._proc, None
        self._rbuf, self._unmount_due, self._exec_sent = b"", False, b""
        with trio.CancelScope(shield=True):
            if sock is not None:
                sock.close()  # (were the kill to fail, the supervisor exits on end of file)
            if proc is not None:
                if self._degraded is None:
                    # The cgroup, or bubblewrap's process group (its --die-with-parent and
                    # the PID namespace take the rest along); the leader's exit follows.
                    proc.kill_rest_now()
                with trio.move_on_after(1.0):
                    await proc.wait_leader()
                if not proc.leader_exited():
                    await proc.terminate(0.2)
                await proc.kill_rest()
                for fd in (proc.stdout, proc.stderr):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                proc.close()
            limits, self._limits = self._limits, []
            for path in limits:  # waits (bounded) for the members to finish exiting
                await trio.to_thread.run_sync(_remove_cgroup, path)

    async def _layers_unmounted(self) -> None:
        """Wait for the supervisor's ``U``: the last command's overlays are unmounted, so
        its upper directories may be emptied. Anything else: the sandbox is restarted."""
        if not self._unmount_due or self._sock is None:
            return
        self._unmount_due = False
        reply = await self._reply(_REPLY_LIMIT)
        if reply != b"U":
            await self._lost()

    def _uppers(self, made: tuple[int, ...]) -> tuple[Upper, ...]:
        """The command's upper directories; ``made``: their modes when it started."""
        assert self._layers_dir is not None
        return tuple(
            Upper(Path(root), self._layers_dir / str(i) / "upper", made_mode=mode)
            for i, (root, mode) in enumerate(zip(self._spec.roots, made, strict=True))
        )

    async def aclose(self) -> None:
        """Stop the sandbox (idempotent; shielded); later runs raise ClosedResourceError.

        Under change sets the upper directories are removed too (after the
        sandbox: nothing writes them any more).
        """
        self._closed = True
        await self._kill_sandbox()
        with trio.CancelScope(shield=True):
            await self._remove_layers()

    async def _remove_layers(self) -> None:
        """The upper directories go, then their in-use mark's lock (a killed session's are
        removed by the next session's start: :func:`._plan.claimed_layers`)."""
        layers, self._layers_dir = self._layers_dir, None
        claim, self._layers_claim = self._layers_claim, None
        try:
            if layers is not None:
                await trio.to_thread.run_sync(remove_tree, layers)
        finally:
            if claim is not None:
                os.close(claim)


# -- helpers ------------------------------------------------------------------------------


class _NotSent(Exception):
    """The command could not be handed to the supervisor (the sandbox is gone): retry once."""


def _read_available(fd: int) -> str:
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(OSError):
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def _lost_result(
    started: float,
    out: Capture,
    err: Capture,
    cap: int,
    spec: SessionSpec,
    redact: Callable[[str], str] | None,
    timed_out: bool = False,
) -> ShellResult:
    result = _result(None, None, started, out, err, cap, spec, redact, timed_out)
    return _replace_restarted(result)


def _replace_restarted(result: ShellResult) -> ShellResult:
    return replace(result, session_restarted=True)


# -- change sets: the session's upper directories -------------------------------------------
