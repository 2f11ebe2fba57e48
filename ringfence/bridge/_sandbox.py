"""The script child's OS sandbox on Linux, applied by the runner to itself.

Imported by the runner inside its ``python -I -S`` process (started by
:mod:`ringfence._confine.boot`): standard library only, and of ringfence only
the Linux primitives in :mod:`ringfence._confine`. This module is the runner's
policy: which layers, in which order, and which system calls are denied.

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
   scheduling of other processes; no owner or signal for a descriptor's readiness
   signals (``fcntl`` ``F_SETOWN``/``F_SETOWN_EX``/``F_SETSIG``, ``ioctl``
   ``FIOSETOWN``/``SIOCSPGRP``: a signal to another process). Foreign-ABI syscalls (x32, i386) kill the
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
import errno
import os
import resource
import select
import signal
import sys
from typing import Any

from .._confine import LayerUnavailable, creds, landlock, rlimits, seccomp
from .._confine.libc import PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, prctl

__all__ = [
    "BEST_EFFORT",
    "DENIED_SYSCALLS",
    "EXIT_HOST_GONE",
    "LAYERS",
    "LEVELS",
    "NOBODY",
    "NONE",
    "STRICT",
    "LayerUnavailable",
    "apply",
    "apply_landlock",
    "landlock_abi",
    "seccomp_program",
    "set_pdeathsig",
    "start_watchdog",
]

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

landlock_abi = landlock.abi


def set_pdeathsig(parent_pid: int) -> None:
    """Die with SIGKILL when the thread that spawned us exits; refuse if it already has."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
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


# -- Landlock ---------------------------------------------------------------------------


def apply_landlock(read_paths: list[str]) -> dict[str, Any]:
    """Enforce the ruleset described in the module docstring; return what the ABI covered."""
    abi = landlock.abi()
    if abi < 1:
        raise landlock.unavailable()
    fs = landlock.fs_rights(abi, landlock.FS_ABI1) | (landlock.FS_IOCTL_DEV if abi >= 5 else 0)
    net = landlock.net_rights(abi)
    scoped = landlock.scopes(abi)
    read = landlock.FS_READ_FILE | landlock.FS_READ_DIR
    ruleset = landlock.ruleset_beneath(
        fs,
        net,
        scoped,
        [(path, read, read) for path in read_paths],
        open_flags=os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY,
        skip_missing=True,  # a directory this interpreter does not have needs no rule
    )
    try:
        landlock.restrict_self(ruleset)
    finally:
        os.close(ruleset)
    covered = ["fs", *(["net"] if net else []), *(["scope"] if scoped else [])]
    return {"abi": abi, "covers": covered, "read": read_paths}


# -- seccomp ----------------------------------------------------------------------------

# System calls denied with EPERM (x86-64; see the module docstring for the why of each group).
DENIED_SYSCALLS = (
    # sockets: the bridge socket is connected before the filter is installed
    "socket", "connect", "accept", "bind", "listen", "socketpair", "accept4",
    # processes
    "clone", "fork", "vfork", "execve", "execveat", "clone3",
    # other processes' memory and signals
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    # limits, identity, privileges, process group
    "setrlimit", "prlimit64", "setuid", "setgid", "setreuid", "setregid", "setresuid",
    "setresgid", "setgroups", "setfsuid", "setfsgid", "capset", "prctl", "seccomp",
    "personality", "setsid", "setpgid",
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "statmount", "listmount",
    "open_tree_attr",
    # System V IPC and POSIX message queues: objects that outlive the process and
    # are shared with every process of the same uid (Landlock does not cover them)
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    # file metadata, which Landlock does not govern: mode, owner, times, extended
    # attributes (read and write), by path or by descriptor; truncate by path
    # (Landlock governs it from ABI 3 only)
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat", "truncate",
    "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
    "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
    "getxattrat", "listxattrat", "removexattrat",
    # probes of the host's files beyond stat (see the module docstring): symlink
    # targets, and watching files change
    "readlink", "readlinkat", "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch", "fanotify_init", "fanotify_mark",
    # scheduling of other processes of the same uid (other scripts' runners)
    "setpriority", "sched_setparam", "sched_setscheduler", "sched_setaffinity",
    "sched_setattr", "ioprio_set", "migrate_pages", "move_pages",
    # kernel facilities a script has no use for
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "init_module", "finit_module",
    "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "sethostname", "setdomainname", "iopl", "ioperm", "acct", "quotactl", "syslog",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
    "name_to_handle_at", "open_by_handle_at", "modify_ldt", "uselib",
)  # fmt: skip


