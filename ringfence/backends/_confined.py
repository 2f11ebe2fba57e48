"""The ``local`` backend: commands confined on this machine, in a warm sandbox per session.

One sandbox is started per session (bubblewrap, then a small Python
supervisor inside it, :mod:`._confined_supervisor`); every command is then
one ``posix_spawn`` of that supervisor, so confinement costs a one-time
start (bubblewrap ~5 ms, the supervisor's interpreter ~20 ms), not a
per-command namespace setup.

Why bubblewrap rather than ``unshare``/``clone`` from Python: the mount
layout (a recursive read-only bind of ``/`` with every submount made
read-only, masks, binds at their own paths, ``pivot_root``, a fresh
``/proc`` and ``/dev``) is exactly what bubblewrap has done correctly and
audited for years (Flatpak), it costs a few milliseconds once per session,
it is a Debian package, and it installs a seccomp program handed to it; the
only thing it lacks, Landlock, the supervisor adds.

Layers (all must apply, or the session refuses with ``unavailable`` naming
the layer and its fix, unless the operator chose ``sandbox="best-effort"``,
which is recorded in :attr:`ConfinedSession.metadata` and so in the
``backend_started`` event):

- **namespaces** (bubblewrap): new user, mount, PID, IPC, UTS, cgroup and
  network namespaces; no capabilities; no further user namespaces.
- **file system**: the host's file system read-only; the workspace roots
  read-write at their own paths; ``SessionSpec.readonly_paths`` inside the
  roots read-only (``run_shell``'s wiring passes every git directory and
  gitfile); a private ``/tmp`` and ``/var/tmp``; a fresh ``/proc``
  of the new PID namespace (no host process, no host ``environ``) and a
  minimal ``/dev``; ``/home``, ``/root``, ``/run``, the kernel's ``$HOME`` and
  ``/var/lib/docker`` hidden behind empty read-only directories (the
  Python installation that runs the supervisor is shown again, read-only).
- **network**: none (loopback of its own) unless the session asks for
  ``network``.
- **seccomp**: built here (:mod:`._confined_layers`, with the script
  runner's BPF helpers), installed by bubblewrap before the supervisor
  starts. **landlock**, **rlimits**: applied by the supervisor to itself
  (see its docstring). Every command inherits all three.
- **uid**: when the kernel runs as root and the first root belongs to
  another user, the sandbox runs as that user (files it makes are theirs,
  ``RLIMIT_NPROC`` holds); otherwise as the kernel's own user.
- **pids/memory**: a cgroup with ``pids.max``/``memory`` limits where a
  writable hierarchy has the controllers; a session whose commands run as
  host root (where ``RLIMIT_NPROC`` is not enforced) needs it.
- **process tree**: the PID namespace is the tree: when a command's main
  process ends, everything else in the namespace is killed; the whole
  sandbox is spawned through :mod:`ringfence._proc` (its cgroup tracking),
  so closing the session leaves nothing behind.

Files persist between commands (the roots, and the private ``/tmp`` for the
session's life); the working directory and exported variables do not.

Non-guarantees: a command can read what the session's user can read outside
the hidden directories (e.g. ``/etc``); renaming a directory that contains a
read-only git mount moves the mount with it, and a new ``.git`` can then be
made in its place (the same holds for the docker backend); Landlock cannot
protect git directories beneath a writable root (their read-only mounts
do); the seccomp filter is a deny list, x86-64 only.

``sandbox="best-effort"`` on a machine without namespaces (no bubblewrap,
or no unprivileged user namespaces): :meth:`ConfinedSession._degraded_argv`
says what still holds and what does not; the missing layers are recorded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio

from .. import _proc
from ..runtime import InvalidArguments, ToolError, Unavailable
from ._confined_layers import DENIED_SYSCALLS, LayerUnavailable, landlock_plan, seccomp_program
from ._local import BASE_ENV_ALLOWLIST, _result, _Watch
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

__all__ = [
    "FIXES",
    "ConfinedOptions",
    "ConfinedSession",
    "Layer",
    "confined_argv",
    "start_confined",
]

STRICT = "strict"
BEST_EFFORT = "best-effort"
_START_LIMIT = 20.0  # a loaded machine can be slow; a sandbox that does not start by then is broken
_REPLY_LIMIT = 5.0  # how long the supervisor may take to report after a kill
_DRAIN_GRACE = 0.25
_SIZE = re.compile(r"^(\d+)([bkmg]?)$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
BWRAP_VARIABLE = "RINGFENCE_BWRAP"  # where bubblewrap is, when not on PATH
_HIDDEN = ("/home", "/root", "/run", "/var/lib/docker", "/mnt", "/media", "/srv")
_SUPERVISOR = Path(__file__).resolve().parent / "_confined_supervisor.py"

# Each layer's fix, for the refusal and for ``ringfence doctor``.
FIXES = {
    "namespaces": "install bubblewrap (sudo apt-get install bubblewrap) and allow unprivileged "
    "user namespaces (sudo sysctl kernel.unprivileged_userns_clone=1 "
    "user.max_user_namespaces=15000; on Ubuntu also "
    "kernel.apparmor_restrict_unprivileged_userns=0)",
    "landlock": "boot Linux >= 5.13 with landlock in the lsm= list",
    "seccomp": "a Linux kernel with CONFIG_SECCOMP_FILTER on x86-64",
    "rlimits": "raise the hard limits this process runs with (ulimit -H)",
    "no_new_privs": "a Linux kernel >= 3.5",
    "pids": "run ringfence as an unprivileged user, or give the workspace to one "
    "(commands then run as its owner and RLIMIT_NPROC holds), or make a cgroup "
    "hierarchy with the pids controller writable",
    "pid namespace": "bubblewrap >= 0.3 (--as-pid-1)",
}


@dataclass(frozen=True)
class Layer:
    """One confinement layer of a session: applied (``ok``) or missing, and why."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class ConfinedOptions:
    """Options of the ``local`` backend (``SessionSpec.options``), checked before anything starts.

    ``sandbox``: ``strict`` (default; every layer or refuse) or
    ``best-effort`` (apply what this machine offers; the gaps are recorded).
    ``memory``: the session's memory where a cgroup can limit it, and each
    process's address space (``512m``-style; default ``4g``). ``pids``: the
    session's processes (default 512). ``file_size``: the largest file a
    command may write (default ``16g``). ``network``: ``True`` shares the
    host's network, as ``SessionSpec.network`` does (recorded).
    """

    sandbox: str = STRICT
    network: bool = False
    memory: int = 4 << 30
    pids: int = 512
    file_size: int = 16 << 30

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> ConfinedOptions:
        known = {"sandbox", "memory", "pids", "file_size", "network"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidArguments(
                f"unknown local backend option(s) {unknown}; known: {sorted(known)}",
                field="options",
            )
        sandbox = options.get("sandbox", STRICT)
        if sandbox not in (STRICT, BEST_EFFORT):
            raise InvalidArguments(
                f"sandbox must be {STRICT!r} or {BEST_EFFORT!r}, not {sandbox!r} "
                "(the unconfined shell is the 'host' backend)",
                field="options.sandbox",
            )
        pids = options.get("pids", cls.pids)
        if isinstance(pids, bool) or not isinstance(pids, int) or pids < 8:
            raise InvalidArguments(
                f"pids must be an integer of at least 8, not {pids!r}", field="options.pids"
            )
        network = options.get("network", False)
        if not isinstance(network, bool):
            raise InvalidArguments(
                f"network must be true or false, not {network!r}", field="options.network"
            )
        return cls(
            sandbox=sandbox,
            network=network,
            memory=_size(options, "memory", cls.memory),
            pids=pids,
            file_size=_size(options, "file_size", cls.file_size),
        )


def _size(options: Mapping[str, Any], name: str, default: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    m = _SIZE.match(str(value))
    if not m or int(m.group(1)) == 0:
        raise InvalidArguments(
            f"{name} must be a size like 512m, not {value!r}", field=f"options.{name}"
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


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


def confined_argv(
    spec: SessionSpec,
    argv: list[str],
    *,
    cwd: str = "/",
    writable: bool = True,
    options: ConfinedOptions | None = None,
) -> tuple[list[str], list[Layer]]:
    """One process confined like a session's commands, on the caller's stdin/stdout/stderr.

    Returns bubblewrap's argv (then the supervisor in ``exec`` mode, then
    ``argv``) and the layers known before it starts; the rest come in the
    supervisor's report, its first stdout line (``_confined_exec``). For MCP
    stdio servers, whose process the MCP SDK spawns: no descriptor can be
    passed, so the seccomp filter travels hex-encoded in the supervisor's
    options and is installed by it (last), and there is no uid switch (the
    sandbox runs as the kernel's own user) and no limit cgroup (the ``pids``
    layer is ``RLIMIT_NPROC``, which does not hold for a root kernel).
    ``writable=False`` binds the roots read-only and leaves them out of
    Landlock's writable paths. Strict always: raises Unavailable naming the
    first layer the kernel cannot plan (bubblewrap, Landlock, seccomp) and its fix.
    """
    options = options or ConfinedOptions()
    session = ConfinedSession(spec, options)
    missing = [layer for layer in session._kernel_layers if not layer.ok]
    if missing or session._seccomp is None:
        layer = missing[0] if missing else Layer("seccomp", False, "no filter was built")
        raise _refuse(layer.name, layer.detail)
    session._uid, session._gid = os.geteuid(), os.getegid()  # no uid switch (needs descriptors)
    roots = [str(Path(os.path.realpath(r))) for r in spec.roots]
    readonly = [*spec.readonly_paths, *([] if writable else roots)]
    session._readonly = [Path(os.path.realpath(p)) for p in readonly]
    wrapper, layers = session._argv(-1, -1, -1, None)  # raises when bubblewrap is missing
    cut = wrapper.index(str(_SUPERVISOR)) + 1  # the session's socket descriptor follows
    kept = [o for o in wrapper[cut + 1 :] if writable or o.removeprefix("write=") not in roots]
    wrapper = [*wrapper[:cut], "exec", *kept, f"seccomp_hex={session._seccomp.hex()}"]
    wrapper += [f"cwd={cwd}", "--", *argv]
    hidden = ", ".join(session._hidden)
    access = (
        f"read-write, {len(spec.readonly_paths)} git path(s) read-only" if writable else "read-only"
    )
    details = {
        "file system": f"host read-only; {len(roots)} root(s) {access}; private /tmp; "
        f"hidden: {hidden}",
        "seccomp": f"{len(DENIED_SYSCALLS)} syscalls denied, no new namespaces, foreign ABIs "
        "killed (installed by the supervisor, last)",
    }
    layers = [Layer(x.name, x.ok, details.get(x.name, x.detail)) for x in layers]
    return wrapper, layers


class ConfinedSession:
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
        self._readonly: list[Path] = []
        self._kernel_layers: list[Layer] = []
        self._landlock: str | None = None
        self._seccomp: bytes | None = None
        try:
            self._landlock = landlock_plan(spec.network or options.network)
        except LayerUnavailable as exc:
            self._kernel_layers.append(Layer("landlock", False, exc.message))
        try:
            self._seccomp = seccomp_program()
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
        }

    @property
    def process_tracking(self) -> dict[str, str]:
        return {"method": "pid-namespace", "detail": "every process of the sandbox's PID namespace"}

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self._base_env, **check_env(env)}

    # -- start ----------------------------------------------------------------------------

    @property
    def _switch_uid(self) -> bool:
        return os.geteuid() == 0 and self._uid != 0 and self._degraded is None

    def _argv(
        self, fd: int, info_fd: int, block_fd: int, seccomp_fd: int | None
    ) -> tuple[list[str], list[Layer]]:
        """bubblewrap's argv and the layers it provides. Raises Unavailable when bwrap is missing."""
        if self._degraded is not None:
            return self._degraded_argv(fd, seccomp_fd)
        bwrap = os.environ.get(BWRAP_VARIABLE) or shutil.which("bwrap")
        if bwrap is None or not os.access(bwrap, os.X_OK):
            raise _refuse("namespaces", f"bubblewrap ({bwrap or 'bwrap'}) is not installed")
        spec = self._spec
        roots = [Path(os.path.realpath(r)) for r in spec.roots]
        argv = [
            bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            *([] if spec.network else ["--unshare-net"]),
            "--die-with-parent",
            "--as-pid-1",
            "--new-session",
            "--hostname",
            "ringfence",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--tmpfs",
            "/tmp",
            "--perms",
            "1777",
            "--tmpfs",
            "/var/tmp",
        ]
        if self._switch_uid:
            # bwrap runs as root and the sandbox starts as its root (host root, mapped, with
            # capabilities in the namespace) until the supervisor becomes the roots' owner,
            # which also drops every capability; the uid maps are written by start().
            argv += ["--info-fd", str(info_fd), "--userns-block-fd", str(block_fd)]
        else:  # (with the uid switch, seccomp alone stops new user namespaces)
            argv += ["--cap-drop", "ALL", "--disable-userns"]
        hidden = self._hidden
        for path in hidden:
            argv += ["--tmpfs", path]
        masks = [Path(m) for m in (*hidden, "/tmp", "/var/tmp")]
        made: set[Path] = set()
        # What the supervisor needs, shown again if hidden: its interpreter and this package.
        python = os.path.realpath(sys.executable)
        shown = [Path(os.path.realpath(p)) for p in (sys.base_prefix, _SUPERVISOR.parent.parent)]
        for path in [*shown, *roots]:
            # Directories made inside a mask: searchable, so the roots' owner can reach a root
            # whose real parents are private (bwrap would copy their modes).
            for parent in reversed(path.parents):
                if parent not in made and any(m in parent.parents for m in masks):
                    made.add(parent)
                    argv += ["--perms", "0755", "--dir", str(parent)]
        for path in shown:
            if any(_inside(path, Path(h)) for h in hidden):
                argv += ["--ro-bind", str(path), str(path)]
        for root in roots:
            argv += ["--bind", str(root), str(root)]
        readonly = self._readonly
        for path in readonly:
            if path.exists() and any(_inside(path, r) for r in roots):
                argv += ["--ro-bind", str(path), str(path)]
        for path in hidden:  # last: binds above needed their mount points made first
            argv += ["--remount-ro", path]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        argv += ["--chdir", "/", "--", python, "-I", "-S", str(_SUPERVISOR)]
        argv += [str(fd), *self._supervisor_options([str(r) for r in roots])]
        net = "host network (session option network)" if spec.network else "none (own loopback)"
        layers = [
            Layer(
                "namespaces",
                True,
                f"bubblewrap: user, mount, pid, ipc, uts, cgroup, network; no capabilities; "
                f"uid {self._uid}",
            ),
            Layer(
                "file system",
                True,
                f"host read-only; {len(roots)} root(s) read-write; {len(readonly)} git "
                f"path(s) read-only; private /tmp; hidden: {', '.join(hidden)}",
            ),
            Layer("network", True, net),
            *self._kernel_layers,
        ]
        return argv, layers

    def _supervisor_options(self, roots: list[str]) -> list[str]:
        limits = self._options
        return [
            f"level={limits.sandbox}",
            f"network={int(self._spec.network)}",
            f"address_space={limits.memory}",
            f"nproc={limits.pids + (_processes_of(os.geteuid()) if self._degraded else 0)}",
            "open_files=4096",
            f"file_size={limits.file_size}",
            "cpu_seconds=86400",
            *([f"uid={self._uid}", f"gid={self._gid}"] if self._switch_uid else []),
            *([f"landlock={self._landlock}"] if self._landlock else []),
            *(f"write={r}" for r in (*roots, "/tmp", "/var/tmp", "/dev")),
        ]

    async def _start(self) -> None:
        started = time.monotonic()
        self._readonly = [Path(os.path.realpath(p)) for p in self._spec.readonly_paths]
        try:
            await self._spawn()
        except Unavailable as exc:
            if self._options.sandbox == STRICT or getattr(exc, "layer", None) != "namespaces":
                raise
            # best-effort: the same supervisor without bubblewrap (see _degraded_argv)
            self._degraded = getattr(exc, "why", exc.message)
            await self._spawn()
        self.start_seconds = time.monotonic() - started

    def _degraded_argv(self, fd: int, seccomp_fd: int | None) -> tuple[list[str], list[Layer]]:
        """best-effort without namespaces: the supervisor on the host, as the kernel's user.

        What still holds: Landlock (writes only beneath the roots, /tmp,
        /var/tmp and /dev; no TCP without network; no signals to processes
        outside the sandbox, ABI >= 6), seccomp (no ptrace), rlimits, and the
        tree (a child-subreaper supervisor kills every descendant). What does
        not: other processes of the same user are visible in ``/proc``
        (``/proc/<pid>/environ`` included: checked, Landlock does not stop
        it); the host file system is as readable as for the kernel's user (``~/.ssh``),
        /tmp is the host's, git metadata is writable, the network is the host's
        (UDP, Unix sockets), and a root kernel's commands run as root.
        """
        roots = [os.path.realpath(r) for r in self._spec.roots]
        argv = [os.path.realpath(sys.executable), "-I", "-S", str(_SUPERVISOR), str(fd)]
        argv += self._supervisor_options(roots)
        argv += ["pidns=0", *([f"seccomp_fd={seccomp_fd}"] if seccomp_fd is not None else [])]
        why = self._degraded or "no namespaces"
        layers = [
            Layer("namespaces", False, why),
            Layer(
                "file system",
                False,
                "no mount namespace: the host file system as the kernel's user sees it "
                "(~/.ssh readable, the host's /tmp, git metadata writable); writes limited by "
                "Landlock alone",
            ),
            Layer(
                "network",
                self._spec.network,
                "host network (session option network)"
                if self._spec.network
                else "no network namespace: host network; Landlock blocks TCP only",
            ),
            *[layer for layer in self._kernel_layers if layer.name != "seccomp" or not layer.ok],
        ]
        if os.geteuid() == 0:
            layers.append(Layer("uid", False, "no user namespace: commands run as root"))
        return argv, layers

    async def _spawn(self) -> None:
        missing = [layer for layer in self._kernel_layers if not layer.ok]
        if missing and self._options.sandbox == STRICT:
            raise _refuse(missing[0].name, missing[0].detail)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        seccomp_r, seccomp_w = os.pipe()
        try:
            if self._seccomp is not None:  # a filter is a few hundred bytes: the pipe holds it
                os.write(seccomp_w, self._seccomp)
            os.close(seccomp_w)
            seccomp_fd = seccomp_r if self._seccomp is not None else None
            argv, layers = self._argv(child.fileno(), info_w, block_r, seccomp_fd)
            fds = [child.fileno(), seccomp_r]
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
    ) -> ShellResult:
        """Run one command in the sandbox (the :class:`BackendSession` contract).

        A sandbox that died between commands is started again first, and the
        result says ``session_restarted``; one that dies under the command
        gives ``status == "lost"``. Raises InvalidArguments, Unavailable (a
        restart found a layer gone), ToolError, ``trio.ClosedResourceError``.
        """
        cmd = check_command(command)
        cwd = check_run_arguments(cwd, timeout, output_cap)
        child_env = self.environment(env)
        if not cwd.is_dir():
            raise InvalidArguments(f"cwd {cwd} is not a directory", field="cwd")
        if self._closed:
            raise trio.ClosedResourceError("the local backend session is closed")
        argv = [*self._spec.shell, cmd] if isinstance(cmd, str) else cmd
        async with self._lock:
            if self._closed:
                raise trio.ClosedResourceError("the local backend session is closed")
            restarted = False
            for _attempt in range(2):
                if self._sock is None:  # the sandbox died under an earlier command
                    await self._start()
                    restarted = True
                try:
                    result = await self._run(
                        argv, cwd, child_env, timeout, output_cap, on_output, redact
                    )
                except _NotSent:  # the sandbox was gone before the command reached it
                    continue
                if restarted and not result.session_restarted:
                    result = _replace_restarted(result)
                return result
            raise ToolError("the local sandbox died twice before a command could reach it")

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
        assert self._sock is not None
        out = Capture("stdout", on_output)
        err = Capture("stderr", on_output)
        started = time.monotonic()
        fields = [str(cwd), str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
        payload = b"R" + "\0".join(fields).encode("utf-8", "surrogateescape")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self._send(payload, (out_w, err_w))
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
            raise
        finally:
            watch.close()
        out.flush()
        err.flush()
        if status is None:  # the supervisor died or stopped answering: the sandbox is gone
            await self._lost()
            return _lost_result(started, out, err, output_cap, self._spec, redact, timed_out)
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
        reply = await self._reply(_REPLY_LIMIT)
        if reply is None or not reply.startswith(b"X"):
            return None
        return int(reply[1:])

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
        """One message from the supervisor; None at end of file or after ``limit`` seconds."""
        assert self._sock is not None
        sock = self._sock
        buf = b""
        with trio.move_on_after(limit):
            while True:
                if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    return buf[4:]
                try:  # usually already there (the exit status): no trip through the loop
                    chunk = sock.recv(65536, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(sock)
                    continue
                if not chunk:
                    return None
                buf += chunk
        return None

    async def _lost(self) -> None:
        with trio.CancelScope(shield=True):
            await self._kill_sandbox()

    async def _kill_sandbox(self) -> None:
        """Stop the whole sandbox (its cgroup through _proc), remove its limit cgroups. Shielded."""
        sock, self._sock = self._sock, None
        proc, self._proc = self._proc, None
        with trio.CancelScope(shield=True):
            if sock is not None:
                sock.close()  # the supervisor kills everything and exits
            if proc is not None:
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

    async def aclose(self) -> None:
        """Stop the sandbox (idempotent; shielded); later runs raise ClosedResourceError."""
        self._closed = True
        await self._kill_sandbox()


# -- helpers ------------------------------------------------------------------------------


class _NotSent(Exception):
    """The command could not be handed to the supervisor (the sandbox is gone): retry once."""


def _refuse(layer: str, why: str) -> Unavailable:
    """``unavailable`` naming the layer, why, its fix and the ways out."""
    fix = FIXES.get(layer)
    exc = Unavailable(
        f"the confined local backend cannot apply its {layer} layer: {why}"
        + (f"; fix: {fix}" if fix else "")
        + "; or choose sandbox='best-effort' (--sandbox best-effort), or the unconfined "
        "'host' backend",
        field="backend",
    )
    exc.layer = layer  # type: ignore[attr-defined]
    exc.why = why  # type: ignore[attr-defined]
    return exc


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _hidden_dirs(roots: list[Path]) -> list[str]:
    """The directories hidden behind empty read-only ones: homes, /run, docker's state."""
    hidden = [h for h in _HIDDEN if os.path.isdir(h)]
    home = os.environ.get("HOME")
    if home and os.path.isdir(home):
        real = os.path.realpath(home)
        inside_hidden = any(_inside(Path(real), Path(h)) for h in hidden)
        if real != "/" and not inside_hidden and not any(_inside(Path(real), r) for r in roots):
            hidden.append(real)
    return hidden


def _session_user(roots: tuple[Path, ...], hidden: list[str]) -> tuple[int, int]:
    """Whose uid the sandbox runs as.

    The kernel's own, unless the kernel is root: then the first root's
    owner, when that user can reach every root (the real parents outside the
    sandbox's masks must be searchable by them), else root.
    """
    if os.geteuid() != 0 or not roots:
        return os.geteuid(), os.getegid()
    try:
        st = os.stat(roots[0])
    except OSError:
        return 0, 0
    masks = [Path(m) for m in (*hidden, "/tmp", "/var/tmp")]
    for root in roots:
        real = Path(os.path.realpath(root))
        for part in [*reversed(real.parents), real]:
            if any(m in part.parents for m in masks):
                continue  # made by the sandbox, searchable
            try:
                mode = part.stat()
            except OSError:
                return 0, 0
            bit = (
                stat.S_IXUSR
                if mode.st_uid == st.st_uid
                else stat.S_IXGRP
                if mode.st_gid == st.st_gid
                else stat.S_IXOTH
            )
            if not mode.st_mode & bit:
                return 0, 0
    return st.st_uid, st.st_gid


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """controller -> (mount point, this process's cgroup in it), for v1 pids and memory."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                own[c] = path
    found: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(rfields) < 3 or rfields[0] != "cgroup" or fields[3] != "/":
                continue
            for c in ("pids", "memory"):
                if c in rfields[2].split(",") and c in own:
                    found[c] = (fields[4], own[c])
    return found


def _v2_limits(group: Path | None, options: ConfinedOptions) -> str | None:
    """Limits on the sandbox's own cgroup v2 (made by _proc) where the controllers can be had.

    Each ancestor must delegate ``pids`` and ``memory`` to its children; one
    that does not is enabled here when allowed (the hierarchy's root, a
    cgroup without processes of its own). None when that fails: the caller
    tries cgroup v1. Never raises.
    """
    if group is None:
        return None
    mount = _proc._cgroup2_mount()
    if mount is None or Path(mount) not in group.parents:
        return None
    try:
        chain = [p for p in reversed(group.parents) if Path(mount) in (p, *p.parents)]
        for parent in chain:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            missing = [c for c in ("pids", "memory") if c not in enabled]
            if missing:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
        (group / "pids.max").write_text(str(options.pids))
        (group / "memory.max").write_text(str(options.memory))
        with contextlib.suppress(OSError):
            (group / "memory.swap.max").write_text("0")
    except OSError:
        return None
    return f"cgroup v2 pids.max={options.pids}, memory.max={options.memory}"


def _make_limit_cgroups(max_pids: int, memory: int) -> tuple[list[Path], str]:
    """A cgroup per limited controller, limits set, still empty; (made, detail). Never raises.

    Uses cgroup v1 ``pids``/``memory`` hierarchies where they are mounted and
    writable (hybrid hosts keep their controllers there). Without ``pids``
    nothing is made.
    """
    made: list[Path] = []
    done: list[str] = []
    why: list[str] = []
    name = f"ringfence-{os.getpid()}-{secrets.token_hex(4)}"
    settings = {
        "pids": ("pids.max", str(max_pids)),
        "memory": ("memory.limit_in_bytes", str(memory)),
    }
    mounts = _cgroup_mounts()
    for controller, (file, value) in settings.items():
        if controller not in mounts:
            why.append(f"no writable {controller} hierarchy")
            continue
        mount, own = mounts[controller]
        path = Path(mount) / own.lstrip("/") / name
        _sweep_limit_cgroups(path.parent)
        try:
            path.mkdir()
        except OSError as exc:
            why.append(f"{controller}: {exc.strerror}")
            continue
        try:
            (path / file).write_text(value)
        except OSError as exc:
            why.append(f"{controller}: {exc.strerror}")
            _remove_cgroup(path)
            continue
        made.append(path)
        done.append(f"{file}={value}")
    if not any(d.startswith("pids.") for d in done):
        for path in made:
            _remove_cgroup(path)
        return [], "; ".join(why)
    return made, "cgroup " + ", ".join(done)


def _join_limit_cgroups(pid: int, made: list[Path], detail: str) -> tuple[list[Path], str]:
    """Move bubblewrap (``pid``), then its children, into ``made``; before any command runs.

    bubblewrap first: a child it forks afterwards inherits the cgroups; one it
    forked before is listed afterwards. The supervisor forks nothing until the
    first command. Never raises.
    """
    try:
        for path in made:
            for member in (pid, *_children(pid)):
                with contextlib.suppress(ProcessLookupError):
                    (path / "cgroup.procs").write_text(str(member))
    except OSError as exc:
        return [], f"cannot join the limit cgroups: {exc.strerror}"
    return made, detail


def _processes_of(uid: int) -> int:
    """How many processes ``uid`` runs now (RLIMIT_NPROC counts them all without a user
    namespace, so the sandbox's allowance comes on top)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _sweep_limit_cgroups(parent: Path) -> None:
    """Remove the limit cgroups of ringfence processes that died (their sandboxes died too)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            prefix, pid, _ = (entry.name + "--").split("-", 2)
            dead = pid.isdigit() and not os.path.exists(f"/proc/{pid}")
            if prefix == "ringfence" and dead:
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)


def _remove_cgroup(path: Path) -> None:
    for _ in range(200):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return
            time.sleep(0.005)


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
