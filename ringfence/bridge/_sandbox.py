"""The script child's OS sandbox on Linux, applied by the runner to itself.

Like ``_wire``, this module is imported by the runner as a top-level module
under ``python -I -S`` and uses the standard library only (``ctypes`` for the
syscalls Python does not wrap).

:func:`apply` runs in the child after the bridge handshake and before the
script is read, in this order (each step says why it sits where it does):

1. **rlimits** — CPU seconds (soft, then SIGKILL one second later), address
   space, open files, file size 0, no core files (processes: see 5). Set first
   because they need no privilege and bound everything after.
2. **no_new_privs** — required by Landlock and seccomp for an unprivileged
   process, and makes any later ``execve`` unable to gain privilege.
3. **landlock** — the ABI is read at run time. Filesystem: every access right
   the ABI knows is handled, and only ``read_file``/``read_dir`` beneath the
   standard library directories is granted (lazy imports), so nothing can be
   written, created, removed, executed or read elsewhere. ABI ≥ 4: TCP bind and
   connect are handled with no port granted — the bridge connection already
   exists, so this is stricter than "connect only to the bridge port".
   ABI ≥ 6: abstract Unix sockets and signals are scoped to the sandbox.
   Applied while still root so the rule paths can be opened.
4. **drop_privileges** — when running as root: ``setgroups([])``, then gid and
   uid 65534 (all three ids), which also clears every capability; verified by
   a ``setuid(0)`` that must fail. ``RLIMIT_NPROC`` is now enforced. Not root:
   nothing to drop, recorded as such.
5. **pdeathsig** — ``PR_SET_PDEATHSIG(SIGKILL)`` (again: changing uid clears
   it), then the parent pid is checked so a host that died in between is not
   missed; ``PR_SET_DUMPABLE(0)`` so no other process of the same uid can
   ptrace this one or read its memory; and a watchdog thread that exits the
   process when the host's end of the bridge closes (the only way to notice a
   dead host from inside a container). The thread is started here so that it
   inherits the Landlock domain and the dropped uid; then ``RLIMIT_NPROC`` goes
   to 0, which also stops any further thread.
6. **seccomp** — last, because it forbids what the steps above needed
   (``setuid``, ``prctl``, ``setrlimit``). A deny list on x86-64: no socket
   creation or connect/bind/listen/accept (the bridge socket is already
   connected), no fork/clone/exec, no ptrace or cross-process memory access,
   no signals to other processes, no rlimit/uid/capability changes, no
   namespaces or mounts, no bpf/io_uring/keyctl/perf/userfaultfd/module
   loading; no System V IPC or POSIX message queues (they outlive the process);
   no change to any file's metadata that Landlock leaves open — mode, owner,
   times, extended attributes (nor reading those), truncate by path — by path
   or descriptor; no ``readlink``, no inotify/fanotify; no change to the
   scheduling of other processes. Foreign-ABI syscalls (x32, i386) kill the
   process. Installed with ``SECCOMP_FILTER_FLAG_TSYNC`` so the watchdog thread
   is covered too.

Guarantees: when :func:`apply` returns with no ``missing`` layer, every step
above is in force for the rest of the process's life: code that escaped the
script language can read only the standard library, write nothing, change no
file's mode, owner, times or extended attributes (even files its uid owns),
leave no IPC object behind, and reach no process but its own.

Non-guarantees: ``stat``/``lstat``/``newfstatat``/``statx`` and ``access``
of host paths stay allowed — Landlock does not govern metadata reads and
seccomp cannot see a path, while the interpreter's own ``fstat`` is a
``newfstatat`` — so escaped code learns which host paths exist, their type,
size, mode, owner and times (never their content; directory listings and
symlink targets are refused). UDP is not a Landlock concern (seccomp's socket
ban covers it); the seccomp filter is a deny list, not an allow list;
architectures other than x86-64 get no seccomp filter (reported missing, so
``strict`` refuses to run there).
"""

from __future__ import annotations

import _thread
import ctypes
import errno
import os
import resource
import select
import signal
import struct
import sys
from typing import Any

STRICT = "strict"  # every layer must apply, or the run fails
BEST_EFFORT = "best-effort"  # apply what this machine offers; the gaps are recorded
NONE = "none"  # rlimits and pdeathsig only; recorded
LEVELS = (STRICT, BEST_EFFORT, NONE)

# The layers ``strict`` requires, in the order they are applied.
LAYERS = (
    "rlimits",
    "no_new_privs",
    "landlock",
    "drop_privileges",
    "pdeathsig",
    "rlimits_nproc",
    "seccomp",
)

NOBODY = 65534
EXIT_HOST_GONE = 70

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_SYS_SECCOMP = 317
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

# Filesystem access rights by the ABI that introduced them.
_FS_ABI1 = (1 << 13) - 1  # execute … make_sym
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1

_libc: Any = None


class LayerUnavailable(Exception):
    """One layer could not be applied; ``layer`` names it, the message says why."""

    def __init__(self, layer: str, message: str) -> None:
        super().__init__(message)
        self.layer = layer
        self.message = message


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    return _libc


