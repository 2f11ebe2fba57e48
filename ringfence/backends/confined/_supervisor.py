"""The confined local backend's supervisor: one per session, PID 1 inside the sandbox.

Started by :mod:`._session` inside bubblewrap's namespaces as ``python -I -S -c <boot>
ringfence.backends.confined._supervisor <this file> …`` (the boot, :mod:`ringfence._confine.boot`,
imports it and calls :func:`main`), already under the commands' seccomp filter. It confines
itself (uid, rlimits, no_new_privs, Landlock) so every command inherits all of it, then runs each
command as one ``posix_spawn`` and kills everything else in the namespace when the command's main
process exits, so nothing a command starts outlives it. With change sets it mounts a volatile
overlay per root for each command. ``exec`` mode runs one confined program (a ``sandbox =
"local"`` MCP server). Standard library and :mod:`ringfence._confine` only, few imports: every
millisecond here is session start. Over 500 lines on purpose: one standalone program whose two
modes share one ``confine``; its system calls are :mod:`ringfence._confine`'s.

The order of the layers, the wire, change sets and the fallback without namespaces:
docs/design/confined-supervisor.md.
"""

from __future__ import annotations

import _signal
import _socket
import os
import select
import sys

from ..._confine import SANDBOXED_ENV, LayerUnavailable, creds, landlock, mounts, rlimits, seccomp
from ..._confine.libc import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    prctl,
)

STRICT = "strict"
BEST_EFFORT = "best-effort"

_SIGKILL = 9
_SIGTERM = 15


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

    layered = "layers" in conf  # change sets: the per-command child does uid and Landlock
    if "uid" in conf and os.getuid() == 0 and not layered:
        # First: everything after (rlimits' process count, Landlock) holds for this user.
        step("uid", lambda: drop_privileges(int(conf["uid"]), int(conf["gid"])))
    step("rlimits", lambda: apply_rlimits(conf))

    def privs() -> str:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        prctl(PR_SET_DUMPABLE, 0)
        return "no_new_privs; supervisor not dumpable"

    step("no_new_privs", privs)
    if "landlock" in conf and layered:
        # Checked here (strict refuses at start), applied by each command's child.
        step("landlock", lambda: check_landlock(conf["landlock"], writable))
    elif "landlock" in conf:
        step("landlock", lambda: apply_landlock(conf["landlock"], writable))
    if layered:
        step("overlay", lambda: check_layers(conf))
    if "seccomp_fd" in conf:  # without bubblewrap, which installs it otherwise: last
        step("seccomp", lambda: install_seccomp(read_all(int(conf["seccomp_fd"]))))
    if "seccomp_hex" in conf:  # exec mode: no descriptor reaches bubblewrap, so here, last
        step("seccomp", lambda: install_seccomp(bytes.fromhex(conf["seccomp_hex"])))
    return applied, missing


def drop_privileges(uid: int, gid: int) -> str:
    """As the namespace's root, become ``uid``/``gid`` for good (every capability goes)."""
    detail = creds.drop_root(uid, gid, "uid")
    # A change of credentials clears the parent-death signal bubblewrap armed: arm it again.
    prctl(PR_SET_PDEATHSIG, _SIGKILL)
    return detail


def apply_rlimits(conf: dict[str, str]) -> str:
    rlimits.apply(
        cpu_seconds=int(conf["cpu_seconds"]),
        address_space=int(conf["address_space"]),
        open_files=int(conf["open_files"]),
        file_size=int(conf["file_size"]),
        processes=int(conf["nproc"]),
    )
    return (
        f"address space {int(conf['address_space']) >> 20} MiB, {conf['nproc']} processes, "
        f"{conf['open_files']} files, cpu {conf['cpu_seconds']} s, no core files"
    )


def install_seccomp(program: bytes) -> str:
    """Install the kernel-built filter (best-effort mode without bubblewrap; exec mode)."""
    installed = seccomp.Filter(program)
    installed.install()
    return f"{len(installed)} instructions"


# -- Landlock, as the kernel planned it (``_layers.landlock_plan``) ---------------------------


