"""The ``docker`` backend: one warm, hardened container per session, one shell inside it.

Layout of a session (every choice below was measured; see the module notes)::

    container  (labels ringfence=1, ringfence.session=…, ringfence.owner=host:pid)
    ├─ pid 1   docker-init (--init)                          root, no capabilities
    │  └─      sleep  (the main process: keeps the container up) root, no capabilities
    └─ exec    env -i /bin/sh   ← the *supervisor*, stdin/stdout/stderr attached over the
       │                          Docker socket for the whole session         uid U
       │                          (without change sets it execs /.rf-bin/sh, an
       │                          executable-only copy: not dumpable, its memory
       │                          and so its end markers closed to commands)
       └─      setsid <command>  one per run(), its own session and group     uid U

A command is written to the supervisor's stdin as one line of shell; the
supervisor runs it in the background with ``setsid``, waits for it, kills
everything else of uid U (``kill -KILL -1``: the caller is spared, and the
main process is root, so only the command's tree can be hit), then prints a
per-command random marker carrying the exit status on stdout and stderr.
That costs one fork and two execs in the container instead of a
``docker exec`` (~70 ms) per command.

Timeouts and cancellation: the Docker API cannot kill an exec, so a short
``docker exec kill -USR1 <supervisor>`` makes the supervisor send SIGTERM to
every uid-U process but itself, and after the grace period ``-USR2`` sends
SIGKILL. If even that fails (a fork bomb can leave no pid for the exec), the
container is replaced and the result says ``session_restarted``. The socket
is always drained to the marker (or end of stream): on Engine 20.10 a socket
left unread makes later execs and even ``remove`` hang.

State between commands: files in ``/workspace`` (the host's) and ``/tmp``
(a tmpfs private to the session) persist. Nothing else does: every command
starts in the ``cwd`` it is given with exactly the environment it is given
(plus ``PWD``/``SHLVL`` that the shell sets), and background processes die
with the command that started them (unless ``persist_shell_state``: cwd and
exports carry over, :mod:`._shellstate`, through a file in ``/tmp``).

Hardening (all on by default, none can be turned off through options):
``cap_drop=ALL``, ``no-new-privileges``, read-only root filesystem, a sized
``noexec`` tmpfs on ``/tmp``, ``network none`` unless the session asks for a
network, memory (= memory+swap), CPU and pids limits, commands as a non-root
uid (the owner of the first workspace root, or 65534 when root owns it),
the default seccomp profile, the workspace bind-mounted at ``/workspace``
(further roots at ``/workspace2``, …) and every ``readonly_paths`` entry
mounted again read-only on top.
``run_shell`` passes the workspace's git directories *and* gitfiles (a
worktree's or submodule's ``.git`` file) as ``readonly_paths``, so a command
can neither write into them nor redirect a gitfile; git metadata a command
*creates* (a new ``.git`` in any spelling, a new git directory) and
setuid/setgid bits it sets are handled after the command by ``run_shell``'s
check on the host (see ``ringfence.backends._run_shell``): ``nosuid`` is not
available for bind mounts through the Engine API, and it would only stop
``exec`` through the container's mount, not clear the bit on the host's file.

Change sets (``SessionSpec.change_sets``): the roots are mounted read-only (as a
whole: no ``readonly_paths`` mounts; a root someone else owns as an id-mapped view,
:mod:`._idmap`), a host directory per session (:mod:`._upper`) at
``/.rf-uppers``, and :mod:`._seccomp`'s profile. The supervisor holds a user and mount namespace for the
session (:meth:`._shell.Supervisor.hold`); each command (:class:`._shell.HeldOverlay`)
gets a mount namespace of its own with an overlay per root, the uppers hidden, and
runs as the container user (not root) in a nested user namespace. (More than nine
roots: :func:`._shell.overlay_wrapper`, the same per command in a fresh user namespace.) ``uppers`` name the host directories; the next run (or
``aclose``) empties them. A failing mount is ``Unavailable``; gVisor is refused.

Non-guarantees: no disk quota: a command can fill the workspace's file
system (and ``/tmp`` only up to ``tmp_size``); overlay2 on ext4 cannot size a
bind mount (``storage_opt`` fails there), and a size-limited upper layer is
the change-set design's job (issue 15). A command can kill its own
supervisor (it runs as the same uid); the session then restarts and that
result says so. Markers are unguessable but a command that could read the
supervisor's memory could fake its own exit status (only its own).
``options.engines``: placed once, never moved; on a remote engine the roots are
shipped, not mounted, and writes come back as change sets (:mod:`..engines._remote`;
a TLS engine's supervisor stream is :mod:`._tls`). An ``ssh://`` engine is reached
through the session's own ssh forward (:mod:`..engines._ssh`), opened before the
client and closed after it; once it has ended, every call fails naming it.

The supervisor shell itself (its script, the stream frames, the markers) is
:mod:`ringfence.backends.docker._shell`; this module is the session around it.
Its 620 lines on purpose: the container's hardened creation and the
session's one lifecycle (start, recover, replace, stop a command) read as one
state machine; splitting them would scatter it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cache, partial
from pathlib import Path
from typing import Any

import docker
import psutil
import trio
from docker.types import Mount

from ...runtime._errors import InvalidArguments, ToolError, Unavailable
from ...workspace._resolver import PSEUDO_FILESYSTEMS
from .._mounts import kernel_state_mounts_below
from .._output import Capture, shell_result
from .._shellstate import ShellKeeper
from .._types import (
    Command,
    OutputCallback,
    SessionSpec,
    ShellResult,
    check_command,
    check_run_arguments,
)
from ..engines._engines import (
    Engine,
    EngineLoad,
    place_keeping,
    refuse_engine_files_inside_roots,
)
from ..engines._remote import UPPERS_DIR, RemoteWorkspace, engine_error, load_json, remote_workspace
from ..engines._ssh import SSHForward, open_forward
from . import _upper as upper
from ._api import connect_docker, docker_call, image_missing, map_docker_errors
from ._container import LEASE_TAIL, create_leased, refuse_image_volumes
from ._images import docker_location
from ._network import isolated_network
from ._options import DockerOptions, parse_user
from ._seal import SEAL_DIR, install_script
from ._seccomp import security_opt as change_set_seccomp
from ._shell import (
    OVERLAY_FAILED,
    CommandOutput,
    HeldOverlay,
    Supervisor,
    attach,
    overlay_unavailable,
    overlay_wrapper,
)
from ._tls import attach_tls
from ._warm import PoolShape, claim

__all__ = [
    "CONTAINER_LABEL",
    "OWNER_SPACE_LABEL",
    "DockerOptions",
    "DockerSession",
    "owner_space",
    "remove_stale_containers",
    "start_docker",
]

CONTAINER_LABEL = "ringfence"
# Where the owner label's pid names the owner (see owner_space).
OWNER_SPACE_LABEL = f"{CONTAINER_LABEL}.owner.space"
CONTAINER_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {
    "PATH": CONTAINER_PATH.split("=", 1)[1],
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}
# Without change sets: the supervisor's shell, a copy of /bin/sh it may run but not read
# (so it is not dumpable: a command of its uid cannot read its memory and its end markers).
PRIVATE_SHELL = f"{SEAL_DIR}/sh"
# A remote session's root-owned tmpfs for the files the host ships as root (scripts).
SHIPPED_FILES_DIR = "/opt/ringfence"
SHIPPED_FILES_TMPFS = "rw,nosuid,nodev,noexec,size=8m,mode=0755"
# Roots a supervisor holding the user namespace mounts per command (._seal's enter: one
# digit); a session with more runs each command under the wrapper script instead.
MAX_HELD_LAYERS = 9
# How long stopping a command may take beyond the grace period before the
# container is replaced instead.
_KILL_ROUND_TRIP = 5.0


@cache
def owner_space() -> str:
    """Where this process's pid is this process: its machine's boot and its pid namespace.

    A hostname does not say it (cloned machines, CI runners and containers share one): a
    same-named host whose pids are others took a live session's container on a shared
    engine for a dead owner's and removed it. Blocking (two reads of /proc, once)."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot}/{os.readlink('/proc/self/ns/pid')}"