# Commands denied with EPERM by the system call and its second argument (x86-64). A
# descriptor's owner is sent SIGIO, or the signal F_SETSIG names (SIGKILL included), when the
# descriptor becomes ready: a signal no kill() sends, to any process or process group of the
# same uid (the host itself, when it is not root; another run's runner, when it is). Landlock
# scopes such signals from ABI 6 (Linux 6.12) only, and strict accepts older kernels.
DENIED_COMMANDS = (
    ("fcntl", (8, 10, 15)),  # F_SETOWN, F_SETSIG, F_SETOWN_EX
    ("ioctl", (0x8901, 0x8902)),  # FIOSETOWN, SIOCSPGRP (a socket's owner)
)


def seccomp_program() -> bytes:
    """The BPF filter (x86-64) as raw ``sock_filter`` instructions."""
    seccomp.require_x86_64()
    numbers = (seccomp.X86_64[name] for name in DENIED_SYSCALLS)
    refuse = seccomp.errno_action(errno.EPERM)
    prog = [*seccomp.prologue(kill_x32=True), *seccomp.deny(numbers, refuse)]
    for name, commands in DENIED_COMMANDS:
        # The call's number is in A; a block for its commands, which ends in a return.
        block = [seccomp.load(seccomp.arg(1))]  # the command: an unsigned int, the low half
        for command in commands:
            block += [seccomp.insn(seccomp.JEQ_K, 0, 1, command), seccomp.ret(refuse)]
        block.append(seccomp.ret(seccomp.RET_ALLOW))
        prog += [seccomp.insn(seccomp.JEQ_K, 0, len(block), seccomp.X86_64[name]), *block]
    prog.append(seccomp.ret(seccomp.RET_ALLOW))
    return b"".join(prog)


def apply_seccomp() -> None:
    # Every thread (SECCOMP_FILTER_FLAG_TSYNC): the watchdog too.
    rc = seccomp.Filter(seccomp_program()).install(seccomp.FILTER_FLAG_TSYNC)
    if rc != 0:
        raise LayerUnavailable("seccomp", f"thread {rc} could not be synced to the filter")


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

    def limits() -> str:
        rlimits.apply(
            cpu_seconds=int(policy["cpu_seconds"]),
            address_space=int(policy["memory_bytes"]),
            open_files=int(policy["open_files"]),
            file_size=int(policy["file_size_bytes"]),
        )
        return "cpu, as, nofile, fsize, core"

    def drop_privileges() -> str:
        """As root, become the policy's uid/gid for good; otherwise nothing to drop."""
        if os.geteuid() != 0:
            return f"not root (uid {os.geteuid()}); nothing to drop"
        uid, gid = int(policy.get("uid", NOBODY)), int(policy.get("gid", NOBODY))
        return creds.drop_root(uid, gid, "drop_privileges")

    if sys.platform != "linux":
        raise LayerUnavailable("platform", f"the script sandbox needs Linux, not {sys.platform}")
    step("rlimits", limits)
    step("no_new_privs", lambda: prctl(PR_SET_NO_NEW_PRIVS, 1) or "set")
    step("landlock", lambda: apply_landlock(list(policy.get("read_paths", ()))))
    step("drop_privileges", drop_privileges)

    def pdeath() -> str:
        set_pdeathsig(int(policy.get("parent_pid") or 0))
        prctl(PR_SET_DUMPABLE, 0)
        detail = "SIGKILL; not dumpable"
        if watch_fd is not None:
            start_watchdog(watch_fd)
            detail += "; exits when the bridge closes"
        return detail

    step("pdeathsig", pdeath)
    step("rlimits_nproc", lambda: resource.setrlimit(resource.RLIMIT_NPROC, (0, 0)) or "0")
    step("seccomp", lambda: apply_seccomp() or f"{len(DENIED_SYSCALLS)} syscalls denied")
    return {"level": level, "applied": applied, "missing": missing}