def _prctl(option: int, arg2: int | Any = 0) -> None:
    if _c().prctl(option, arg2, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def set_pdeathsig(parent_pid: int) -> None:
    """Die with SIGKILL when the thread that spawned us exits; refuse if it already has."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid and os.getppid() != parent_pid:
        os._exit(EXIT_HOST_GONE)  # the host died before the signal was armed


def _watch(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLRDHUP)
    while True:
        for _fd, events in poller.poll():
            if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL):
                os._exit(EXIT_HOST_GONE)


def start_watchdog(fd: int) -> None:
    """A daemon thread that exits the process when the peer of socket ``fd`` hangs up."""
    _thread.start_new_thread(_watch, (fd,))


# -- rlimits ----------------------------------------------------------------------------


def apply_rlimits(policy: dict[str, Any]) -> None:
    cpu = int(policy["cpu_seconds"])
    limits = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, int(policy["memory_bytes"]), int(policy["memory_bytes"])),
        (resource.RLIMIT_NOFILE, int(policy["open_files"]), int(policy["open_files"])),
        (resource.RLIMIT_FSIZE, int(policy["file_size_bytes"]), int(policy["file_size_bytes"])),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as exc:
            raise LayerUnavailable("rlimits", f"setrlimit({which}) failed: {exc}") from None


# -- Landlock ---------------------------------------------------------------------------


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The running kernel's Landlock ABI version, or 0 when Landlock is absent or disabled."""
    if sys.platform != "linux":
        return 0
    n = _c().syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(int(n), 0)


def apply_landlock(read_paths: list[str]) -> dict[str, Any]:
    """Enforce the ruleset described in the module docstring; return what the ABI covered."""
    abi = landlock_abi()
    if abi < 1:
        raise LayerUnavailable(
            "landlock",
            "Landlock is not available (needs Linux >= 5.13 with landlock in the lsm= boot list)",
        )
    fs = _FS_ABI1
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    attr = _RulesetAttr(fs, 0, 0)
    size = 8
    covered = ["fs"]
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
        covered.append("net")
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL
        size = 24
        covered.append("scope")
    libc = _c()
    ruleset = libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        err = ctypes.get_errno()
        raise LayerUnavailable("landlock", f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path in read_paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
            except OSError:
                continue  # a directory this interpreter does not have needs no rule
            try:
                rule = _PathBeneathAttr(_FS_READ_FILE | _FS_READ_DIR, fd)
                if (
                    libc.syscall(
                        _SYS_LANDLOCK_ADD_RULE,
                        ctypes.c_int(ruleset),
                        ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    )
                    != 0
                ):
                    err = ctypes.get_errno()
                    raise LayerUnavailable(
                        "landlock", f"landlock_add_rule({path}): {os.strerror(err)}"
                    )
            finally:
                os.close(fd)
        if (
            libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
            != 0
        ):
            err = ctypes.get_errno()
            raise LayerUnavailable("landlock", f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return {"abi": abi, "covers": covered, "read": read_paths}


# -- privileges -------------------------------------------------------------------------


def drop_privileges(uid: int, gid: int) -> str:
    """As root, become ``uid``/``gid`` for good; otherwise nothing to drop. Returns what happened."""
    if os.geteuid() != 0:
        return f"not root (uid {os.geteuid()}); nothing to drop"
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise LayerUnavailable("drop_privileges", f"could not become uid {uid}: {exc}") from None
    try:
        os.setuid(0)
    except PermissionError:
        return f"uid/gid {uid}/{gid}, no capabilities"
    raise LayerUnavailable("drop_privileges", "setuid(0) still succeeds after dropping root")


# -- seccomp ----------------------------------------------------------------------------

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000

# x86-64 syscall numbers denied with EPERM (see the module docstring for the why of each group).
_DENIED_X86_64 = {
    # sockets: the bridge socket is connected before the filter is installed
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "socketpair": 53,
    "accept4": 288,
    # processes
    "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
    # other processes' memory and signals
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    # limits, identity, privileges, process group
    "setrlimit": 160, "prlimit64": 302, "setuid": 105, "setgid": 106, "setreuid": 113,
    "setregid": 114, "setresuid": 117, "setresgid": 119, "setgroups": 116, "setfsuid": 122,
    "setfsgid": 123, "capset": 126, "prctl": 157, "seccomp": 317, "personality": 135,
    "setsid": 112, "setpgid": 109,
    # namespaces and mounts
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "statmount": 457, "listmount": 458,
    "open_tree_attr": 467,
    # System V IPC and POSIX message queues: objects that outlive the process and
    # are shared with every process of the same uid (Landlock does not cover them)
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
    "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243,
    "mq_notify": 244, "mq_getsetattr": 245,
    # file metadata, which Landlock does not govern: mode, owner, times, extended
    # attributes (read and write), by path or by descriptor; truncate by path
    # (Landlock governs it from ABI 3 only)
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93,
    "lchown": 94, "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261,
    "utimensat": 280, "truncate": 76,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191, "lgetxattr": 192,
    "fgetxattr": 193, "listxattr": 194, "llistxattr": 195, "flistxattr": 196,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463,
    "getxattrat": 464, "listxattrat": 465, "removexattrat": 466,
    # probes of the host's files beyond stat (see the module docstring): symlink
    # targets, and watching files change
    "readlink": 89, "readlinkat": 267, "inotify_init": 253, "inotify_init1": 294,
    "inotify_add_watch": 254, "inotify_rm_watch": 255, "fanotify_init": 300,
    "fanotify_mark": 301,
    # scheduling of other processes of the same uid (other scripts' runners)
    "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144,
    "sched_setaffinity": 203, "sched_setattr": 314, "ioprio_set": 251, "migrate_pages": 256,
    "move_pages": 279,
    # kernel facilities a script has no use for
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248,
    "request_key": 249, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "acct": 163,
    "quotactl": 179, "syslog": 103, "settimeofday": 164, "clock_settime": 227,
    "clock_adjtime": 305, "adjtimex": 159, "vhangup": 153, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "modify_ldt": 154, "uselib": 134,
}  # fmt: skip

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_program() -> bytes:
    """The BPF filter (x86-64) as raw ``sock_filter`` instructions."""
    if os.uname().machine != "x86_64":
        raise LayerUnavailable(
            "seccomp", f"no seccomp filter is built in for {os.uname().machine} (only x86_64)"
        )
    prog = [
        _insn(_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _insn(_BPF_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_BPF_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        _insn(_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT),
        _insn(_BPF_RET_K, 0, 0, _RET_KILL_PROCESS),
    ]
    for nr in sorted(set(_DENIED_X86_64.values())):
        prog.append(_insn(_BPF_JEQ_K, 0, 1, nr))
        prog.append(_insn(_BPF_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    prog.append(_insn(_BPF_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp() -> None:
    program = seccomp_program()
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog): every thread.
    rc = _c().syscall(
        _SYS_SECCOMP,
        ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if rc != 0:
        why = os.strerror(ctypes.get_errno()) if rc < 0 else f"thread {rc} could not be synced"
        raise LayerUnavailable("seccomp", f"installing the seccomp filter failed: {why}")


# -- all layers -------------------------------------------------------------------------


def apply(policy: dict[str, Any], watch_fd: int | None = None) -> dict[str, Any]:
    """Apply the layers ``policy["level"]`` asks for; return a JSON-able report.

    ``strict``: the first layer that cannot be applied raises LayerUnavailable
    (the caller must then stop: the process is partly confined). ``best-effort``:
    a layer that cannot be applied is listed under ``missing`` and the rest are
    still applied. ``none``: rlimits and pdeathsig only, the others listed as
    skipped. The report's ``applied`` maps each applied layer to a detail.
    ``watch_fd`` is the bridge socket the watchdog thread watches.
    """
    level = policy.get("level", STRICT)
    if level not in LEVELS:
        raise LayerUnavailable("policy", f"unknown sandbox level {level!r}")
    applied: dict[str, Any] = {}
    missing: dict[str, str] = {}
    wanted = LAYERS if level != NONE else ("rlimits", "pdeathsig", "rlimits_nproc")

    def step(layer: str, fn: Any) -> None:
        if layer not in wanted:
            missing[layer] = f"skipped at sandbox level {level!r}"
            return
        try:
            applied[layer] = fn()
        except LayerUnavailable as exc:
            if level == STRICT:
                raise
            missing[layer] = exc.message
        except OSError as exc:
            if level == STRICT:
                raise LayerUnavailable(layer, str(exc)) from None
            missing[layer] = str(exc)

    if sys.platform != "linux":
        raise LayerUnavailable("platform", f"the script sandbox needs Linux, not {sys.platform}")
    step("rlimits", lambda: apply_rlimits(policy) or "cpu, as, nofile, fsize, core")
    step("no_new_privs", lambda: _prctl(_PR_SET_NO_NEW_PRIVS, 1) or "set")
    step("landlock", lambda: apply_landlock(list(policy.get("read_paths", ()))))
    step(
        "drop_privileges",
        lambda: drop_privileges(int(policy.get("uid", NOBODY)), int(policy.get("gid", NOBODY))),
    )

    def pdeath() -> str:
        set_pdeathsig(int(policy.get("parent_pid") or 0))
        _prctl(_PR_SET_DUMPABLE, 0)
        detail = "SIGKILL; not dumpable"
        if watch_fd is not None:
            start_watchdog(watch_fd)
            detail += "; exits when the bridge closes"
        return detail

    step("pdeathsig", pdeath)
    step("rlimits_nproc", lambda: resource.setrlimit(resource.RLIMIT_NPROC, (0, 0)) or "0")
    step("seccomp", lambda: apply_seccomp() or f"{len(_DENIED_X86_64)} syscalls denied")
    return {"level": level, "applied": applied, "missing": missing}