async def start_docker(spec: SessionSpec) -> DockerSession:
    """Start a docker session: connect, check the image, start the container and supervisor.

    Raises Unavailable (with the command to run) when the daemon is not
    reachable or the image is missing; InvalidArguments for bad options or
    paths. Never falls back to another backend. A container created before a
    failure or cancellation is removed.
    """
    opts = DockerOptions.from_mapping(spec.options)
    engine, loads, forward = None, [], None
    # Before any engine is contacted: a pin, CA or key the session's tools could rewrite.
    await trio.to_thread.run_sync(refuse_engine_files_inside_roots, opts.engines, spec.roots)
    if opts.engines:  # an ssh engine's probe forward is kept for the session (one handshake)
        engine, loads, forward = await place_keeping(opts.engines)
    try:
        pool = None
        if spec.change_sets:  # a warm pool of this shape (._pool) hands out a started container
            taken, pool = claim(pool_shape(opts, engine, spec.network, len(spec.roots)))
            if taken is not None:
                if forward is not None:  # the pooled session has a forward of its own
                    await forward.aclose()
                try:
                    taken.adopt(spec, opts, loads, pool)
                except BaseException:
                    with trio.CancelScope(shield=True):
                        await taken.aclose()
                    raise
                return taken  # type: ignore[no-any-return]
        return await start_cold(spec, opts, engine, loads, pool=pool, forward=forward)
    except BaseException:
        if forward is not None:  # idempotent: a session that took it over closed it already
            await forward.aclose()
        raise


async def start_cold(
    spec: SessionSpec,
    opts: DockerOptions,
    engine: Engine | None,
    loads: Sequence[EngineLoad] = (),
    *,
    pool: Any = None,
    pooled: bool = False,
    forward: SSHForward | None = None,
) -> DockerSession:
    """A new container for ``spec`` (``pooled``: one a warm pool keeps, labelled so).
    ``pool``: the pool of this shape that had none warm (its figures go in the metadata).
    ``forward``: ``engine``'s open ssh forward, which the session takes over (and closes)."""
    session = DockerSession(spec, opts, engine, loads)
    session._forward = forward
    session.pooled = pooled
    session.pool = pool
    try:
        await session._start()
    except BaseException:
        with trio.CancelScope(shield=True):
            await session.aclose()
        raise
    return session


def engine_key(engine: Engine) -> str:
    """An engine's address, TLS and SSH settings as one string (the pools' shape compares it)."""
    return "|".join(
        str(x)
        for x in (engine.base_url, engine.tls_ca, engine.tls_cert, engine.tls_key)
        + (
            (engine.ssh_known_hosts, engine.ssh_identity, engine.ssh_socket, engine.ssh_accept_new)
            if engine.ssh
            else ()
        )
    )


def pool_shape(opts: DockerOptions, engine: Engine | None, network: bool, roots: int) -> PoolShape:
    """The warm-pool shape of a change-set session with these options on ``engine`` (None:
    the local daemon). A pooled session ships its roots, so its user is not the roots' owner:
    ``options.user``, else 65534 (ringfence's own uid when it does not run as root)."""
    given = parse_user(opts.user)[0] if opts.user else None
    return PoolShape(
        engine=engine_key(engine) if engine else engine_key(local_engine(opts)),
        image=opts.image,
        memory=opts.memory,
        cpus=float(opts.cpus),
        pids=opts.pids,
        tmp_size=opts.tmp_size,
        runtime=opts.runtime,
        network=network,
        user=upper.change_set_user(given) or opts.user or "65534:65534",
        roots=roots,
    )


def local_engine(opts: DockerOptions) -> Engine:
    """The daemon a session without ``engines`` uses, as an engine (``base_url`` or DOCKER_HOST)."""
    return Engine("local", opts.base_url or docker_location())


# The container's memory cgroup's count of OOM kills (cgroup v2, else v1), read after a
# command ended by SIGKILL: ``oom_kill N`` lines.
_OOM_COUNT = "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"
_OOM_KILLS = re.compile(rb"^oom_kill (\d{1,18})$", re.MULTILINE)
# How long a container whose removal failed may take to disappear before the session ends.
_REMOVAL_WAIT = 5.0


