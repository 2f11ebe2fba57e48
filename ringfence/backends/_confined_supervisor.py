"""The confined local backend's supervisor: one per session, inside the sandbox.

Run by :mod:`ringfence.backends._confined` as ``python -I -S <this file>
<bridge dir> <fd> <option>…`` inside bubblewrap's namespaces, as PID 1 of
the new PID namespace. Standard library only, like the script runner's
``_sandbox`` module, whose BPF and Landlock helpers it reuses (imported as a
top-level module from the bridge directory given as the first argument).

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
3. **landlock** — a second wall on writes: every write-type access right
   the ABI knows is handled and granted only beneath the workspace roots,
   the private ``/tmp`` and ``/dev``; ABI ≥ 4 without ``network``: TCP bind
   and connect are handled and never granted; ABI ≥ 6: signals and abstract
   Unix sockets are scoped to the sandbox.
4. **seccomp** — last: no ``ptrace`` or cross-process memory access, no
   keyctl/bpf/perf/userfaultfd/io_uring, no mounts, no new namespaces
   (``unshare``, ``setns``, ``clone`` with a namespace flag; ``clone3``
   answers ENOSYS so libc falls back to ``clone``), no module loading,
   reboot, clock or hostname changes. Foreign-ABI system calls kill the
   process.

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
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # the bridge directory holds _sandbox (standard library only)
    sys.path.insert(0, sys.argv[1])

import _signal
import _socket
import errno
import resource
import select

try:
    from ..bridge import _sandbox as sb
except ImportError:  # run as a script inside the sandbox
    import _sandbox as sb  # type: ignore[no-redef]

STRICT = "strict"
BEST_EFFORT = "best-effort"

_SIGKILL = 9
_SIGTERM = 15

# Write-type Landlock filesystem rights (ABI 1): write_file, remove_dir, remove_file,
# make_char, make_dir, make_reg, make_sock, make_fifo, make_block, make_sym.
_FS_WRITES_ABI1 = (1 << 1) | sum(1 << b for b in range(4, 13))
_FS_FILE_RIGHTS = (1 << 1) | sb._FS_TRUNCATE  # the rights a rule on a non-directory may carry

# clone flags that create namespaces (CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
# NEWUSER, NEWPID, NEWNET)
_CLONE_NEW_NAMESPACES = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NEW_NAMESPACES |= 0x20000000 | 0x40000000
_NR_CLONE = 56
_NR_CLONE3 = 435
_BPF_JSET_K = 0x45
# System calls a command may not make (EPERM), by name in the script runner's table.
DENIED_SYSCALLS = (
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # kernel facilities: keys, BPF, perf, userfaultfd, io_uring (which bypasses seccomp)
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # the machine
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "sethostname", "setdomainname", "iopl", "ioperm", "acct", "quotactl",
    "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
    "name_to_handle_at", "open_by_handle_at", "modify_ldt", "uselib",
)  # fmt: skip


def seccomp_program() -> bytes:
    """The commands' BPF filter (x86-64), built from the script runner's helpers."""
    if os.uname().machine != "x86_64":
        raise sb.LayerUnavailable(
            "seccomp", f"no seccomp filter is built in for {os.uname().machine} (only x86_64)"
        )
    ins = sb._insn
    eperm = sb._RET_ERRNO | errno.EPERM
    prog = [
        ins(sb._BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        ins(sb._BPF_JEQ_K, 1, 0, sb._AUDIT_ARCH_X86_64),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_KILL_PROCESS),
        ins(sb._BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        ins(sb._BPF_JGE_K, 0, 1, sb._X32_SYSCALL_BIT),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_KILL_PROCESS),
        # clone3's flags sit behind a pointer a filter cannot read: ENOSYS makes libc use clone
        ins(sb._BPF_JEQ_K, 0, 1, _NR_CLONE3),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_ERRNO | errno.ENOSYS),
        ins(sb._BPF_JEQ_K, 0, 4, _NR_CLONE),
        ins(sb._BPF_LD_W_ABS, 0, 0, 16),  # args[0], low half: the flags
        ins(_BPF_JSET_K, 0, 1, _CLONE_NEW_NAMESPACES),
        ins(sb._BPF_RET_K, 0, 0, eperm),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW),
    ]
    for nr in sorted({sb._DENIED_X86_64[name] for name in DENIED_SYSCALLS}):
        prog.append(ins(sb._BPF_JEQ_K, 0, 1, nr))
        prog.append(ins(sb._BPF_RET_K, 0, 0, eperm))
    prog.append(ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW))
    return b"".join(prog)


def apply_seccomp() -> str:
    import ctypes

    program = seccomp_program()
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = sb._SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    rc = sb._c().syscall(
        sb._SYS_SECCOMP,
        ctypes.c_uint(sb._SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(0),
        ctypes.byref(fprog),
    )
    if rc != 0:
        why = os.strerror(ctypes.get_errno())
        raise sb.LayerUnavailable("seccomp", f"installing the seccomp filter failed: {why}")
    return f"{len(DENIED_SYSCALLS)} syscalls denied, no new namespaces"


def apply_landlock(writable: list[str], network: bool) -> str:
    """The write wall (see the module docstring); returns what it covers."""
    import ctypes

    abi = sb.landlock_abi()
    if abi < 1:
        raise sb.LayerUnavailable(
            "landlock",
            "Landlock is not available (needs Linux >= 5.13 with landlock in the lsm= boot list)",
        )
    fs = _FS_WRITES_ABI1
    if abi >= 2:
        fs |= sb._FS_REFER
    if abi >= 3:
        fs |= sb._FS_TRUNCATE
    attr = sb._RulesetAttr(fs, 0, 0)
    size = 8
    covers = [f"writes only beneath {', '.join(writable)}"]
    if abi >= 4 and not network:
        attr.handled_access_net = sb._NET_BIND_TCP | sb._NET_CONNECT_TCP
        size = 16
        covers.append("no TCP bind/connect")
    if abi >= 6:
        attr.scoped = sb._SCOPE_ABSTRACT_UNIX | sb._SCOPE_SIGNAL
        size = 24
        covers.append("signals and abstract sockets scoped")
    libc = sb._c()
    ruleset = libc.syscall(
        sb._SYS_LANDLOCK_CREATE_RULESET,
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    if ruleset < 0:
        err = ctypes.get_errno()
        raise sb.LayerUnavailable("landlock", f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path in writable:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = sb._PathBeneathAttr(fs if is_dir else fs & _FS_FILE_RIGHTS, fd)
                if libc.syscall(
                    sb._SYS_LANDLOCK_ADD_RULE,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(sb._LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ):
                    err = ctypes.get_errno()
                    raise sb.LayerUnavailable(
                        "landlock", f"landlock_add_rule({path}): {os.strerror(err)}"
                    )
            finally:
                os.close(fd)
        if libc.syscall(sb._SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            err = ctypes.get_errno()
            raise sb.LayerUnavailable("landlock", f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return f"ABI {abi}: " + "; ".join(covers)


def apply_rlimits(conf: dict[str, str]) -> str:
    sb.apply_rlimits(
        {
            "cpu_seconds": conf["cpu_seconds"],
            "memory_bytes": conf["address_space"],
            "open_files": conf["open_files"],
            "file_size_bytes": conf["file_size"],
        }
    )
    nproc = int(conf["nproc"])
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    except (ValueError, OSError) as exc:
        raise sb.LayerUnavailable("rlimits", f"setrlimit(RLIMIT_NPROC): {exc}") from None
    return (
        f"address space {int(conf['address_space']) >> 20} MiB, {nproc} processes, "
        f"{conf['open_files']} files, cpu {conf['cpu_seconds']} s, no core files"
    )


def confine(conf: dict[str, str], writable: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Apply every layer; ``(applied, missing)``. Strict: the first failure raises."""
    level = conf.get("level", STRICT)
    applied: dict[str, str] = {}
    missing: dict[str, str] = {}

    def step(layer: str, fn: object) -> None:
        try:
            applied[layer] = fn()  # type: ignore[operator]
        except (sb.LayerUnavailable, OSError) as exc:
            message = exc.message if isinstance(exc, sb.LayerUnavailable) else str(exc)
            if level == STRICT:
                raise sb.LayerUnavailable(layer, message) from None
            missing[layer] = message

    if "uid" in conf and os.getuid() == 0:
        # First: everything after (rlimits' process count, Landlock) holds for this user.
        step("uid", lambda: sb.drop_privileges(int(conf["uid"]), int(conf["gid"])))
    step("rlimits", lambda: apply_rlimits(conf))

    def privs() -> str:
        sb._prctl(sb._PR_SET_NO_NEW_PRIVS, 1)
        sb._prctl(sb._PR_SET_DUMPABLE, 0)
        return "no_new_privs; supervisor not dumpable"

    step("no_new_privs", privs)
    step("landlock", lambda: apply_landlock(writable, conf.get("network") == "1"))
    step("seccomp", apply_seccomp)
    return applied, missing


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


def kill_all(sig: int) -> None:
    """Signal every process of the namespace but this one (PID 1 only)."""
    try:  # noqa: SIM105 (contextlib is one import more at every session start)
        os.kill(-1, sig)
    except ProcessLookupError:
        pass


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


def main(args: list[str]) -> int:
    fd = int(args[0])
    conf: dict[str, str] = {}
    writable: list[str] = []
    for arg in args[1:]:
        key, _, value = arg.partition("=")
        if key == "write":
            writable.append(value)
        else:
            conf[key] = value
    sock = _socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    if os.getpid() != 1:
        send(sock, b"FAIL\npid namespace\tthe supervisor is not PID 1 of its own PID namespace")
        return 1
    try:
        applied, missing = confine(conf, writable)
    except sb.LayerUnavailable as exc:
        send(sock, f"FAIL\n{exc.layer}\t{exc.message}".encode())
        return 1
    lines = [f"+{k}\t{v}" for k, v in applied.items()] + [f"-{k}\t{v}" for k, v in missing.items()]
    send(sock, ("READY\n" + "\n".join(lines)).encode())
    serve(sock)
    kill_all(_SIGKILL)
    reap_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[2:]))