def landlock_ruleset(plan: str, writable: list[str]) -> int:
    """The ruleset (a descriptor) granting ``plan``'s write rights beneath ``writable``:
    on a directory all of them, on a file only the plan's ``file_rights``."""
    _, fs, net, scoped, size, file_rights = (int(x) for x in plan.split(","))
    grants = [(path, fs, fs & file_rights) for path in writable]
    return landlock.ruleset_beneath(fs, net, scoped, grants, size=size)


def describe_landlock(plan: str, writable: list[str]) -> str:
    abi, _, net, scoped, _, _ = (int(x) for x in plan.split(","))
    covers = [f"ABI {abi}: writes only beneath {', '.join(writable)}"]
    if net:
        covers.append("no TCP bind/connect")
    if scoped:
        covers.append("signals and abstract sockets scoped")
    return "; ".join(covers)


def apply_landlock(plan: str, writable: list[str]) -> str:
    """``plan`` is ``abi,fs,net,scoped,size,file_rights`` (see ``_layers``)."""
    ruleset = landlock_ruleset(plan, writable)
    try:
        landlock.restrict_self(ruleset)
    finally:
        os.close(ruleset)
    return describe_landlock(plan, writable)


def check_landlock(plan: str, writable: list[str]) -> str:
    """That this kernel takes the ruleset (applied per command in layered mode)."""
    abi, fs, net, scoped, size, _ = (int(x) for x in plan.split(","))
    os.close(landlock.create_ruleset(fs, net, scoped, size=size))
    return (
        f"ABI {abi}: applied to each command, after its overlays are mounted; writes only "
        f"beneath {', '.join(writable)}"
    )


# -- processes ------------------------------------------------------------------------------


def read_all(fd: int) -> bytes:
    """Everything until end of file on ``fd``, which is closed."""
    chunks = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks)


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


# -- the wire ------------------------------------------------------------------------------


def send(sock: _socket.socket, payload: bytes) -> None:
    sock.sendall(len(payload).to_bytes(4, "big") + payload)


def recv_exact(sock: _socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:  # see recv
            return None
        if not chunk:
            return None
        data += chunk
    return data


def recv(sock: _socket.socket) -> tuple[bytes, list[int]] | None:
    """One message and the descriptors that came with it; None at end of file."""
    fds: list[int] = []
    try:
        head, ancillary, _flags, _addr = sock.recvmsg(
            4, _socket.CMSG_SPACE(3 * 4), _socket.MSG_CMSG_CLOEXEC
        )
    except ConnectionResetError:  # the kernel closed with a message unread (the last U): EOF
        return None
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


def refuse(err: int, message: str, code: int) -> tuple[int, int]:
    """Say on the command's stderr why it did not start; (0, the wait status of exit ``code``)."""
    os.write(err, f"ringfence: {message}\n".encode())
    return 0, code << 8


def enter(
    cwd: str, argv: list[str], env: dict[str, str], err: int
) -> tuple[str | None, tuple[int, int]]:
    """Move to the command's directory and find its program: (path, (0, 0)), or (None, the
    refusal :func:`refuse` reported) when either cannot be done. The working directory is
    inherited by the command, so the supervisor moves there first."""
    try:
        os.chdir(cwd)
    except OSError as exc:
        return None, refuse(err, f"cd {cwd}: {exc.strerror}", 126)
    path, code = find_program(argv[0], env)
    if path is None:
        why = "command not found" if code == 127 else "permission denied"
        return None, refuse(err, f"{argv[0]}: {why}", code)
    return path, (0, 0)


def spawn(
    cwd: str, argv: list[str], env: dict[str, str], out: int, err: int, state: int | None = None
) -> tuple[int, int]:
    """Start the command: (pid, 0), or (0, wait status) when it could not start.

    ``state`` (above 3, see :func:`run`) becomes the command's descriptor 3.

    ``posix_spawn`` (vfork) rather than ``fork``: it does not copy this
    process's page tables, which halves the cost of a command.
    """
    path, refused = enter(cwd, argv, env, err)
    if path is None:
        return refused
    try:
        pid = os.posix_spawn(
            path,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, err, 2),
                *([(os.POSIX_SPAWN_DUP2, state, 3)] if state is not None else []),
            ],
            setsid=True,
            # Python ignores SIGPIPE and SIGXFSZ; a command expects the defaults.
            setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
        )
    except OSError as exc:
        return refuse(err, f"{argv[0]}: {exc.strerror.lower() if exc.strerror else exc}", 126)
    return pid, 0