class DockerSession:
    """A warm container plus an attached supervisor shell. See the module docstring."""

    name = "docker"

    def __init__(
        self,
        spec: SessionSpec,
        opts: DockerOptions,
        engine: Engine | None = None,
        loads: Sequence[EngineLoad] = (),
    ) -> None:
        self._spec = spec
        self._opts = opts
        self.engine = engine
        self._loads = list(loads)
        self.session_id = secrets.token_hex(6)
        self._lock = trio.Lock()
        self._closed = False
        self._client: docker.DockerClient | None = None
        self._forward: SSHForward | None = (
            None  # an ssh engine's socket, forwarded (..engines._ssh)
        )
        self._container: Any = None
        self._image_id: str | None = None  # the image checked at the start (its id)
        # Why the session ended for good (a container that would not go): every call says so.
        self._ended: Unavailable | None = None
        self._lease: socket.socket | None = None  # the container's lifeline (._container)
        self._shell: Supervisor | None = None
        self._roots = _map_roots(spec.roots)
        self._mounts = _mounts(self._roots, spec.readonly_paths, spec.change_sets) + [
            Mount(target, str(host), type="bind", read_only=ro)
            for host, target, ro in spec.extra_mounts
        ]
        given = parse_user(opts.user)[0] if opts.user else None
        forced = upper.change_set_user(given) if spec.change_sets else None
        self._user = forced or opts.user or _default_user(spec.roots)
        self.pooled = False  # a warm pool's container (labelled so), until a session adopts it
        self.pool: Any = None  # the warm pool this session came from, or that had none warm
        # Bind-mounted roots the command's uid cannot write: said with every result, since
        # "Permission denied" in a command's output alone does not say why or what to do.
        self._notes = (
            _unwritable_notes(self._roots, parse_user(self._user), spec.readonly_paths)
            if not spec.change_sets and (engine is None or engine.local)
            else ()
        )
        self._uppers: upper.SessionUppers | None = None
        self._overlay: str | HeldOverlay | None = None
        self._remote: RemoteWorkspace | None = None
        if engine is not None and not engine.local:
            self._remote = remote_workspace(
                spec, engine, self.session_id, self._roots, parse_user(self._user), opts.ship_git
            )
            self._mounts = self._remote.mounts()
        elif spec.change_sets:
            uid, gid = parse_user(self._user)
            self._uppers = upper.SessionUppers(
                self.session_id, [r for r, _ in self._roots], (uid, gid), upper.uppers_base()
            )
            self._mounts.append(
                Mount(upper.CONTAINER_DIR, str(self._uppers.mount_source), type="bind")
            )
        self._base_env = {**BASE_ENV}
        for name in spec.passthrough_env:
            if name in os.environ:
                self._base_env[name] = os.environ[name]
        self._keeper = ShellKeeper(spec.shell, self._base_env, enabled=opts.persist_shell_state)
        self.restarts = 0
        self._oom_seen = 0  # the OOM kills of the container's memory cgroup said so far
        self._oom_checked = time.time()  # when it was last asked (its events since then)

    # -- public -------------------------------------------------------------------------------

    @property
    def container_id(self) -> str | None:
        return self._container.id if self._container is not None else None

    def alive(self) -> bool:
        """Whether the supervisor is still there (checked without blocking: a warm pool's
        container is handed out only while it is)."""
        return not self._closed and self._shell is not None and self._shell.alive()

    @property
    def user(self) -> str:
        """The ``uid:gid`` commands run as."""
        return self._user

    @property
    def metadata(self) -> dict[str, Any]:
        """For the ``backend_started`` event: a container, its image and OCI runtime."""
        return {
            "confined": True,
            "sandbox": "docker",
            "network": self._spec.network,
            "image": self._opts.image,
            "runtime": self._opts.runtime or "default",
            "persist_shell_state": self._keeper.enabled,
            **(self.engine.describe() if self.engine is not None else {}),
            **({"placement": [load_json(x) for x in self._loads]} if self._loads else {}),
            **({"pool": self._pool_json()} if self.pool is not None else {}),
        }

    def _pool_json(self) -> dict[str, Any]:
        """Whether this session's container came warm from a pool, and the pool's figures."""
        return {"claimed": self.pooled, **self.pool.stats().as_json()}

    def adopt(
        self, spec: SessionSpec, opts: DockerOptions, loads: Sequence[EngineLoad], pool: Any
    ) -> None:
        """Take this warm pool container for ``spec`` (same shape): its roots are shipped
        by the first command's sync, like any shipped session's (nothing of them is there)."""
        assert self._remote is not None and self.engine is not None
        roots = _map_roots(spec.roots)
        remote = remote_workspace(
            spec, self.engine, self.session_id, roots, parse_user(self._user), opts.ship_git
        )
        remote.take_over(self._remote)
        self._spec, self._opts, self._loads, self._roots, self._remote = (
            spec, opts, list(loads), roots, remote,
        )  # fmt: skip
        self._base_env = {**BASE_ENV}
        for name in spec.passthrough_env:
            if name in os.environ:
                self._base_env[name] = os.environ[name]
        self._keeper = ShellKeeper(spec.shell, self._base_env, enabled=opts.persist_shell_state)
        self._notes = ()
        self.pool = pool

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return self._keeper.environment(env)  # under persist_shell_state: the shell's exports

    def container_path(self, host_path: Path) -> str:
        """Where a host path inside a workspace root appears in the container.

        Raises InvalidArguments (field ``cwd``) for a path outside every root:
        the container cannot see it.
        """
        resolved = Path(host_path).resolve()
        for root, target in self._roots:
            if resolved == root or resolved.is_relative_to(root):
                rel = resolved.relative_to(root)
                return target if rel == Path(".") else f"{target}/{rel.as_posix()}"
        raise InvalidArguments(
            f"cwd {host_path} is not inside the docker session's workspace roots "
            f"({', '.join(str(r) for r, _ in self._roots) or 'none'})",
            field="cwd",
        )

    async def top(self) -> list[str]:
        """The command lines of every process in the container (``docker top``)."""
        container = self._require_container()
        listing = await docker_call(container.top, ps_args="-eo pid,user,args")
        titles = listing.get("Titles", [])
        col = titles.index("COMMAND") if "COMMAND" in titles else len(titles) - 1
        return [" ".join(row[col:]) for row in listing.get("Processes") or []]

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
    ) -> ShellResult:
        """The :class:`BackendSession` contract; ``follow_shell`` (persist_shell_state): start
        where the shell is, ``cwd`` the fallback; the result's ``shell`` says what was kept."""
        cmd = check_command(command)
        cwd = check_run_arguments(cwd, timeout, output_cap)
        where = self.container_path(cwd)
        self.environment(env)  # env checked before the queue
        if self._closed:
            raise trio.ClosedResourceError("the docker backend session is closed")
        try:
            async with self._lock:
                if self._closed:
                    raise trio.ClosedResourceError("the docker backend session is closed")
                if self._ended is not None:
                    raise self._ended
                await self._check_forward()
                restarted = False
                if self._shell is None or not self._shell.alive():
                    await self._recover()
                    restarted = True
                shell_run = self._keeper.begin(cmd, env, follow=follow_shell)  # the state now
                ran = await self._run(shell_run.argv, where, shell_run.env, timeout, output_cap,
                                      on_output, redact, restarted)  # fmt: skip
                return self._keeper.finish(shell_run, *ran)
        except (Unavailable, ToolError) as exc:
            if self.engine is None:
                raise
            await self._check_forward(wait=1.0)  # a call that failed as the forward ended
            raise engine_error(exc, self.engine) from exc.__cause__  # never a silent move

    async def _check_forward(self, *, wait: float = 0.0) -> None:
        """Unavailable naming the engine when its ssh forward has ended (never re-opened: the
        session's sandbox may be gone with it, and a new forward is a new connection).
        ``wait``: how long a forward that is dying may take to be seen gone."""
        if self._forward is None or self.engine is None:
            return
        why = await self._forward.wait_ended(wait) if wait else self._forward.ended()
        if why is not None:
            raise Unavailable(
                f"engine {self.engine.name} ({self.engine.base_url}): the session's ssh "
                f"forward to the engine ended ({why}); start a new session"
            )

    async def exec_attached(
        self, argv: Sequence[str], *, user: str, env: Mapping[str, str] | None = None
    ) -> tuple[str, trio.socket.SocketType]:
        """Start ``argv`` in the container with stdin/stdout/stderr attached; return (exec id, socket).

        The socket carries Docker's multiplexed stream (8-byte frame headers)
        out and the process's stdin in; shut down its write side for EOF on
        stdin. The process is not stopped by closing the socket: see
        :meth:`exec_info` for its host pid. Used by the script bridge, which
        runs its runner here as a uid other than :attr:`user` (the supervisor
        kills every process of that uid after each command). On a TLS engine the
        socket is :class:`._tls.TLSStreamSocket` (``send``/``recv``/``close``, no
        half-close).
        """
        client, container = self._client, self._require_container()
        assert client is not None
        await self._check_forward()  # an ssh engine's forward that ended: say so
        environment = [f"{k}={v}" for k, v in (env or {}).items()]
        if self.engine is not None and self.engine.tls:  # our own verified TLS stream
            return await attach_tls(
                self.engine, client, container.id, list(argv), user, environment
            )
        with map_docker_errors():
            return await trio.to_thread.run_sync(
                attach, client, container.id, list(argv), user, environment
            )

    @property
    def shipped_files_dir(self) -> str | None:
        """On a remote engine, a root-owned directory (a tmpfs) for files the host ships
        into the container as root (the script runner's, :mod:`ringfence.bridge._remote`);
        read-only to every command. None where the host's files are bind-mounted."""
        return SHIPPED_FILES_DIR if self._remote is not None else None

    @property
    def stream_bridge(self) -> bool:
        """Whether scripts must carry their bridge over the exec stream (a remote, TLS or
        ssh engine: no socket of this host can be mounted, or no host pid reached)."""
        return self.engine is not None and (
            self._remote is not None or self.engine.tls or self.engine.ssh
        )

    async def exec_info(self, exec_id: str) -> dict[str, Any]:
        """``Running``, ``ExitCode`` and ``Pid`` (host pid namespace) of an exec."""
        client = self._client
        assert client is not None
        info = await docker_call(client.api.exec_inspect, exec_id)
        return {k: info.get(k) for k in ("Running", "ExitCode", "Pid")}

    async def aclose(self) -> None:
        """End the supervisor, remove the container. Idempotent; never raises for cleanup."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            if self._shell is not None:
                await self._shell.close(graceful=True)
                self._shell = None
            if self._container is not None:
                with contextlib.suppress(Exception):
                    await docker_call(self._container.remove, force=True, v=True)
                self._container = None
            self._drop_lease()
            if self._remote is not None:
                await self._remote.remove_host_dir()
            if self._client is not None:
                with contextlib.suppress(Exception):
                    await trio.to_thread.run_sync(self._client.close)
                self._client = None
            if self._forward is not None:
                await self._forward.aclose()
                self._forward = None
            if self._uppers is not None:
                await trio.to_thread.run_sync(self._uppers.remove)

    # -- lifecycle ----------------------------------------------------------------------------

    async def _start(self) -> None:
        engine = self.engine
        url, tls = (engine.base_url, engine.tls_config()) if engine else (self._opts.base_url, None)
        if engine is not None and engine.ssh:
            if self._forward is None:
                self._forward = await open_forward(engine)
            url = self._forward.base_url
        try:
            self._client = await trio.to_thread.run_sync(lambda: connect_docker(url, tls=tls))
        except Unavailable as exc:
            await self._check_forward(wait=1.0)
            if self._forward is None or engine is None:
                raise
            raise exc.with_(
                message=f"engine {engine.name} ({engine.base_url}): ssh connected, but the "
                f"engine's socket {engine.ssh_socket} did not answer through the forward "
                f"(is ssh_socket its Docker socket, and may {engine.ssh_target()[0] or 'the user'} "
                f"use it?): {exc.message}"
            ) from exc.__cause__
        base = str(self._client.api.base_url)
        tls_ok = engine is not None and engine.tls  # our own attached stream (._tls)
        if base.startswith("https://") and not tls_ok:  # (ssh://: refused by connect_docker)
            raise Unavailable(
                f"the docker backend attaches to a shell over a unix socket, an engine table's "
                f"TLS, or an engine table's ssh forward; {base} (TLS from the environment) is "
                "not one: give it as an engine table (options.engines; docs/backends.md)"
            )
        try:
            image = await docker_call(self._client.images.get, self._opts.image)
        except Unavailable:
            if engine is None or engine.base_url == docker_location():
                raise image_missing(self._opts.image) from None
            # Not the local daemon's (image_missing names DOCKER_HOST's and builds there).
            raise Unavailable(
                f"engine {engine.name} ({engine.base_url}): the sandbox image "
                f"{self._opts.image} is not present on this engine; load it there (`docker "
                f"save {self._opts.image} | docker -H <the engine> load`, with its TLS files or "
                "over ssh), or build it on that machine",
                image=self._opts.image,
                engine=engine.name,
            ) from None
        refuse_image_volumes(self._opts.image, image.attrs)  # the daemon would make them
        # Every container of the session (a replacement's too) is made from the image checked
        # here, by its id: the tag may name another image by then.
        self._image_id = str(image.id)
        if self._opts.runtime is not None:
            info = await docker_call(self._client.info)
            if self._opts.runtime not in (info.get("Runtimes") or {}):
                raise Unavailable(
                    f"the Docker daemon has no runtime {self._opts.runtime!r} "
                    f"(it has {sorted(info.get('Runtimes') or {})}); for gVisor: apt-get install "
                    "runsc, register it in /etc/docker/daemon.json and reload dockerd "
                    "(`ringfence doctor` shows how)"
                )
        overlay = self._uppers is not None or self._remote is not None
        if overlay and self._opts.runtime == "runsc":
            raise Unavailable(upper.GVISOR_REFUSAL)
        with contextlib.suppress(Exception):
            await trio.to_thread.run_sync(
                partial(remove_stale_containers, self._client, local=self._remote is None)
            )
        if self._remote is not None:  # its host directories are this host's all the same
            with contextlib.suppress(OSError):
                await trio.to_thread.run_sync(
                    partial(_remove_orphaned_dirs, set(), owned_only=True)
                )
        if self._uppers is not None:
            await trio.to_thread.run_sync(self._uppers.create)
            for i, view in self._uppers.lowers.items():  # first the roots, in order
                self._mounts[i] = Mount(self._roots[i][1], str(view), type="bind", read_only=True)
        await self._create_container()
        await self._start_supervisor()
        if overlay and self._roots:  # fail closed here, not at the first call (and ship)
            await self.run(["true"], cwd=self._roots[0][0], env={}, timeout=30, output_cap=4096)

    async def _create_container(self) -> None:
        client = self._client
        assert client is not None
        self._oom_seen = 0  # a new container: a new memory cgroup, its count from zero
        self._oom_checked = time.time()
        opts = self._opts
        overlay = self._uppers is not None or self._remote is not None
        # Given the network: a bridge whose containers cannot reach each other (._network).
        network = await docker_call(isolated_network, client) if self._spec.network else "none"
        host: dict[str, Any] = dict(
            init=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"]
            + ([change_set_seccomp()] if self._uppers or self._remote else []),
            read_only=True,
            tmpfs={
                "/tmp": f"rw,nosuid,nodev,noexec,size={opts.tmp_size},mode=1777",
                **(self._remote.tmpfs(opts.memory) if self._remote else {}),
                # The per-command filter's installer (._seal): root's, read-only, executable;
                # without change sets the supervisor's own shell (PRIVATE_SHELL) instead.
                SEAL_DIR: f"rw,nosuid,nodev,exec,size={'16k' if overlay else '16m'},mode=0755",
                # Files shipped as root (the script runner's): read-only to every command.
                **({SHIPPED_FILES_DIR: SHIPPED_FILES_TMPFS} if self._remote else {}),
            },
            network_mode=network,
            mem_limit=opts.memory,
            memswap_limit=opts.memory,
            nano_cpus=int(float(opts.cpus) * 1e9),
            pids_limit=opts.pids,
            ipc_mode="private",
            mounts=self._mounts,
            **({"runtime": opts.runtime} if opts.runtime else {}),
        )
        if self._remote is not None:  # new volumes: nothing of the workspace is there yet
            self._remote.forget()
        space = await trio.to_thread.run_sync(owner_space)
        self._container, lease = await docker_call(
            partial(
                create_leased,
                client,
                image=self._image_id or opts.image,
                command=self._main_command(),
                name=f"ringfence-{self.session_id}-{self.restarts}",
                labels={
                    CONTAINER_LABEL: "1",
                    f"{CONTAINER_LABEL}.session": self.session_id,
                    f"{CONTAINER_LABEL}.owner": f"{socket.gethostname()}:{os.getpid()}",
                    OWNER_SPACE_LABEL: space,
                    **({f"{CONTAINER_LABEL}.pool": "1"} if self.pooled else {}),
                },
                environment=[CONTAINER_PATH],
                host=host,
            )
        )
        self._drop_lease()
        self._lease = lease

    def _drop_lease(self) -> None:
        """Close the lease of the container this session held (it goes, if not gone yet)."""
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    @property
    def _private_shell(self) -> str | None:
        """The supervisor's executable-only shell, without change sets; not under gVisor,
        which runs no program its user cannot read (a forged end marker stays possible)."""
        if self._uppers is not None or self._remote is not None or self._opts.runtime == "runsc":
            return None
        return PRIVATE_SHELL

    def _main_command(self) -> list[str]:
        """The container's main process (root, no capabilities): under change sets it first
        writes the per-command filter's installer (:mod:`._seal`); then it holds the lease."""
        steps = []
        if self._uppers is not None or self._remote is not None:
            steps.append(install_script())
        elif self._private_shell is not None:  # executable only (see Supervisor.start)
            new = f"{PRIVATE_SHELL}.new"
            steps.append(
                f"umask 022; cat /bin/sh > {new} && chmod 111 {new} && mv {new} {PRIVATE_SHELL}"
            )
        if self._remote is not None:
            steps.append(self._remote.main_setup())
        # The main process ends when the lease does (._container): its stdin's end of file.
        return ["/bin/sh", "-c", "".join(f"{step}; " for step in steps) + LEASE_TAIL]

    async def _start_supervisor(self) -> None:
        client, container = self._client, self._require_container()
        assert client is not None
        tls = self.engine is not None and self.engine.tls
        attacher = partial(attach_tls, self.engine, client, container.id) if tls else None
        self._shell = await Supervisor.start(
            client,
            container.id,
            self._user,
            overlay=self._uppers is not None or self._remote is not None,
            attacher=attacher,
            private_shell=self._private_shell,
        )
        if self._remote is not None:
            uid, gid = parse_user(self._user)
            await self._remote.prepare(self._shell)
            self._overlay = overlay_wrapper(
                self._remote.layers(), UPPERS_DIR, uid, gid, self._shell
            )
        elif self._uppers is not None:
            uid, gid = parse_user(self._user)
            layers = tuple(
                (target, *self._uppers.container_dirs(i))
                for i, (_, target) in enumerate(self._roots)
            )
            if len(layers) <= MAX_HELD_LAYERS:  # ._seal's enter takes one digit
                await self._shell.hold(uid, gid)
                self._overlay = HeldOverlay(layers, upper.CONTAINER_DIR, uid, gid)
            else:
                self._overlay = overlay_wrapper(layers, upper.CONTAINER_DIR, uid, gid, self._shell)

    async def _recover(self) -> None:
        """Bring the session back after its supervisor died: new shell, or new container."""
        if self._shell is not None:
            await self._shell.close(graceful=False)
            self._shell = None
        self.restarts += 1
        container = self._require_container()
        running = False
        with contextlib.suppress(Unavailable, ToolError):
            await docker_call(container.reload)
            running = container.status == "running"
        if not running:
            await self._discard_container("its main process ended")
            await self._create_container()
        await self._start_supervisor()

    async def _replace_container(self) -> None:
        """The last resort when a command cannot be stopped: a new container."""
        if self._shell is not None:
            await self._shell.close(graceful=False)
            self._shell = None
        await self._discard_container("a command that could not be stopped")
        self.restarts += 1
        await self._create_container()
        await self._start_supervisor()

    async def _discard_container(self, why: str) -> None:
        """Remove the container (forced: every process in it ends) before another takes its
        place. When it is still there after that (its removal failed: the daemon refused or
        did not answer), the session ends for good, Unavailable naming it: a new container
        beside one that may still run the command's processes would hide them."""
        container = self._container
        if container is None:
            return
        try:
            await docker_call(container.remove, force=True, v=True)
        except (Unavailable, ToolError, InvalidArguments) as exc:
            if await self._still_there(container.id, wait=_REMOVAL_WAIT):
                self._ended = Unavailable(
                    f"the docker backend session ended: its container {container.id[:12]} "
                    f"(after {why}) could not be removed ({exc.message}); nothing more runs in "
                    f"this session. Check it with `docker inspect {container.id[:12]}`, remove "
                    "it with `docker rm -f`, and start a new session"
                )
                raise self._ended from None
        self._container = None

    async def _still_there(self, container_id: str, *, wait: float) -> bool:
        """Whether the engine still lists the container after up to ``wait`` seconds (a
        removal the engine had begun itself, an auto-removed container's, may take a moment).
        True when it cannot say."""
        client = self._client
        if client is None:
            return True
        with trio.move_on_after(wait):
            while True:
                try:
                    found = await docker_call(
                        client.api.containers, all=True, filters={"id": container_id}
                    )
                except (Unavailable, ToolError, InvalidArguments):
                    return True
                if not any(c.get("Id") == container_id for c in found):
                    return False
                await trio.sleep(0.1)
        return True

    def _require_container(self) -> Any:
        if self._ended is not None:
            raise self._ended
        if self._container is None:
            raise Unavailable("the docker backend session has no container (it was closed)")
        return self._container

    # -- one command --------------------------------------------------------------------------

    async def _run(
        self,
        argv: list[str],
        where: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None,
        redact: Callable[[str], str] | None,
        restarted: bool,
    ) -> tuple[ShellResult, bytes]:
        """One command through the supervisor; its result and its saved shell state (b"")."""
        shell = self._shell
        assert shell is not None
        out = Capture("stdout", on_output)
        err = Capture("stderr", on_output)
        keep = self._keeper.enabled  # the command's descriptor 3: a file in the private /tmp
        run = CommandOutput(secrets.token_hex(12), out, err, state=keep)
        state_file = f"/tmp/.rf-shell-{self.session_id}" if keep else None
        started = time.monotonic()
        timed_out = False
        if self._uppers is not None and not self._uppers.clean:
            # The previous command's writes were the caller's to read until now (when it
            # wrote nothing, its check said so: no thread hop).
            await trio.to_thread.run_sync(self._uppers.empty)
        if self._uppers is not None:
            self._uppers.mark_used()
        if self._remote is not None:  # the host's files (and merged change sets) first
            await self._remote.sync(shell, self._require_container())
        try:
            await shell.send(shell.script(run.token, argv, where, env, self._overlay, state_file))
            with trio.move_on_after(timeout) as deadline:
                await shell.read_until_done(run)
            if deadline.cancelled_caught:
                timed_out = True
                restarted |= await self._stop(run)
        except BaseException:
            with trio.CancelScope(shield=True):
                if not run.done:
                    try:
                        if not shell.dead:
                            await self._stop(run)
                        elif self._shell is shell:  # its stream refused (a hostile frame):
                            await self._replace_container()  # what the command left goes
                    except Unavailable:
                        if self._ended is None:
                            raise
                        # the session ended (its container would not go): the next call says
                        # so; what interrupted this one (a cancellation) goes on
            raise
        memory_hit = False
        if shell.dead and not run.done and self._shell is shell:
            # The supervisor died under the command (the command may kill it: same uid), so
            # its kill of every process of the uid never ran: what the command left behind
            # would write the upper while the host reads it, and through a descriptor the
            # merged file. A new container ends them all (the old one is removed first).
            memory_hit = await self._memory_limit_hit()  # the old container's count
            await self._replace_container()
            restarted = True
        out.flush()
        err.flush()
        if run.status == "cwd":
            raise InvalidArguments(
                f"cannot enter cwd {where} in the container as uid {self._user}: it is "
                "missing or not accessible to that uid (a workspace root owned by root runs "
                "commands as 65534; make it readable or pass the user option)",
                field="cwd",
            )
        if self._uppers is not None:
            # No thread hop (~0.2 ms, more on busy cores): one lstat and one directory read
            # per root, as run_shell's own emptiness check of the uppers (_changesets).
            self._uppers.after_command()
        uppers = self._uppers.uppers() if self._uppers is not None else ()
        if self._remote is not None and self._shell is not None:
            uppers = await self._remote.fetch(self._shell, self.session_id)
        exit_code = int(run.status) if run.done and run.status.isdigit() else None
        sig = exit_code - 128 if exit_code is not None and 128 < exit_code < 128 + 65 else None
        if timed_out and exit_code is None:
            exit_code, sig = 137, 9
        elif exit_code == 137 and not timed_out:  # SIGKILL: by the OOM killer, or by a command
            memory_hit = await self._memory_limit_hit()
        o = out.finish(output_cap, self._spec.spool_dir, redact)
        e = err.finish(output_cap, self._spec.spool_dir, redact)
        if (self._uppers or self._remote) and exit_code == 125 and OVERLAY_FAILED in e.text:
            raise overlay_unavailable(e.text)
        result = shell_result(
            o,
            e,
            exit_code=exit_code,
            signal=sig,
            started=started,
            timed_out=timed_out,
            session_restarted=restarted,
            uppers=uppers,
            notes=self._notes + ((self._memory_note(lost=not run.done),) if memory_hit else ()),
        )
        return result, run.state

    async def _memory_limit_hit(self) -> bool:
        """Whether the kernel's OOM killer ended a process of the container's memory cgroup
        since it was last asked: its ``oom_kill`` count (cgroup v2 ``memory.events``, v1
        ``memory.oom_control``, read by a short exec; read-only to commands) went up, or,
        when no exec can start (memory full, the container gone with its main process), the
        daemon recorded an ``oom`` event of the container since then. Asked of this
        machine's daemon only (a ``unix://`` engine). False when it cannot say (a kernel or
        runtime that does not count, a remote engine)."""
        client, container = self._client, self._container
        if client is None or container is None:
            return False
        if self.engine is not None and not self.engine.base_url.startswith("unix://"):
            # An exec's output and an event stream are read whole by docker-py (a frame, a
            # chunk of any announced size): only this machine's daemon is asked.
            return False
        checked, self._oom_checked = self._oom_checked, time.time()

        def count() -> int | None:
            exec_id = client.api.exec_create(
                container.id, ["/bin/sh", "-c", _OOM_COUNT], user=self._user
            )["Id"]
            found = _OOM_KILLS.findall(bytes(client.api.exec_start(exec_id))[:4096])
            return max((int(n) for n in found), default=None)

        def events() -> bool:
            stream = client.api.events(
                since=int(checked) - 1,
                until=int(time.time()) + 1,
                filters={"container": container.id, "event": "oom"},
                decode=True,
            )
            try:  # a few at most: an engine's stream is not read without end
                return any(
                    int(event.get("timeNano") or 0) >= int(checked * 1e9)
                    for _, event in zip(range(64), stream, strict=False)
                    if isinstance(event, dict)
                )
            finally:
                with contextlib.suppress(Exception):
                    stream.close()

        with contextlib.suppress(Unavailable, ToolError, InvalidArguments):
            kills = await docker_call(count)
            if kills is not None:
                hit, self._oom_seen = kills > self._oom_seen, max(kills, self._oom_seen)
                return hit
        with contextlib.suppress(Unavailable, ToolError, InvalidArguments):
            return await docker_call(events)
        return False

    def _memory_note(self, *, lost: bool) -> str:
        """What a result says when the memory limit was reached (exit 137 alone does not)."""
        what = (
            "ended the sandbox's own shell with the command (the container was replaced)"
            if lost
            else "ended a process of this command (SIGKILL, exit 137)"
        )
        return (
            f"the container's memory limit ({self._opts.memory}, memory and swap; files in "
            f"/tmp and /dev/shm count too) was reached: the kernel's OOM killer {what}; "
            "give the docker backend a larger memory option, or use less"
        )

    async def _stop(self, run: CommandOutput) -> bool:
        """SIGTERM the command's tree, grace, SIGKILL; replace the container if that fails.

        Shielded; drains the socket to the marker. Returns whether the session restarted.
        """
        shell = self._shell
        assert shell is not None
        with trio.CancelScope(shield=True):
            for sig, wait in (("USR1", self._spec.kill_grace), ("USR2", _KILL_ROUND_TRIP)):
                if run.done or shell.dead:
                    break
                if not await self._signal_supervisor(shell.pid, sig):
                    continue
                with trio.move_on_after(wait):
                    await shell.read_until_done(run)
            if run.done:
                return False
            await self._replace_container()
            return True

    async def _signal_supervisor(self, pid: int, sig: str) -> bool:
        """``kill -SIG <supervisor>`` from a short exec; False if no exec could start."""
        client, container = self._client, self._container
        if client is None or container is None:
            return False

        def call() -> None:
            exec_id = client.api.exec_create(
                container.id, ["/bin/sh", "-c", f"kill -{sig} {pid}"], user=self._user
            )["Id"]
            client.api.exec_start(exec_id)

        try:
            await docker_call(call)
        except (Unavailable, ToolError, InvalidArguments):
            return False
        return True


