"""The docker backend's in-container supervisor: one attached ``sh`` runs a session's commands.

:class:`Supervisor` owns the exec's socket (Docker's multiplexed stream
frames both ways). Each command is one line of shell (:meth:`Supervisor.script`)
that runs it under ``setsid``, waits for it, kills every other process of the
uid, and prints a per-command random marker with the exit status on stdout and
stderr; :class:`CommandOutput` splits the frames into the two captures up to
the markers (holding back bytes that may start a marker). How the supervisor
is signalled and replaced is :mod:`ringfence.backends.docker._session`'s business.

Under ``persist_shell_state`` (:mod:`._shellstate`) the command's descriptor 3
is a file in the container's private ``/tmp`` its shell writes its state to;
the supervisor prints it between the stdout status line and a second marker,
and :class:`CommandOutput` keeps it (at most ``STATE_LIMIT`` + 1 bytes).

Non-guarantees: the markers are unguessable, but a command that could read the
supervisor's memory could fake its own exit status (only its own).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import docker
import trio

from ...runtime._errors import ToolError, Unavailable
from .._output import Capture
from .._shellstate import STATE_LIMIT
from ._api import map_docker_errors
from ._seal import ENTER_PATH, MOUNT_PATH, SEAL_PATH, USERNS_PATH

__all__ = [
    "OVERLAY_FAILED",
    "CommandOutput",
    "HeldOverlay",
    "Supervisor",
    "attach",
    "create_attached_exec",
    "overlay_unavailable",
    "overlay_wrapper",
    "own_socket",
    "quote",
]

_HEADER = struct.Struct(">BxxxL")
# (argv, user) -> (exec id, a connected socket or an object with its send/recv/fileno/close)
Attacher = Callable[[list[str], str], Awaitable[tuple[str, Any]]]
_READ_SIZE = 65536
# The largest frame of Docker's stream taken: dockerd writes at most 32 KiB a frame; a
# larger announcement (a hostile engine: up to 4 GiB) had the host buffer all of it.
MAX_FRAME = 1 << 20
# The longest status line after an end marker (the exit status, or "cwd", and the startup
# probe's tool paths).
_TRAILER_LIMIT = 4096


class CommandOutput:
    """Parsing state of one command's output: markers on both streams, then the status."""

    def __init__(self, token: str, out: Capture, err: Capture, *, state: bool = False) -> None:
        self.token = token
        self.marker = f"__rf{token}__".encode()
        end = state_marker(token).encode() if state else None
        self.streams = {
            1: _MarkedStream(self.marker, out, end),
            2: _MarkedStream(self.marker, err),
        }
        self.status = ""

    @property
    def state(self) -> bytes:
        """What the command's shell saved (``persist_shell_state``); b"" when nothing came."""
        return self.streams[1].state if self.done else b""

    @property
    def done(self) -> bool:
        return all(s.done for s in self.streams.values())

    def feed(self, stream_id: int, payload: bytes) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        stream.feed(payload)
        if stream_id == 1 and stream.done:
            self.status = stream.trailer