# -- exec checks: every exec of a command against the deny rules ------------------------------

_LISTENER: int | None = None  # the running command's exec listener (set by its spawn)


def exec_module() -> object:
    """:mod:`._execcheck`, imported the first time it is needed."""
    global _EXEC
    if _EXEC is None:
        from . import _execcheck as module

        _EXEC = module
    return _EXEC


def checker_for(env: dict[str, str]) -> object:
    """The checker for the rules the kernel sent last (``E``) and this command's ``PATH``;
    None without rules. Raises what reading the rules raises."""
    global _CHECKER, _CHECKER_KEY
    if not _EXEC_PAYLOAD:
        return None
    key = (_EXEC_PAYLOAD, env.get("PATH", os.defpath))
    if key != _CHECKER_KEY:
        if _CHECKER is not None:
            _CHECKER.close()  # type: ignore[attr-defined]
            _CHECKER, _CHECKER_KEY = None, None
        module: object = exec_module()
        _CHECKER = module.Checker(module.ExecRules(_EXEC_PAYLOAD), key[1])  # type: ignore[attr-defined]
        _CHECKER.set_writable(_WRITABLE or ["/"])  # type: ignore[attr-defined]
        _CHECKER_KEY = key
    return _CHECKER


def precheck(checker: object, path: str, argv: list[str]) -> str | None:
    """The command's own program checked before its process exists: None, or why not."""
    module: object = exec_module()
    roots = _OVERLAYS or [w for w in _WRITABLE if w not in ("/tmp", "/var/tmp", "/dev")]
    checker.refresh(roots)  # type: ignore[attr-defined]
    try:
        checker.check(None, os.fsencode(path), path, argv, None)  # type: ignore[attr-defined]
    except module.Refused as refused:  # type: ignore[attr-defined]
        if refused.denial is None:
            return f"{argv[0]}: {os.strerror(refused.code)}"
        checker.record(refused.denial)  # type: ignore[attr-defined]
        return f"{argv[0]}: exec denied by the rule {refused.denial.rule}"
    return None


def execute_backstop(checker: object, err: int) -> int | None:
    """The checker's Landlock layer refusing to execute the files program-wide rules deny
    (see :mod:`._execcheck`); None when there is none or it cannot be built (the
    command's stderr says so: the exec checks still hold, without the kernel's backstop)."""
    try:
        return checker.execute_ruleset(_WRITABLE)  # type: ignore[attr-defined]
    except (OSError, LayerUnavailable) as exc:
        message = exc.message if isinstance(exc, LayerUnavailable) else str(exc)
        os.write(
            err, f"ringfence: exec checks without their Landlock backstop: {message}\n".encode()
        )
        return None


def child_notifier(channel: _socket.socket) -> None:
    """In a command's child, last before its ``exec``: the exec filter installed, its
    listener handed to the supervisor (``SCM_RIGHTS``). Raises OSError."""
    listener = exec_module().install_notifier()  # type: ignore[attr-defined]
    channel.sendmsg(
        [b"L"],
        [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, listener.to_bytes(4, sys.byteorder))],
    )
    os.close(listener)
    channel.close()


def receive_listener(channel: _socket.socket) -> int | None:
    """The listener the child sent; None when it closed its end without one."""
    try:
        _msg, ancillary, _flags, _addr = channel.recvmsg(
            1, _socket.CMSG_SPACE(4), _socket.MSG_CMSG_CLOEXEC
        )
    except OSError:
        return None
    finally:
        channel.close()
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
            listener = int.from_bytes(data[:4], sys.byteorder)
            exec_module().sync_wakeups(listener)  # type: ignore[attr-defined]
            return listener
    return None