# -- mounts, users, stale containers ----------------------------------------------------------


def _map_roots(roots: Sequence[Path]) -> list[tuple[Path, str]]:
    mapped: list[tuple[Path, str]] = []
    for i, root in enumerate(roots):
        resolved = Path(root).resolve()
        if not resolved.is_dir():
            raise InvalidArguments(f"workspace root {root} is not a directory", field="roots")
        mapped.append((resolved, "/workspace" if i == 0 else f"/workspace{i + 1}"))
    return mapped


def _mounts(
    roots: list[tuple[Path, str]], readonly: Sequence[Path], change_sets: bool = False
) -> list[Mount]:
    # Under change sets a root is an overlay's lower layer, read-only as a whole; a mount
    # below it (locked in the command's namespace) would keep the overlay from using it.
    mounts = [Mount(t, str(root), type="bind", read_only=change_sets) for root, t in roots]
    if not change_sets:  # (an overlay's lower shows no mount below it)
        mounts += _kernel_state_covers(roots)
    for path in readonly:
        resolved = Path(path).resolve()
        if not resolved.exists():
            raise InvalidArguments(f"readonly path {path} does not exist", field="readonly_paths")
        for root, target in roots:
            if resolved != root and resolved.is_relative_to(root):
                rel = resolved.relative_to(root).as_posix()
                if not change_sets:
                    mounts.append(
                        Mount(f"{target}/{rel}", str(resolved), type="bind", read_only=True)
                    )
                break
        else:
            raise InvalidArguments(
                f"readonly path {path} is not strictly inside a workspace root",
                field="readonly_paths",
            )
    return mounts