class _MarkedStream:
    """One output stream up to its end marker; holds back bytes that may start the marker."""

    def __init__(self, marker: bytes, capture: Capture, state_end: bytes | None = None) -> None:
        self.marker = marker
        self.capture = capture
        self.pending = b""
        self.found = False
        self.trailer_bytes = b""
        self.done = False
        # After the status line: the shell state up to this marker (persist_shell_state).
        self.state_end = state_end + b"\n" if state_end is not None else None
        self.in_state = False
        self.state = b""

    @property
    def trailer(self) -> str:
        return self.trailer_bytes.decode("ascii", "replace").strip()

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        if self.in_state:
            self._state(data)
            return
        if self.found:
            self._trail(data)
            return
        buf = self.pending + data
        at = buf.find(self.marker)
        if at >= 0:
            self.capture.feed(buf[:at])
            self.pending = b""
            self.found = True
            self._trail(buf[at + len(self.marker) :])
            return
        # Hold back only a tail that could be the start of the marker.
        keep = _marker_prefix_at_end(buf, self.marker)
        if keep:
            self.capture.feed(buf[: len(buf) - keep])
            self.pending = buf[len(buf) - keep :]
        else:
            self.capture.feed(buf)
            self.pending = b""

    def _trail(self, data: bytes) -> None:
        self.trailer_bytes += data
        if len(self.trailer_bytes) > _TRAILER_LIMIT and b"\n" not in self.trailer_bytes:
            # Longer than any status: a marker forged by a command that read it in its
            # supervisor's memory, then a flood with no line end. The stream is done (its
            # status unknown); nothing more of it is held.
            self.trailer_bytes = b""
            self.done = True
            return
        if b"\n" in self.trailer_bytes:
            self.trailer_bytes, _, rest = self.trailer_bytes.partition(b"\n")
            if self.state_end is None:
                self.done = True
            else:
                self.in_state = True
                self._state(rest)

    def _state(self, data: bytes) -> None:
        """The state's bytes up to the end marker; beyond STATE_LIMIT + 1 only the tail is
        kept (to find the marker): the keeper refuses an oversized state whole."""
        assert self.state_end is not None
        end = self.state_end
        start = max(len(self.state) - len(end) + 1, 0)
        buf = self.state + data
        at = buf.find(end, start)
        if at >= 0:
            self.state = buf[:at]
            self.done = True
        elif len(buf) > STATE_LIMIT + 2 * len(end):
            # Keep a too-large head's length (the keeper's refusal) and the tail to search.
            self.state = buf[: STATE_LIMIT + 1] + buf[-len(end) :]
        else:
            self.state = buf


def _peek(fd: int) -> bytes:
    """One byte from ``fd`` without consuming it; b"" at end of stream."""
    with socket.socket(fileno=os.dup(fd)) as dup:
        try:
            return dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return b"?"


def _marker_prefix_at_end(buf: bytes, marker: bytes) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of ``marker``."""
    start = max(len(buf) - len(marker) + 1, 0)
    at = buf.find(marker[:1], start)
    while at != -1:
        if marker.startswith(buf[at:]):
            return len(buf) - at
        at = buf.find(marker[:1], at + 1)
    return 0


def state_marker(token: str) -> str:
    """The line that ends a command's saved shell state on stdout (persist_shell_state)."""
    return f"__rfs{token}__"


def quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def create_attached_exec(
    client: docker.DockerClient,
    container_id: str,
    argv: list[str],
    user: str,
    environment: list[str] | None,
) -> str:
    """An exec of ``argv`` in ``/`` with stdin, stdout and stderr to attach (blocking)."""
    created = client.api.exec_create(
        container_id,
        argv,
        stdin=True,
        stdout=True,
        stderr=True,
        user=user,
        workdir="/",
        environment=environment,
    )
    return str(created["Id"])


def attach(
    client: docker.DockerClient,
    container_id: str,
    argv: list[str],
    user: str,
    environment: list[str] | None,
) -> tuple[str, trio.socket.SocketType]:
    """Create and start an exec with its streams attached (blocking; run in a thread)."""
    exec_id = create_attached_exec(client, container_id, argv, user, environment)
    raw = client.api.exec_start(exec_id, socket=True)
    # A plain connection (a unix socket) comes as the socket's file (``socket.SocketIO``); a
    # TLS one as an ``ssl.SSLSocket``, an ssh one as its channel.
    if not isinstance(raw, socket.SocketIO):
        with contextlib.suppress(Exception):
            raw.close()
        raise Unavailable(
            "the Docker connection is not a plain socket (TLS or ssh); "
            "the docker backend does not support it yet"
        )
    return exec_id, trio.socket.from_stdlib_socket(own_socket(raw))


def own_socket(raw: Any) -> socket.socket:
    """Our own descriptor of an attached stream docker-py returned (public ``fileno`` only).

    The HTTP machinery that produced the socket closes its copy whenever it is
    garbage-collected (its response and socket refer to each other), and only then. Its
    number is pointed at /dev/null meanwhile, so the connection is ours alone from here and
    the number is not reused before that close.
    """
    theirs = raw.fileno()
    mine = socket.socket(fileno=os.dup(theirs))
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.dup2(null, theirs, inheritable=False)
    finally:
        os.close(null)
    with contextlib.suppress(Exception):
        raw.close()
    return mine


OVERLAY_FAILED = "ringfence: the change-set overlay could not be set up"


