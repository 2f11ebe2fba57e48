"""The confined local backend's supervisor: one per session, inside the sandbox.

Run by :mod:`ringfence.backends._confined` as ``python -I -S <this file>
<fd> <option>…`` inside bubblewrap's namespaces, as PID 1 of the new PID
namespace, already under the commands' seccomp filter (built by the kernel
with the script runner's BPF helpers, :mod:`._confined_layers`, and
installed by bubblewrap's ``--seccomp``). Standard library only, and few
imports: every millisecond here is session start. Over 500 lines on purpose:
it is a standalone program (``-I`` puts no sibling module on its path), and
its two modes (a session's commands, one ``exec``) share one ``confine``.

At start it confines *itself* (every command is its child, so every command
inherits all of it), in this order:

0. **uid** — when started as the namespace's root (a root kernel), become
   the workspace owner for good (``setgroups``, ``setresgid``,
   ``setresuid``: every capability goes).
1. **rlimits** — address space, open files, file size, no core files, CPU
   seconds, and ``RLIMIT_NPROC`` (enforced wherever the session's host uid
   is not root).
2. **no_new_privs** and not dumpable (a command cannot ptrace or write the
   memory of its supervisor).
3. **landlock** — a second wall on writes, as the kernel planned it
   (:func:`ringfence.backends._confined_layers.landlock_plan`): every
   write-type access right the ABI knows is handled and granted only
   beneath the workspace roots, the private ``/tmp`` and ``/dev``; without
   ``network``, TCP bind and connect are handled and never granted; signals
   and abstract Unix sockets are scoped to the sandbox.

Then it sends ``READY`` with its report (or ``FAIL`` naming the layer) and
serves requests, one command at a time: ``posix_spawn`` with ``setsid``, the
command's stdout/stderr are the pipes the kernel sent along
(``SCM_RIGHTS``), stdin is ``/dev/null``. When the command's main process exits, every other
process of the namespace is SIGKILLed at once (``kill(-1)`` from PID 1
reaches every process of the namespace and nothing outside it; a task
being forked when the signal lands never appears) and reaped; only then is
the exit status reported, so nothing a command starts outlives it.

Wire: each message is a 4-byte big-endian length and a payload.
kernel → supervisor: ``R`` + NUL-separated cwd, argc, argv…, ``NAME=value``…
(with the two pipe ends attached); ``T`` (SIGTERM to every process of the
command), ``K`` (SIGKILL to them). supervisor → kernel: ``READY\\n`` +
report lines, ``FAIL\\n`` + layer + tab + message, ``X`` + wait status.
End of file from the kernel: kill everything and exit.

``exec`` mode (``python -I -S <this file> exec <option>… -- <argv>…``, for
MCP stdio servers, :func:`ringfence.backends._confined.confined_argv`): no
control socket; the same confinement (the seccomp filter comes hex-encoded
in the options and is installed here, last), a one-line report on stdout,
then ``argv`` runs on the supervisor's own stdin/stdout/stderr; see
:func:`run_exec`.

Without namespaces (``pidns=0``, the backend's best-effort fallback) it runs
on the host as a child subreaper, installs the seccomp filter itself (last,
from the descriptor ``seccomp_fd``), and stops a command's processes by
finding its descendants in ``/proc`` until none is left (see :func:`kill_all`).
"""

from __future__ import annotations

import _signal
import _socket
import ctypes
import os
import resource
import select
import sys

STRICT = "strict"
BEST_EFFORT = "best-effort"

_SIGKILL = 9
_SIGTERM = 15
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_SYS_SECCOMP = 317
_SECCOMP_SET_MODE_FILTER = 1
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_RULE_PATH_BENEATH = 1


class LayerUnavailable(Exception):
    def __init__(self, layer: str, message: str) -> None:
        super().__init__(message)
        self.layer = layer
        self.message = message


# The kernel's structures (the same layout as the script runner's ``_sandbox``).
class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fail(layer: str, what: str) -> LayerUnavailable:
    return LayerUnavailable(layer, f"{what}: {os.strerror(ctypes.get_errno())}")