def _kernel_state_covers(roots: list[tuple[Path, str]]) -> list[Mount]:
    """An empty read-only cover for each kernel-state file system mounted below a root (a
    chroot's ``proc``, a bind-mounted ``/proc/<pid>/environ``): a root's bind mount is
    recursive, so the container saw the host's, whose files the file tools never read (a
    process's environment, the host's ``sysfs``). A directory gets a tiny tmpfs, a file
    ``/dev/null``."""
    kinds = set(PSEUDO_FILESYSTEMS.values())
    covers: list[Mount] = []
    for root, target in roots:
        for point in kernel_state_mounts_below(root, kinds):
            where = f"{target}/{Path(point).relative_to(root).as_posix()}"
            if os.path.isdir(point):
                covers.append(Mount(where, None, type="tmpfs", read_only=True, tmpfs_size=4096))
            else:
                covers.append(Mount(where, "/dev/null", type="bind", read_only=True))
    return covers


def _unwritable_notes(
    roots: Sequence[tuple[Path, str]], user: tuple[int, int], readonly: Sequence[Path]
) -> tuple[str, ...]:
    """A note for each root the container's ``uid:gid`` cannot create files in (mode bits;
    the container user has no supplementary groups), naming the fixes."""
    uid, gid = user
    notes = []
    ro = {Path(p).resolve() for p in readonly}
    for root, _target in roots:
        if root in ro:
            continue  # read-only on purpose
        st = root.stat()
        if st.st_uid == uid:
            bits = stat.S_IWUSR | stat.S_IXUSR
        elif st.st_gid == gid:
            bits = stat.S_IWGRP | stat.S_IXGRP
        else:
            bits = stat.S_IWOTH | stat.S_IXOTH
        if st.st_mode & bits == bits:
            continue
        notes.append(
            f"the workspace root {root} (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}) "
            f"is not writable by uid {uid}, which commands run as in the docker backend (never "
            "root; the owner of the first root, or 65534 when root owns it), so writes there "
            "fail with 'Permission denied'. To write it: keep change sets on (the default, "
            "which --no-change-sets or change_sets=False turned off: writes merged by "
            "ringfence as the root's owner), let a user own the root "
            f"(chown -R UID:GID {root}), or pass the docker option user=UID:GID of a user who "
            "can write it"
        )
    return tuple(notes)