def probe_exec_checks() -> str:
    """Before the first command under deny rules (``P``): a child with a command's
    credentials installs the filter and execs ``/``; the supervisor must receive that exec
    and read its path from the child's memory. Raises LayerUnavailable naming what failed."""
    module: object = exec_module()
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            ours.close()
            if _LAYERS is not None:
                creds.drop_capabilities(_SWITCH)
            prctl(PR_SET_DUMPABLE, 1)
            child_notifier(theirs)
            os.execve("/", ["/"], {})
        except BaseException as exc:
            try:  # noqa: SIM105 (the supervisor names what failed)
                theirs.send(f"E{exc}".encode())
            except OSError:
                pass
        os._exit(0)
    theirs.close()
    why = ours.recv(512, _socket.MSG_PEEK)  # the child's error, if it sent one (not the fd)
    listener = receive_listener(ours)
    try:
        if listener is None:
            error = why[1:].decode("utf-8", "replace") if why[:1] == b"E" else "no listener"
            raise LayerUnavailable(
                "exec checks",
                f"a command cannot install a seccomp filter with a listener ({error}; "
                "SECCOMP_FILTER_FLAG_NEW_LISTENER needs Linux >= 5.0, and one listener per "
                "filter chain: a process above ringfence may hold one)",
            )
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        if not poller.poll(5000):
            raise LayerUnavailable("exec checks", "no exec notification within 5 s")
        try:
            return module.probe(listener, pid, b"/")  # type: ignore[attr-defined]
        except OSError as exc:
            raise LayerUnavailable(
                "exec checks", f"a command's exec could not be read: {exc.strerror or exc}"
            ) from None
    finally:
        if listener is not None:
            os.close(listener)
        os.waitpid(pid, 0)


def exec_command(
    path: str,
    argv: list[str],
    env: dict[str, str],
    out: int,
    err: int,
    state: int | None,
    *,
    keep_stdio: bool = False,
) -> None:
    """In a forked child: stdin from /dev/null, stdout/stderr to the pipes, the shell-state
    pipe on fd 3, default SIGPIPE/SIGXFSZ (Python ignores them; a command expects the
    defaults), then ``execve``. Raises only if the exec fails."""
    if not keep_stdio:
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
    if state is not None:
        os.dup2(state, 3)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
    os.execve(path, argv, env)


def spawn_checked(
    cwd: str,
    argv: list[str],
    env: dict[str, str],
    out: int,
    err: int,
    state: int | None,
    checker: object,
) -> tuple[int, int]:
    """:func:`spawn` under exec checks (no change sets): ``fork``, because the child installs
    the exec filter before its ``exec`` (``posix_spawn``'s parent would wait in ``vfork``
    for an exec only it can answer)."""
    global _LISTENER

    path, refused = enter(cwd, argv, env, err)
    if path is None:
        return refused
    why = precheck(checker, path, argv)
    if why is not None:
        return refuse(err, why, 126)
    backstop = execute_backstop(checker, err)
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError as exc:
        ours.close()
        theirs.close()
        return refuse(err, f"fork: {exc.strerror}", 126)
    if pid == 0:  # pragma: no cover (the child; it never returns)
        try:
            os.setsid()
            ours.close()
            if backstop is not None:
                landlock.restrict_self(backstop)
            child_notifier(theirs)
            exec_command(path, argv, env, out, err, state)
        except BaseException as exc:
            try:  # noqa: SIM105
                os.write(err, f"ringfence: {argv[0]}: {exc}\n".encode())
            except OSError:
                pass
        os._exit(126)
    theirs.close()
    _LISTENER = receive_listener(ours)
    checker.start(pid)  # type: ignore[attr-defined]
    return pid, 0


# -- change sets: one overlay per root, per command ---------------------------------------

_LAYERS: str | None = None  # where the upper/work directories are bound (layered mode)
_OVERLAYS: list[str] = []  # the roots, in order: upper ``_LAYERS/<i>/upper``
_LANDLOCK_PLAN: str | None = None
_WRITABLE: list[str] = []
_SWITCH: tuple[int, int] | None = None  # (uid, gid) a command becomes, as a root kernel
_CHILD_FILTER: seccomp.Filter | None = None  # the second filter: _layers.LAYER_SYSCALLS denied
_MOUNTED = False  # are the overlays mounted now (between a command's start and its umount)
_STALE_WORK: list[str] = []  # unmounted overlays' work directories, removed after ``U``
# Exec checks (:mod:`._execcheck`, imported on first use): the rules the kernel sent
# last (``E``), the checker built for them and a command's ``PATH``, and this command's listener.
_EXEC_PAYLOAD: bytes = b""
_CHECKER: object = None
_CHECKER_KEY: tuple[bytes, str] | None = None
_EXEC: object = None  # the module