def overlay_wrapper(
    layers: Sequence[tuple[str, str, str]], hidden: str, uid: int, gid: int, shell: Supervisor
) -> str:
    """The words a command runs under in change-set mode (``WORDS rf CWD INNER ENV… ARGV…``).

    :data:`._seal.USERNS_PATH` makes a new session and enters a fresh user
    namespace (the container user, ``uid``/``gid``, mapped to 0) and mount
    namespace, then runs a script as root there, which:

    1. mounts an overlay on each root's container path (``layers``: target,
       upper, work), the read-only root its lower layer;
    2. covers ``hidden`` (where the upper directories are mounted) with an
       empty read-only tmpfs, so the command reaches its writes only through
       the overlay;
    3. enters ``CWD`` again (now on the overlay) and starts the command in a
       *nested* user namespace where the container user is mapped to itself
       (``uid``/``gid``): the command is not root there, has no capabilities,
       and cannot unmount or remount what step 1 and 2 mounted (they belong to
       the outer namespace). Before its shell starts, :mod:`._seal` installs
       the command's own stacked seccomp filter (no mount, unshare, setns, new
       namespaces, …; the local backend's command filter), so nothing the
       command runs can make a namespace or mount, though the container's
       profile lets the wrapper. The nested namespace is entered by the same
       static program, which writes its own one-line maps while it still has
       that namespace's capabilities and loses them at the ``exec`` of the seal
       (a uid that is not 0 there): no second process, nothing waits in a loop
       (util-linux's ``setsid``/``unshare``, dynamic, and two shells spinning
       until the map was written cost 5-20 ms a command on two busy cores).

    Any failure prints :data:`OVERLAY_FAILED` and exits 125 before the
    command runs; the command never runs on the plain root.
    """
    fail = f'{{ echo {quote(OVERLAY_FAILED)}: "$1" >&2; exit 125; }}'
    # The container's static mount(2) program (._seal), written with the seal: util-linux's
    # mount(8) cost ~1.7 ms a call on the debian image here, twice a command.
    mount = MOUNT_PATH
    lines = [f"__rf_f() {fail}"]
    for target, upper, work in layers:
        # userxattr: opaque directories as user.overlay.opaque; a user namespace cannot set
        # trusted.* xattrs (without it, removing a lower directory fails with EIO). No
        # redirects, no metacopy, whatever the kernel's defaults: a renamed directory is
        # copied up whole and every file's data is in the upper (what changes_from_upper reads).
        opts = overlay_options(target, upper, work)
        lines.append(
            f"{mount} overlay {quote(target)} overlay {quote(opts)} || __rf_f 'mount {target}'"
        )
    lines += [
        f"{mount} rf {quote(hidden)} tmpfs mode=0,size=4k ro || __rf_f 'hide {hidden}'",
        'cd "$1" || __rf_f cwd',
        "__rf_i=$2; shift 2",
        # S…: a shell after the seal exports the variables and finds the program on PATH.
        # D…: the program is a path: this shell's last act exports them (our own text, read
        # whole before it runs, so a variable cannot change what follows), and only static
        # programs, which read no environment, run before the command.
        f'case $__rf_i in S*) exec {USERNS_PATH} U "{uid} 0 1" "{gid} 0 1" {SEAL_PATH} '
        '/bin/sh -c "${__rf_i#S}" rf "$@";; esac',
        'eval "${__rf_i#D}"',
        f'exec {USERNS_PATH} U "{uid} 0 1" "{gid} 0 1" {SEAL_PATH} "$@"',
    ]
    script = "\n".join(lines)
    return f"{USERNS_PATH} S {quote(f'0 {uid} 1')} {quote(f'0 {gid} 1')} /bin/sh -c {quote(script)}"


# What a ``volatile`` overlay leaves in its work directory (``dirty`` inside it), which the
# next mount on that work directory refuses while it is there (the kernel clears the rest).
VOLATILE_MARK = "work/incompat/volatile"


def overlay_options(target: str, upper: str, work: str, *, volatile: bool = False) -> str:
    """An overlay's mount options on ``target`` (its own lower layer). ``volatile``: no
    sync of the upper's whole file system at unmount (the host's disk, under load several
    ms a command; the host reads the upper through the page cache), which leaves
    :data:`VOLATILE_MARK` in the work directory: the next command's :data:`._seal.ENTER_PATH`
    removes it before it mounts (a cancelled command's: :meth:`._upper.SessionUppers.empty`)."""
    return (
        f"lowerdir={target},upperdir={upper},workdir={work},"
        "userxattr,redirect_dir=nofollow,metacopy=off" + (",volatile" if volatile else "")
    )