def _default_user(roots: Sequence[Path]) -> str:
    """The owner of the first root, so commands can write there; 65534 when that is root."""
    if roots:
        st = Path(roots[0]).stat()
        if st.st_uid != 0:
            return f"{st.st_uid}:{st.st_gid}"
    return "65534:65534"


# A session's directories are made a moment before its container; younger ones are left alone.
ORPHAN_GRACE_SECONDS = 120.0


def _remove_orphaned_dirs(live: set[str], *, owned_only: bool = False) -> None:
    """Change-set directories (and id-mapped views) of sessions that have no container left.

    A leased container goes with its killed owner (``auto_remove``), so nothing
    would name its directories again; they are removed here, at the next docker
    session's start on this host, once older than :data:`ORPHAN_GRACE_SECONDS` and when
    the process they name as their owner is gone. ``owned_only`` (a remote session's start,
    which cannot list this host's containers): only directories that name an owner.
    """
    base = upper.uppers_base()
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.name in live or not entry.is_dir(follow_symlinks=False):
                continue
            if owned_only and not os.path.lexists(os.path.join(entry.path, upper.OWNER)):
                continue
            if upper.owner_alive(Path(entry.path)):
                continue  # its container is being restarted, say: the session lives
            if time.time() - entry.stat(follow_symlinks=False).st_mtime > ORPHAN_GRACE_SECONDS:
                upper.remove_session_dirs(entry.name, base)