def apply_landlock(plan: str, writable: list[str]) -> str:
    """``plan`` is ``abi,fs,net,scoped,size,file_rights`` (see ``_confined_layers``)."""
    abi, fs, net, scoped, size, file_rights = (int(x) for x in plan.split(","))
    attr = _RulesetAttr(fs, net, scoped)
    ruleset = _libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise _fail("landlock", "landlock_create_ruleset")
    try:
        for path in writable:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = _PathBeneathAttr(fs if is_dir else fs & file_rights, fd)
                if _libc.syscall(
                    _SYS_LANDLOCK_ADD_RULE,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ):
                    raise _fail("landlock", f"landlock_add_rule({path})")
            finally:
                os.close(fd)
        if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            raise _fail("landlock", "landlock_restrict_self")
    finally:
        os.close(ruleset)
    covers = [f"ABI {abi}: writes only beneath {', '.join(writable)}"]
    if net:
        covers.append("no TCP bind/connect")
    if scoped:
        covers.append("signals and abstract sockets scoped")
    return "; ".join(covers)


def drop_privileges(uid: int, gid: int) -> str:
    """As the namespace's root, become ``uid``/``gid`` for good (every capability goes)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # A change of credentials clears the parent-death signal bubblewrap armed: arm it again.
    _prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    try:
        os.setuid(0)
    except PermissionError:
        return f"uid/gid {uid}/{gid}, no capabilities"
    raise LayerUnavailable("uid", "setuid(0) still succeeds after dropping root")


def apply_rlimits(conf: dict[str, str]) -> str:
    cpu = int(conf["cpu_seconds"])
    limits = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, int(conf["address_space"]), int(conf["address_space"])),
        (resource.RLIMIT_NOFILE, int(conf["open_files"]), int(conf["open_files"])),
        (resource.RLIMIT_FSIZE, int(conf["file_size"]), int(conf["file_size"])),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, int(conf["nproc"]), int(conf["nproc"])),
    ]
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as exc:
            raise LayerUnavailable("rlimits", f"setrlimit({which}) failed: {exc}") from None
    return (
        f"address space {int(conf['address_space']) >> 20} MiB, {conf['nproc']} processes, "
        f"{conf['open_files']} files, cpu {cpu} s, no core files"
    )


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise _fail("no_new_privs", f"prctl({option})")


def confine(conf: dict[str, str], writable: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Apply every layer; ``(applied, missing)``. Strict: the first failure raises."""
    level = conf.get("level", STRICT)
    applied: dict[str, str] = {}
    missing: dict[str, str] = {}

    def step(layer: str, fn: object) -> None:
        try:
            applied[layer] = fn()  # type: ignore[operator]
        except (LayerUnavailable, OSError) as exc:
            message = exc.message if isinstance(exc, LayerUnavailable) else str(exc)
            if level == STRICT:
                raise LayerUnavailable(layer, message) from None
            missing[layer] = message

    if "uid" in conf and os.getuid() == 0:
        # First: everything after (rlimits' process count, Landlock) holds for this user.
        step("uid", lambda: drop_privileges(int(conf["uid"]), int(conf["gid"])))
    step("rlimits", lambda: apply_rlimits(conf))

    def privs() -> str:
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        _prctl(_PR_SET_DUMPABLE, 0)
        return "no_new_privs; supervisor not dumpable"

    step("no_new_privs", privs)
    if "landlock" in conf:
        step("landlock", lambda: apply_landlock(conf["landlock"], writable))
    if "seccomp_fd" in conf:  # without bubblewrap, which installs it otherwise: last
        step("seccomp", lambda: apply_seccomp(int(conf["seccomp_fd"])))
    if "seccomp_hex" in conf:  # exec mode: no descriptor reaches bubblewrap, so here, last
        step("seccomp", lambda: install_seccomp(bytes.fromhex(conf["seccomp_hex"])))
    return applied, missing


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp(fd: int) -> str:
    """Install the kernel-built filter read from ``fd`` (best-effort mode, without bwrap)."""
    chunks = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return install_seccomp(b"".join(chunks))