def _escape(path: str) -> str:
    """A path as an overlay mount option value (``\\``, ``,`` and ``:`` escaped)."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def enter_namespace() -> None:
    """Once, at start: a mount namespace of the supervisor's own (bubblewrap's belongs to
    the host's user namespace, where the sandbox may not mount). Nothing propagates out of
    it: bubblewrap leaves no shared mount, and / is made private anyway."""
    try:
        mounts.unshare(mounts.CLONE_NEWNS)
    except OSError as exc:
        raise LayerUnavailable(
            "overlay", f"unshare(CLONE_NEWNS): {os.strerror(exc.errno or 0)}"
        ) from None
    try:
        mounts.mount(b"none", "/", None, mounts.MS_REC | mounts.MS_PRIVATE)
    except OSError as exc:
        raise LayerUnavailable(
            "overlay", f"making / private: {os.strerror(exc.errno or 0)}"
        ) from None


def mount_layers() -> None:
    """An overlay on each root (lower: the root; upper, work: ``_LAYERS/<i>/``).

    ``volatile``: the upper layer is never synced (a command's ``fsync`` too):
    it is scratch, read and merged by the kernel, and unmounting a synced
    overlay costs an ext4 journal commit (~7-15 ms here) against ~0.2 ms.

    In the supervisor's namespace, which every command inherits. Raises
    LayerUnavailable naming the root.
    """
    global _MOUNTED
    assert _LAYERS is not None
    try:
        remove_stale_work()
    except OSError as exc:
        raise LayerUnavailable(
            "overlay", f"removing the last overlay's work directory: {exc.strerror or exc}"
        ) from None
    for i, root in enumerate(_OVERLAYS):
        opts = (
            f"lowerdir={_escape(root)},upperdir={_LAYERS}/{i}/upper,"
            f"workdir={_LAYERS}/{i}/work,userxattr,volatile"
        )
        try:
            mounts.mount(b"overlay", root, b"overlay", mounts.MS_NOSUID | mounts.MS_NODEV, opts)
        except OSError as exc:
            message = f"mounting the overlay on {root}: {os.strerror(exc.errno or 0)}"
            if exc.errno == 22:  # EINVAL
                message += (
                    " (a mount point inside the root, whose mounts overlayfs cannot take as "
                    "its lower layer?)"
                )
            _MOUNTED = i > 0
            unmount_layers(i)
            raise LayerUnavailable("overlay", message) from None
    _MOUNTED = True


def unmount_layers(count: int | None = None) -> None:
    """Unmount the overlays (after every process of the command is gone).

    A plain ``umount``: it fails while anything still uses the overlay,
    which cannot happen once the namespace's other processes are reaped; if
    it does, the overlay is detached (it ends with its last user) and the
    supervisor exits, so the session is started again rather than reading
    an upper directory something may still write.
    """
    global _MOUNTED
    if not _MOUNTED:
        return
    busy = False
    mounted = len(_OVERLAYS) if count is None else count
    for i in reversed(range(mounted)):
        if not mounts.umount(_OVERLAYS[i]):
            busy = True
            mounts.umount(_OVERLAYS[i], mounts.MNT_DETACH)
        else:  # a volatile overlay leaves a mark the next mount refuses: the work dir goes,
            _STALE_WORK.append(f"{_LAYERS}/{i}/work/work")  # after ``U`` (layers_done)
    _MOUNTED = False
    if busy:
        raise LayerUnavailable("overlay", "an overlay was still in use after its command")


def remove_stale_work() -> None:
    """Remove the unmounted overlays' work directories (~0.5 ms here): after ``U``, while
    the kernel reads and merges the command's upper, not on the command's path; the next
    mount does it first if it was not done."""
    while _STALE_WORK:
        _remove(_STALE_WORK[-1])
        _STALE_WORK.pop()


def _remove(path: str) -> None:
    """``rm -r`` of overlayfs's own work directory (a few entries; mode 0, so capability)."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    except NotADirectoryError:
        os.unlink(path)
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove(entry.path)
        else:
            os.unlink(entry.path)
    os.rmdir(path)


def check_layers(conf: dict[str, str]) -> str:
    """At start: the namespace entered, the overlays mounted and unmounted once.

    A sandbox before this one on the same layers may have been killed with its overlays
    mounted (lost: killed from outside, out of memory): they went with its namespace and
    left their volatile marks in the work directories, which the first mount would refuse
    (``EINVAL``). Nothing mounts them now, so they go first.
    """
    enter_namespace()
    _STALE_WORK.extend(f"{_LAYERS}/{i}/work/work" for i in range(len(_OVERLAYS)))
    mount_layers()
    unmount_layers()
    if "cwd" in conf:  # exec mode: one process
        return (
            f"an overlay on each of {len(_OVERLAYS)} root(s) (read-only in the sandbox) for the "
            "process's life; it gets no capability, no mount, umount or unshare"
        )
    return (
        f"an overlay per command on {len(_OVERLAYS)} root(s) (read-only in the sandbox); "
        "commands get no capability, no mount, umount or unshare"
    )


def spawn_layered(
    cwd: str,
    argv: list[str],
    env: dict[str, str],
    out: int,
    err: int,
    state: int | None = None,
    checker: object = None,
    *,
    keep_stdio: bool = False,
) -> tuple[int, int]:
    """Start the command on fresh overlays (see the module docstring): (pid, 0) or (0, status).

    ``fork`` rather than ``posix_spawn``: the child confines itself (Landlock,
    capabilities, the second seccomp filter) between the two, because the
    supervisor, which mounts, cannot be landlocked. ``keep_stdio`` (``exec``
    mode): the child keeps the supervisor's stdin, stdout and stderr.
    """

    global _LISTENER

    try:
        mount_layers()
    except LayerUnavailable as exc:
        return refuse(err, exc.message, 126)
    path, refused = enter(cwd, argv, env, err)  # after the mounts: the cwd is the overlay's
    if path is None:
        return refused
    if checker is not None and (why := precheck(checker, path, argv)) is not None:
        return refuse(err, why, 126)
    backstop = execute_backstop(checker, err) if checker is not None else None
    # Everything that can be prepared here is: the child runs as little Python as it can
    # (each page it touches is copied, which costs milliseconds on a busy machine).
    ruleset = -1
    try:
        if _LANDLOCK_PLAN is not None:  # rules on the overlays, so after the mounts
            ruleset = landlock_ruleset(_LANDLOCK_PLAN, _WRITABLE)
    except LayerUnavailable as exc:
        return refuse(err, exc.message, 126)
    ours = theirs = None
    if checker is not None:
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError as exc:
        if ruleset >= 0:
            os.close(ruleset)
        for end in (ours, theirs):
            if end is not None:
                end.close()
        return refuse(err, f"fork: {exc.strerror}", 126)
    if pid:
        if ruleset >= 0:
            os.close(ruleset)
        if ours is not None and theirs is not None:
            theirs.close()
            _LISTENER = receive_listener(ours)
            checker.start(pid)  # type: ignore[union-attr]
        return pid, 0
    try:  # pragma: no cover (the child; it never returns)
        os.setsid()
        if ruleset >= 0:
            landlock.restrict_self(ruleset)
        if backstop is not None:
            landlock.restrict_self(backstop)
        creds.drop_capabilities(_SWITCH)
        _CHILD_FILTER.install()  # type: ignore[union-attr]
        if theirs is not None:  # last: every exec from here on is checked, this one too
            ours.close()  # type: ignore[union-attr]
            child_notifier(theirs)
        exec_command(path, argv, env, out, err, state, keep_stdio=keep_stdio)
    except BaseException as exc:
        message = exc.message if isinstance(exc, LayerUnavailable) else str(exc)
        try:  # noqa: SIM105
            os.write(err, f"ringfence: {argv[0]}: {message}\n".encode())
        except OSError:
            pass
    os._exit(126)


def run(sock: _socket.socket, body: bytes, fds: list[int]) -> bool:
    """Run one command to its end and report; False when the kernel went away."""
    fields = body[1:].decode("utf-8", "surrogateescape").split("\0")
    cwd, argc = fields[0], int(fields[1])
    argv = fields[2 : 2 + argc]
    env = dict(kv.split("=", 1) for kv in fields[2 + argc :] if kv)
    out, err = fds[0], fds[1]
    state = fds[2] if len(fds) > 2 else None
    if state is not None and state <= 3:  # dup2 onto itself would keep its close-on-exec flag
        state, low = os.dup(state), state
        os.close(low)
    global _LISTENER
    _LISTENER = None
    checker: object = None
    try:
        try:
            checker = checker_for(env)
        except Exception as exc:  # rules that cannot be read: the command does not run
            os.write(err, f"ringfence: the exec checks could not load the rules: {exc}\n".encode())
            pid, status = 0, 126 << 8
        else:
            if _LAYERS is not None:
                pid, status = spawn_layered(cwd, argv, env, out, err, state, checker)
            elif checker is not None:
                pid, status = spawn_checked(cwd, argv, env, out, err, state, checker)
            else:
                pid, status = spawn(cwd, argv, env, out, err, state)
    finally:
        os.close(out)
        os.close(err)
        if state is not None:
            os.close(state)
        os.chdir("/")
    if not pid:
        send(sock, b"X%d" % status + exec_report(checker))
        return layers_done(sock)
    listener, _LISTENER = _LISTENER, None
    if checker is not None and listener is None:
        kill_all(_SIGKILL)  # the child could not hand over its listener: it never execs
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN)
    if listener is not None:
        poller.register(listener, select.POLLIN)
    alive = True
    done = False
    while not done:
        for fd, events in poller.poll():
            if fd == pidfd:
                done = True
                continue
            if fd == listener:
                if events & select.POLLIN:
                    checker.answer(listener)  # type: ignore[union-attr]
                elif events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    poller.unregister(listener)  # no process of the command is left under it
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
    if listener is not None:
        os.close(listener)
    if alive:
        send(sock, b"X%d" % status + exec_report(checker))
    return layers_done(sock) if alive else False