def remove_stale_containers(client: docker.DockerClient, *, local: bool = False) -> int:
    """Remove ringfence containers whose owning process on this host is gone. Blocking.

    Only a container made in this boot and pid namespace (:func:`owner_space`) is judged:
    elsewhere its owner's pid means another process, whatever the hostname says.

    Their change-set directories go with them (:func:`._upper.remove_session_dirs`),
    and so do a shipped workspace's volumes on that engine. ``local`` (the client is this
    host's engine): also the directories no container names any more (a leased container
    is gone with its killed owner), see :func:`_remove_orphaned_dirs`.
    """
    host = socket.gethostname()
    removed = 0
    with map_docker_errors():
        containers = client.containers.list(
            all=True, filters={"label": CONTAINER_LABEL}, ignore_removed=True
        )
        if local:  # this host's engine: every local session's container is in the list
            _remove_orphaned_dirs(
                {c.labels.get(f"{CONTAINER_LABEL}.session", "") for c in containers}
            )
        for container in containers:
            owner = container.labels.get(f"{CONTAINER_LABEL}.owner", "")
            owner_host, _, pid = owner.rpartition(":")
            if owner_host != host or not pid.isdigit() or psutil.pid_exists(int(pid)):
                continue
            if container.labels.get(OWNER_SPACE_LABEL) != owner_space():
                continue  # made where its pid is not one of ours: only its own host knows
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
                removed += 1
            session = container.labels.get(f"{CONTAINER_LABEL}.session", "")
            # The labels are the engine's word: a container anyone with access to a shared
            # engine made can name a live session of this host. Its directories go only when
            # the process they name as their owner is gone (as the orphans' sweep checks).
            if re.fullmatch(r"[0-9a-f]{6,64}", session) and not upper.owner_alive(
                upper.uppers_base() / session
            ):
                upper.remove_session_dirs(session)
            if session:  # a shipped workspace's volumes (..engines._remote) go with their container
                label = f"{CONTAINER_LABEL}.session={session}"
                for volume in client.volumes.list(filters={"label": label}):
                    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                        volume.remove(force=True)
    return removed