def overlay_unavailable(stderr: str) -> Unavailable:
    """The error for a command whose overlay could not be set up (it did not run)."""
    return Unavailable(
        f"{stderr.strip()}; the command did not run. Change sets need an overlay in a user "
        "namespace inside the container: Linux 5.11 or newer, unprivileged user namespaces "
        "(on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0) and no AppArmor "
        "profile denying mount"
    )


@dataclass(frozen=True)
class HeldOverlay:
    """Change sets under a supervisor that holds the user namespace (:meth:`Supervisor.hold`).

    Per command, no wrapper shell and no ``mount(8)``: the supervisor's job is
    :data:`._seal.ENTER_PATH` (``setsid``, a mount namespace of the command's own,
    copied from the supervisor's, an overlay per ``layers`` entry (target, upper,
    work), an empty read-only tmpfs on ``hidden``, ``chdir``), then, in the same process
    image, what :func:`overlay_wrapper` gets from ``userns U`` and the seal: the nested
    user namespace (the container user mapped to itself, no capabilities after the
    program's ``exec``) and the seal's stacked filter. The mounts are the command's
    namespace's and vanish with it; the supervisor's namespace never has them.
    """

    layers: tuple[tuple[str, str, str], ...]
    hidden: str
    uid: int
    gid: int


# The supervisor's signal traps and its check for processes left (again after hold()'s exec).
# USR1/USR2: SIGTERM/SIGKILL to every process of this uid but the supervisor itself;
# __rf_k tells the command loop that the signal, not the command, ended its wait.
_SUPERVISOR_SETUP = (
    "trap '__rf_k=1; kill -TERM -1 2>/dev/null' USR1; "
    "trap '__rf_k=1; kill -KILL -1 2>/dev/null' USR2; "
    # Whether a process of this uid other than the supervisor is left (zombies count;
    # `kill -0 -1` cannot tell: it succeeds whenever any other process exists).
    '__rf_left() { for __rf_d in /proc/[0-9]*; do [ "${__rf_d#/proc/}" != $$ ] && '
    '[ -O "$__rf_d" ] && return 0; done; return 1; }; '
)