def exec_report(checker: object) -> bytes:
    """What follows ``X<status>`` under exec checks: a newline and the denials (JSON)."""
    if checker is None:
        return b""
    report = checker.report()  # type: ignore[attr-defined]
    return b"\n" + report if report else b""


def layers_done(sock: _socket.socket) -> bool:
    """After ``X``: unmount the overlays, then ``U`` (the kernel reads the upper directories
    meanwhile and empties them only after ``U``). False when an overlay stayed busy."""
    if _LAYERS is None:
        return True
    try:
        unmount_layers()
    except LayerUnavailable as exc:
        send(sock, f"FAIL\n{exc.layer}\t{exc.message}".encode())
        return False
    send(sock, b"U")
    try:  # noqa: SIM105 (no contextlib in the supervisor: its start is kept light)
        remove_stale_work()
    except OSError:
        pass  # left for the next mount, which reports it
    return True


def serve(sock: _socket.socket) -> None:
    global _EXEC_PAYLOAD
    while True:
        msg = recv(sock)
        if msg is None:
            return
        body, fds = msg
        if body[:1] == b"R" and len(fds) in (2, 3):
            if not run(sock, body, fds):
                return
        elif body[:1] == b"P":  # can commands' execs be checked here? (once, on demand)
            for fd in fds:
                os.close(fd)
            try:
                send(sock, b"P+" + probe_exec_checks().encode())
            except (LayerUnavailable, OSError) as exc:
                message = exc.message if isinstance(exc, LayerUnavailable) else str(exc)
                send(sock, b"P-" + message.encode())
        elif body[:1] == b"E":  # the deny rules the next commands are checked against
            _EXEC_PAYLOAD = body[1:]
            for fd in fds:
                os.close(fd)
        else:  # T/K between commands: nothing runs
            for fd in fds:
                os.close(fd)