def install_seccomp(program: bytes) -> str:
    """Install a kernel-built filter (also ``exec`` mode's, handed over hex-encoded in argv)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.syscall(
        _SYS_SECCOMP, ctypes.c_uint(_SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0), ctypes.byref(fprog)
    ):
        raise _fail("seccomp", "seccomp(SECCOMP_SET_MODE_FILTER)")
    return f"{len(program) // 8} instructions"


# -- the wire ------------------------------------------------------------------------------


def send(sock: _socket.socket, payload: bytes) -> None:
    sock.sendall(len(payload).to_bytes(4, "big") + payload)


def recv_exact(sock: _socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv(sock: _socket.socket) -> tuple[bytes, list[int]] | None:
    """One message and the descriptors that came with it; None at end of file."""
    fds: list[int] = []
    head, ancillary, _flags, _addr = sock.recvmsg(
        4, _socket.CMSG_SPACE(2 * 4), _socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [
                int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data) - 3, 4)
            ]
    if not head:
        return None
    rest = recv_exact(sock, 4 - len(head)) if len(head) < 4 else b""
    if rest is None:
        return None
    body = recv_exact(sock, int.from_bytes(head + rest, "big"))
    return (body, fds) if body is not None else None


# -- commands ------------------------------------------------------------------------------


_PIDNS = True  # PID 1 of its own PID namespace; False only in the best-effort fallback


def kill_all(sig: int) -> None:
    """Signal every process of the sandbox but this one.

    PID 1 of a PID namespace: ``kill(-1)`` reaches exactly the namespace's
    other processes. Without one (best-effort): every descendant of this
    process, found again until none is left (a child subreaper: an orphan is
    reparented here, so no process a command starts stops being one).
    """
    if _PIDNS:
        try:  # noqa: SIM105 (contextlib is one import more at every session start)
            os.kill(-1, sig)
        except ProcessLookupError:
            pass
        return
    for _ in range(1000 if sig == _SIGKILL else 1):
        found = descendants()
        if not found:
            return
        for pid in found:
            try:  # noqa: SIM105
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def descendants() -> list[int]:
    """Live (not zombie) descendants of this process, from ``/proc/*/stat``."""
    me = os.getpid()
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        state, ppid = data[data.rindex(b")") + 2 :].split()[:2]
        if state != b"Z":
            parent[int(name)] = int(ppid)
    out = []
    for pid in parent:
        up, hops = parent[pid], 0
        while up not in (me, 0, 1) and up in parent and hops < 4096:
            up, hops = parent[up], hops + 1
        if up == me and pid != me:
            out.append(pid)
    return out


def reap_all() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def find_program(name: str, env: dict[str, str]) -> tuple[str | None, int]:
    """What a shell would execute for ``name``: (path, 0), or (None, 127 not found / 126)."""
    if "/" in name:
        candidates = [name]
    else:
        candidates = [os.path.join(d or ".", name) for d in env.get("PATH", os.defpath).split(":")]
    code = 127
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_mode & 0o170000) == 0o100000 and os.access(path, os.X_OK):
            return path, 0
        code = 126
    return None, code


def spawn(cwd: str, argv: list[str], env: dict[str, str], out: int, err: int) -> tuple[int, int]:
    """Start the command: (pid, 0), or (0, wait status) when it could not start.

    ``posix_spawn`` (vfork) rather than ``fork``: it does not copy this
    process's page tables, which halves the cost of a command. The working
    directory is inherited, so the supervisor moves there first.
    """

    def failed(message: str, code: int) -> tuple[int, int]:
        os.write(err, f"ringfence: {message}\n".encode())
        return 0, code << 8

    try:
        os.chdir(cwd)
    except OSError as exc:
        return failed(f"cd {cwd}: {exc.strerror}", 126)
    path, code = find_program(argv[0], env)
    if path is None:
        return failed(
            f"{argv[0]}: {'command not found' if code == 127 else 'permission denied'}", code
        )
    try:
        pid = os.posix_spawn(
            path,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, err, 2),
            ],
            setsid=True,
            # Python ignores SIGPIPE and SIGXFSZ; a command expects the defaults.
            setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
        )
    except OSError as exc:
        return failed(f"{argv[0]}: {exc.strerror.lower() if exc.strerror else exc}", 126)
    return pid, 0


def run(sock: _socket.socket, body: bytes, fds: list[int]) -> bool:
    """Run one command to its end and report; False when the kernel went away."""
    fields = body[1:].decode("utf-8", "surrogateescape").split("\0")
    cwd, argc = fields[0], int(fields[1])
    argv = fields[2 : 2 + argc]
    env = dict(kv.split("=", 1) for kv in fields[2 + argc :] if kv)
    out, err = fds
    try:
        pid, status = spawn(cwd, argv, env, out, err)
    finally:
        os.close(out)
        os.close(err)
        os.chdir("/")
    if not pid:
        send(sock, b"X%d" % status)
        return True
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN)
    alive = True
    done = False
    while not done:
        for fd, _events in poller.poll():
            if fd == pidfd:
                done = True
                continue
            msg = recv(sock)
            if msg is None:  # the kernel is gone: stop everything
                alive = False
                kill_all(_SIGKILL)
                poller.unregister(sock.fileno())
            elif msg[0] == b"T":
                kill_all(_SIGTERM)
            elif msg[0] == b"K":
                kill_all(_SIGKILL)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    kill_all(_SIGKILL)  # the main process ended: nothing it started may outlive it
    reap_all()
    if alive:
        send(sock, b"X%d" % status)
    return alive


def serve(sock: _socket.socket) -> None:
    while True:
        msg = recv(sock)
        if msg is None:
            return
        body, fds = msg
        if body[:1] == b"R" and len(fds) == 2:
            if not run(sock, body, fds):
                return
        else:  # T/K between commands: nothing runs
            for fd in fds:
                os.close(fd)


# -- exec mode: one process on the caller's stdio (MCP stdio servers) ------------------------

# The first line on stdout in exec mode; ringfence.backends._confined_exec reads it.
REPORT_PREFIX = b"ringfence-sandbox:"


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def run_exec(args: list[str]) -> int:
    """``exec <option>… -- <argv>…``: confine, report, then run ``argv`` until it exits.

    The report is one line on stdout, before anything else is written there:
    ``ringfence-sandbox:READY`` or ``ringfence-sandbox:FAIL``, then per layer
    a tab, ``+``/``-``, its name, ``\x1f`` and its detail. ``argv`` then
    inherits stdin, stdout and stderr (the protocol's pipes) and every layer;
    when it exits, every other process of the namespace is killed and reaped,
    and the supervisor exits with its status.
    """
    split = args.index("--")
    conf: dict[str, str] = {}
    writable: list[str] = []
    for arg in args[:split]:
        key, _, value = arg.partition("=")
        if key == "write":
            writable.append(value)
        else:
            conf[key] = value
    argv = args[split + 1 :]
    os.closerange(3, 1 << 20)  # nothing bubblewrap passed on may reach the server
    if os.getpid() != 1:
        report = "FAIL\t-pid namespace\x1fthe supervisor is not PID 1 of its own PID namespace"
        write_all(1, REPORT_PREFIX + report.encode() + b"\n")
        return 1
    try:
        applied, missing = confine(conf, writable)
    except LayerUnavailable as exc:
        write_all(1, REPORT_PREFIX + f"FAIL\t-{exc.layer}\x1f{exc.message}\n".encode())
        return 1
    records = [f"\t+{k}\x1f{v}" for k, v in applied.items()]
    records += [f"\t-{k}\x1f{v}" for k, v in missing.items()]
    write_all(1, REPORT_PREFIX + ("READY" + "".join(records) + "\n").encode())
    env = dict(os.environ)
    path, code = find_program(argv[0], env)
    try:
        os.chdir(conf.get("cwd", "/"))
        if path is None:
            raise OSError(f"{argv[0]}: {'not found' if code == 127 else 'not executable'}")
        pid = os.posix_spawn(path, argv, env, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError as exc:
        write_all(2, f"ringfence: cannot start the server: {exc}\n".encode())
        return 126
    status = 0
    while True:  # PID 1 reaps every orphan until the server itself exits
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if got == pid:
            break
    kill_all(_SIGKILL)
    reap_all()
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main(args: list[str]) -> int:
    if args and args[0] == "exec":
        return run_exec(args[1:])
    fd = int(args[0])
    conf: dict[str, str] = {}
    writable: list[str] = []
    for arg in args[1:]:
        key, _, value = arg.partition("=")
        if key == "write":
            writable.append(value)
        else:
            conf[key] = value
    # Nothing else bubblewrap or the kernel passed on may reach a command.
    keep = sorted({0, 1, 2, fd, int(conf.get("seccomp_fd", fd))})
    for low, high in zip(keep, [*keep[1:], 1 << 20], strict=True):
        os.closerange(low + 1, high)
    sock = _socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    global _PIDNS
    _PIDNS = conf.get("pidns", "1") == "1"
    if _PIDNS and os.getpid() != 1:
        send(sock, b"FAIL\npid namespace\tthe supervisor is not PID 1 of its own PID namespace")
        return 1
    try:
        if not _PIDNS:  # every orphan of a command becomes ours, so it is found and killed
            _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        applied, missing = confine(conf, writable)
    except LayerUnavailable as exc:
        send(sock, f"FAIL\n{exc.layer}\t{exc.message}".encode())
        return 1
    lines = [f"+{k}\t{v}" for k, v in applied.items()] + [f"-{k}\t{v}" for k, v in missing.items()]
    send(sock, ("READY\n" + "\n".join(lines)).encode())
    serve(sock)
    kill_all(_SIGKILL)
    reap_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