def _held_job(held: HeldOverlay, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> str:
    """A :class:`HeldOverlay` command: one static program, by path, before its own.

    A program given by path gets its variables exported by a subshell of the supervisor
    whose last act is the ``exec`` of :data:`._seal.ENTER_PATH` (our own quoted words, read
    whole: a variable changes nothing that follows; ``enter`` reads no environment); a name
    is found on ``PATH`` by a shell after the seal, which exports them from its arguments,
    as in :func:`overlay_wrapper`. (Looking the name up in the supervisor instead saved
    nothing measurable on busybox, whose shell runs the applet in its own process.)
    """
    layers = " ".join(
        f"{quote(target)} {quote(overlay_options(target, upper, work, volatile=True))} "
        f"{quote(f'{work}/{VOLATILE_MARK}/dirty')} {quote(f'{work}/{VOLATILE_MARK}')}"
        for target, upper, work in held.layers
    )
    enter = (
        f"{ENTER_PATH} {quote(cwd)} {quote(held.hidden)} {len(held.layers)} {layers} "
        f"{quote(f'{held.uid} 0 1')} {quote(f'{held.gid} 0 1')}"
    )
    words = " ".join(quote(a) for a in argv)
    if argv[0].startswith("/"):
        exports = "".join(f"export {quote(f'{k}={v}')}; " for k, v in env.items())
        return f"( {exports}exec {enter} {quote(argv[0])} {words} )"
    inner = 'export "$1"; shift; ' * len(env) + 'exec "$@"'
    assigns = " ".join(quote(f"{k}={v}") for k, v in env.items())
    return f"{enter} /bin/sh /bin/sh -c {quote(inner)} rf {assigns} {words}"


class Supervisor:
    """The attached ``sh`` that runs a session's commands. Owns the socket."""

    def __init__(self, sock: trio.socket.SocketType, pid: int, setsid: str) -> None:
        self.sock = sock
        self._fd = sock.fileno()
        self.pid = pid
        self.setsid = setsid
        self.unshare = ""
        self.mount = ""
        self.dead = False
        self._buffer = b""

    @classmethod
    async def start(
        cls,
        client: docker.DockerClient,
        container_id: str,
        user: str,
        *,
        overlay: bool = False,
        attacher: Attacher | None = None,
        private_shell: str | None = None,
    ) -> Supervisor:
        """Start the shell; with ``overlay`` it must also find ``unshare`` and ``mount``.
        With ``private_shell`` the shell is that executable-only copy of /bin/sh.

        ``attacher`` starts the exec attached another way than :func:`attach`
        (a TLS engine's stream, :func:`..engines._remote.attach_tls`).
        """
        argv = ["env", "-i", "/bin/sh"]
        if private_shell is not None:
            # The container's main process (root) copies /bin/sh there, executable only: a
            # process that runs a program it cannot read is not dumpable, so a command (its
            # uid) cannot read the shell's memory (/proc/PID/mem), where its end marker is.
            argv += ["-c", (
                f"__rf_w=0; until [ -x {private_shell} ] || [ $__rf_w -ge 300 ]; do "
                "sleep 0.01; __rf_w=$((__rf_w+1)); done; "
                f"exec {private_shell}"
            )]  # fmt: skip
        if attacher is not None:
            _exec_id, sock = await attacher(argv, user)
        else:
            with map_docker_errors():
                _exec_id, sock = await trio.to_thread.run_sync(
                    attach, client, container_id, argv, user, None
                )
        shell = cls(sock, 0, "setsid")
        token = secrets.token_hex(12)
        ready = f"__rf{token}__".encode()
        preamble = (
            _SUPERVISOR_SETUP
            + "__rf_s=$(command -v setsid); __rf_u=$(command -v unshare); __rf_m=$(command -v mount); "
            # Change sets: the container's main process writes the seal (._seal) at start.
            + (
                f"__rf_w=0; until [ -x {SEAL_PATH} ] || [ $__rf_w -ge 300 ]; do "
                "sleep 0.01; __rf_w=$((__rf_w+1)); done; "
                f"[ -x {SEAL_PATH} ] && __rf_z=1; "
                if overlay
                else ""
            )
            + f"printf '%s%s s=%s u=%s m=%s z=%s\\n' {quote(ready.decode())} $$ \"$__rf_s\" "
            '"$__rf_u" "$__rf_m" "$__rf_z"; '
            f"printf '%s\\n' {quote(ready.decode())} >&2\n"
        )
        probe_out = Capture("stdout", None)
        probe = CommandOutput(token, probe_out, Capture("stderr", None))
        try:
            await shell.send(preamble)
            with trio.move_on_after(30):
                await shell.read_until_done(probe)
        except BaseException:
            with trio.CancelScope(shield=True):
                await shell.close(graceful=False)
            raise
        fields = probe.status.split()
        if not probe.done or not fields or not fields[0].isdigit():
            await shell.close(graceful=False)
            raise ToolError(
                f"the sandbox shell did not start in the container (got {probe.status!r}); "
                "the image needs /bin/sh and env"
                + (
                    f", and cat, chmod and mv for the container's main process to copy /bin/sh "
                    f"to {private_shell}"
                    if private_shell
                    else ""
                )
            )
        # Absolute paths, or bare names when busybox runs its own applets (standalone shell).
        tools = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        needed = {"s": "setsid"} | ({"u": "unshare", "m": "mount"} if overlay else {})
        if (
            overlay
            and tools.get("z") != "1"
            and not [n for k, n in needed.items() if not tools.get(k)]
        ):
            await shell.close(graceful=False)
            raise Unavailable(
                f"the container's main process did not write the per-command seccomp filter's "
                f"installer {SEAL_PATH} (the image needs /bin/sh, base64, chmod and mv run as "
                "root); without it no command runs under change sets"
            )
        missing = [name for key, name in needed.items() if not tools.get(key)]
        if missing:
            await shell.close(graceful=False)
            raise Unavailable(
                f"the sandbox image has no {' or '.join(missing)} (util-linux or busybox)"
                + ("; change sets need both to mount the overlay" if overlay else "")
                + "; use a ringfence image (`ringfence images build busybox`)"
            )
        shell.pid, shell.setsid = int(fields[0]), tools["s"]
        shell.unshare, shell.mount = tools.get("u", ""), tools.get("m", "")
        return shell

    async def hold(self, uid: int, gid: int) -> None:
        r"""Make the supervisor itself root of a user namespace (``uid``/``gid`` mapped to 0)
        with a mount namespace of its own, for :class:`HeldOverlay` commands.

        The shell ``exec``\s :data:`._seal.USERNS_PATH` (same pid: the USR1/USR2 signals
        still reach it), which starts a new shell there; its traps are set again. Every
        process of the container user stays killable by ``kill -KILL -1`` as before (the
        same uid, and the commands' namespaces are below this one). The exec line goes
        alone, after a marker, so the old shell has read nothing after it. A kernel that
        refuses the namespaces: :func:`overlay_unavailable`.
        """
        token = secrets.token_hex(12)
        marker = quote(f"__rf{token}__")
        await self.send(
            f"printf '%s0\\n' {marker}; printf '%s\\n' {marker} >&2; "
            f"exec {USERNS_PATH} H {quote(f'0 {uid} 1')} {quote(f'0 {gid} 1')} /bin/sh\n"
        )
        await self._probe(CommandOutput(token, Capture("stdout", None), Capture("stderr", None)))
        token = secrets.token_hex(12)
        marker = quote(f"__rf{token}__")
        err = Capture("stderr", None)
        probe = CommandOutput(token, Capture("stdout", None), err)
        await self.send(
            f"{_SUPERVISOR_SETUP}printf '%s%s\\n' {marker} $$; printf '%s\\n' {marker} >&2\n"
        )
        await self._probe(probe)
        if probe.status != str(self.pid):
            await self.close(graceful=False)
            text = err.finish(4096, None, None).text if probe.status == "" else ""
            if OVERLAY_FAILED in text:
                raise overlay_unavailable(text)
            raise ToolError(
                f"the sandbox shell did not come back in its user namespace (got "
                f"{probe.status!r}{'; ' + text.strip() if text.strip() else ''})"
            )

    async def _probe(self, probe: CommandOutput) -> None:
        """Read one setup step's markers (30 s at most); the shell is closed on failure."""
        try:
            with trio.move_on_after(30):
                await self.read_until_done(probe)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.close(graceful=False)
            raise

    def script(
        self,
        token: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        overlay: str | HeldOverlay | None = None,
        state_file: str | None = None,
    ) -> str:
        """One line of shell that runs ``argv`` and prints the marker with its status.

        With ``overlay`` (a script from :func:`overlay_wrapper`, or a
        :class:`HeldOverlay` after :meth:`hold`) the command runs under it, and
        its environment is set only at its final ``exec``, so nothing it is
        given (``PATH``, ``IFS``) steers the wrapper. With
        ``state_file`` the command's descriptor 3 is that file (truncated
        first), printed after the status line and ended by :func:`state_marker`.
        """
        marker = quote(f"__rf{token}__")
        words = " ".join(quote(a) for a in argv)
        if overlay is None:
            assigns = " ".join(f"{k}={quote(v)}" for k, v in env.items())
            job = f"{assigns} {quote(self.setsid)} {words}"
        elif isinstance(overlay, HeldOverlay):
            job = _held_job(overlay, argv, cwd, env)
        else:
            # The variables are arguments, exported one by one: no value is ever parsed.
            exports = 'export "$1"; shift; ' * len(env)
            direct = argv[0].startswith("/")  # a string command: the session's shell by path
            inner = f"D{exports}" if direct else f'S{exports}exec "$@"'
            assigns = " ".join(quote(f"{k}={v}") for k, v in env.items())
            job = f"{overlay} rf {quote(cwd)} {quote(inner)} {assigns} {words}"
        state, saved, fresh = "", "", ""
        if state_file is not None:
            state = f" 3>{quote(state_file)}"
            # The file is in the container's /tmp, which the command writes too: a link it
            # left there would have the supervisor (whose view has the uppers unhidden, and on
            # a remote engine the shipped copy) write and read through it. No process of the
            # uid runs before the job starts or after the kill loop, so removing whatever is
            # there first and reading only a file that is no link is race-free.
            fresh = f"rm -f {quote(state_file)}; "
            # The file is printed whole (its size is checked by the kernel) after the status.
            saved = (
                f"[ -L {quote(state_file)} ] || cat {quote(state_file)} 2>/dev/null; "
                f"printf '%s\\n' {quote(state_marker(token))}; "
            )
        return (
            f"{fresh}if cd {quote(cwd)} 2>/dev/null; then "
            f"{job} </dev/null{state} & __rf_p=$!; __rf_k=0; "
            "wait $__rf_p 2>/dev/null; __rf_r=$?; "
            # A trapped USR1/USR2 interrupts wait; wait again for the command's own status.
            "while [ $__rf_k = 1 ]; do __rf_k=0; wait $__rf_p 2>/dev/null; __rf_r=$?; done; "
            "kill -KILL -1 2>/dev/null; "
            # ... and wait until they are gone (reaped by init), so nothing is left on return.
            "__rf_i=0; while __rf_left && [ $__rf_i -lt 400 ]; do "
            "kill -KILL -1 2>/dev/null; __rf_i=$((__rf_i+1)); [ $__rf_i -gt 100 ] && sleep 0.01; "
            "done; "
            f"else __rf_r=cwd;{' : >' + quote(state_file) + ';' if state_file else ''} fi; "
            f"printf '%s%s\\n' {marker} \"$__rf_r\"; {saved}printf '%s\\n' {marker} >&2\n"
        )

    def alive(self) -> bool:
        """Whether the shell is still there, checked without blocking before a command.

        Between commands the supervisor prints nothing, so a readable socket
        means end of stream: the container or the shell died in between, and
        the session is restored *before* the next command rather than under it.
        """
        if self.dead:
            return False
        try:
            ready = select.select([self._fd], [], [], 0)[0]
            if ready and not _peek(self._fd):
                self.dead = True
        except OSError:
            self.dead = True
        return not self.dead

    async def send(self, text: str) -> None:
        """Write to the shell's stdin; a broken connection marks the shell dead."""
        # surrogateescape: a saved variable's bytes that are not UTF-8 go back as they came.
        view = memoryview(text.encode("utf-8", "surrogateescape"))
        try:
            while view:
                sent = await self.sock.send(view)
                view = view[sent:]
        except OSError:
            self.dead = True

    async def read_until_done(
        self, run: CommandOutput, *, between: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Feed frames to ``run`` until both markers arrived or the stream ended.

        ``between`` is awaited after each read's frames are fed (and once at the end): a
        sink that takes output a read at a time (a fetched change set, spooled to disk)
        writes it there, so at most one read of it is ever held."""
        while True:
            self._parse(run)
            if between is not None:
                await between()
            if run.done or self.dead:
                return
            try:
                data = await self.sock.recv(_READ_SIZE)
            except OSError:
                data = b""
            if not data:
                self.dead = True
                return
            self._buffer += data

    def _parse(self, run: CommandOutput) -> None:
        """Consume whole frames from the buffer (none past the end of ``run``). A frame
        announced longer than :data:`MAX_FRAME` ends the stream: Unavailable."""
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= _HEADER.size and not run.done:
            stream_id, length = _HEADER.unpack_from(buf, pos)
            if length > MAX_FRAME:
                self.dead = True
                self._buffer = b""
                raise Unavailable(
                    f"the sandbox's stream sent a stream frame of {length} bytes (Docker's are "
                    f"at most 32 KiB; at most {MAX_FRAME} taken): the stream is refused and "
                    "ended, nothing of the command is used"
                )
            end = pos + _HEADER.size + length
            if end > len(buf):
                break
            run.feed(stream_id, buf[pos + _HEADER.size : end])
            pos = end
        self._buffer = buf[pos:]

    async def close(self, *, graceful: bool) -> None:
        """Ask the shell to exit and drain to end of stream (bounded), then close."""
        with trio.CancelScope(shield=True):
            if graceful and not self.dead:
                with trio.move_on_after(2.0):
                    await self.send("exit 0\n")
                    while True:
                        try:
                            data = await self.sock.recv(_READ_SIZE)
                        except OSError:
                            break
                        if not data:
                            break
            self.dead = True
            self.sock.close()