# -- exec mode: one process on the caller's stdio (MCP stdio servers) ------------------------

# The first line on stdout in exec mode; ringfence.backends.confined._exec reads it.
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

    With ``layers=DIR`` and ``overlay=ROOT`` options (a writable server): as a
    session's command under change sets, the roots are read-only and the
    server runs on an overlay of each (:func:`spawn_layered`, mounted once,
    for the server's whole life), its child filter (``layer_seccomp_hex``)
    and Landlock applied by its own child; the kernel reads the upper
    directories with the sandbox's cgroup frozen (``backends.confined._writes``).
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
    global _LAYERS, _OVERLAYS, _LANDLOCK_PLAN, _WRITABLE, _CHILD_FILTER
    if "layers" in conf:  # a writable server: the roots behind an overlay (see run_exec)
        _LAYERS = conf["layers"]
        _OVERLAYS = [a.partition("=")[2] for a in args[:split] if a.startswith("overlay=")]
        _LANDLOCK_PLAN = conf.get("landlock")
        _WRITABLE = writable
        _CHILD_FILTER = seccomp.Filter(bytes.fromhex(conf["layer_seccomp_hex"]))
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
    env = sandboxed_env()
    if _LAYERS is not None:
        pid, status = spawn_layered(conf.get("cwd", "/"), argv, env, 1, 2, keep_stdio=True)
        if not pid:
            return os.WEXITSTATUS(status) or 126
        return wait_exec(pid)
    path, code = find_program(argv[0], env)
    try:
        os.chdir(conf.get("cwd", "/"))
        if path is None:
            raise OSError(f"{argv[0]}: {'not found' if code == 127 else 'not executable'}")
        pid = os.posix_spawn(path, argv, env, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError as exc:
        write_all(2, f"ringfence: cannot start the server: {exc}\n".encode())
        return 126
    return wait_exec(pid)


def sandboxed_env() -> dict[str, str]:
    """The environment the confined program runs with: the JSON object in
    :data:`~ringfence._confine.SANDBOXED_ENV` when its starter sent one (an MCP server's
    variables, which never were the environment of anything outside the sandbox, nor of
    this supervisor), else this process's own."""
    raw = os.environ.pop(SANDBOXED_ENV, None)
    if raw is None:
        return dict(os.environ)
    import json

    value = json.loads(raw)
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{SANDBOXED_ENV} is not an object of strings")
    return value


def wait_exec(pid: int) -> int:
    """Reap until ``pid`` (the server) exits; then kill and reap the rest: its exit code."""
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


def main(argv: list[str]) -> int:
    """The supervisor's process (``argv[0]`` is this file; :mod:`ringfence._confine.boot`
    leaves with ``os._exit`` and the code returned: all output went out by ``os.write``)."""
    args = argv[1:]
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
    keep = sorted(
        {0, 1, 2, fd, *(int(conf.get(k, fd)) for k in ("seccomp_fd", "layer_seccomp_fd"))}
    )
    for low, high in zip(keep, [*keep[1:], 1 << 20], strict=True):
        os.closerange(low + 1, high)
    sock = _socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    global _PIDNS, _LAYERS, _OVERLAYS, _LANDLOCK_PLAN, _WRITABLE, _SWITCH, _CHILD_FILTER
    _PIDNS = conf.get("pidns", "1") == "1"
    _WRITABLE = writable  # (exec checks: no Landlock backstop for files in these)
    if "layers" in conf:
        _LAYERS = conf["layers"]
        _OVERLAYS = [a.partition("=")[2] for a in args[1:] if a.startswith("overlay=")]
        _LANDLOCK_PLAN = conf.get("landlock")
        if "uid" in conf and os.getuid() == 0:
            _SWITCH = (int(conf["uid"]), int(conf["gid"]))
        _CHILD_FILTER = seccomp.Filter(read_all(int(conf["layer_seccomp_fd"])))
    if _PIDNS and os.getpid() != 1:
        send(sock, b"FAIL\npid namespace\tthe supervisor is not PID 1 of its own PID namespace")
        return 1
    try:
        if not _PIDNS:  # every orphan of a command becomes ours, so it is found and killed
            prctl(PR_SET_CHILD_SUBREAPER, 1)
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
