"""The seccomp profile of the docker backend's change-set mode: Docker's default plus namespaces.

In change-set mode (``SessionSpec.change_sets``) the supervisor runs every
command in a nested user and mount namespace and mounts an overlay there
(:mod:`ringfence.backends.docker._shell`). Docker's default profile refuses
``unshare``, ``mount`` and namespace flags to ``clone`` unless the container
holds ``CAP_SYS_ADMIN``, which a ringfence container never does
(``cap_drop=ALL``), and docker-py cannot fetch the daemon's built-in profile
to extend it. So the profile is shipped here, written out from two lists:

* :data:`DEFAULT_ALLOW`: the system calls moby's ``profiles/seccomp/default.json``
  allows to a process without capabilities (its first rule, unconditional),
  plus the per-architecture and argument-filtered rules below it that apply
  without a capability (``personality`` with the values Docker allows,
  ``socket`` without ``AF_VSOCK``, ``arch_prctl``/``modify_ldt`` on x86,
  ``ptrace``/``process_vm_*`` from kernel 4.8). Rules that need a capability
  are left out: no capability is ever granted.
* :data:`NAMESPACE_ALLOW`: what the nested namespaces need and nothing else:
  ``unshare`` and ``clone`` with any flags (``CLONE_NEWUSER | CLONE_NEWNS``),
  ``setns``, ``mount`` and ``umount``/``umount2``. ``clone3`` keeps Docker's
  ``ENOSYS`` so libc falls back to ``clone``.

What this opens, said plainly: every process in the container, commands
included, may create user and mount namespaces and mount what a user
namespace may mount (overlay, tmpfs, bind mounts of what it can see). That
is the kernel's unprivileged user-namespace surface, which Docker's default
closes. It grants no access the container user lacks on the host: mounts
made from the container's own namespaces are locked read-only where Docker
made them read-only, and the workspace's bind mount is read-only in this mode.
The mode is used only when change sets are asked for; otherwise Docker's own
default profile applies unchanged.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DEFAULT_ALLOW", "NAMESPACE_ALLOW", "profile", "security_opt"]

# moby profiles/seccomp/default.json, first rule (SCMP_ACT_ALLOW, no condition).
DEFAULT_ALLOW: tuple[str, ...] = (
    "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset",
    "chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64", "clock_getres",
    "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
    "clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range", "creat",
    "dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
    "epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2",
    "execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64",
    "fadvise64_64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown",
    "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr",
    "flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs",
    "fstatfs64", "fsync", "ftruncate", "ftruncate64", "futex", "futex_time64", "futex_waitv",
    "futimesat", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32",
    "geteuid", "geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer",
    "getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
    "getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list",
    "getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid",
    "gettimeofday", "getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init",
    "inotify_init1", "inotify_rm_watch", "io_cancel", "ioctl", "io_destroy", "io_getevents",
    "io_pgetevents", "io_pgetevents_time64", "ioprio_get", "ioprio_set", "io_setup",
    "io_submit", "io_uring_enter", "io_uring_register", "io_uring_setup", "ipc", "kill",
    "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown",
    "lchown32", "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "_llseek",
    "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise", "membarrier",
    "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock",
    "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
    "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64",
    "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
    "munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat", "_newselect",
    "open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
    "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6",
    "pselect6_time64", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
    "readlinkat", "readv", "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg",
    "remap_file_pages", "removexattr", "rename", "renameat", "renameat2", "restart_syscall",
    "rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr", "sched_getparam",
    "sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler",
    "sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity",
    "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
    "select", "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "send",
    "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto", "setfsgid", "setfsgid32",
    "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setitimer",
    "setpgid", "setpriority", "setregid", "setregid32", "setresgid", "setresgid32",
    "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit", "set_robust_list",
    "setsid", "setsockopt", "set_thread_area", "set_tid_address", "setuid", "setuid32",
    "setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd",
    "signalfd4", "sigprocmask", "sigreturn", "socketcall", "socketpair", "splice", "stat",
    "stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat", "sync", "sync_file_range",
    "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete",
    "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime",
    "timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
    "timerfd_settime", "timerfd_settime64", "times", "tkill", "truncate", "truncate64",
    "ugetrlimit", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat",
    "utimensat_time64", "utimes", "vfork", "vmsplice", "wait4", "waitid", "waitpid", "write",
    "writev",
)  # fmt: skip

# What the supervisor's nested user + mount namespace needs (see the module docstring).
NAMESPACE_ALLOW: tuple[str, ...] = ("clone", "unshare", "setns", "mount", "umount", "umount2")

_ARCH_MAP = [
    {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
    {"architecture": "SCMP_ARCH_S390X", "subArchitectures": ["SCMP_ARCH_S390"]},
    {"architecture": "SCMP_ARCH_RISCV64", "subArchitectures": None},
]
_PERSONALITIES = (0, 8, 131072, 131080, 4294967295)  # Docker's: PER_LINUX, UNAME26, …
_AF_VSOCK = 40


def profile() -> dict[str, Any]:
    """The profile as Docker's seccomp JSON (``defaultAction`` EPERM, like Docker's default)."""
    rules: list[dict[str, Any]] = [
        {"names": sorted(set(DEFAULT_ALLOW) | set(NAMESPACE_ALLOW)), "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["process_vm_readv", "process_vm_writev", "ptrace"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"minKernel": "4.8"},
        },
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": _AF_VSOCK, "op": "SCMP_CMP_NE"}],
        },
        *(
            {
                "names": ["personality"],
                "action": "SCMP_ACT_ALLOW",
                "args": [{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}],
            }
            for value in _PERSONALITIES
        ),
        {
            "names": ["arch_prctl"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"arches": ["amd64", "x32"]},
        },
        {
            "names": ["modify_ldt"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"arches": ["amd64", "x32", "x86"]},
        },
        {
            "names": [
                "arm_fadvise64_64",
                "arm_sync_file_range",
                "sync_file_range2",
                "breakpoint",
                "cacheflush",
                "set_tls",
            ],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"arches": ["arm", "arm64"]},
        },
        {
            "names": ["riscv_flush_icache"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"arches": ["riscv64"]},
        },
        # As Docker's default: libc falls back to clone(2), whose flags are allowed above.
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "archMap": _ARCH_MAP,
        "syscalls": rules,
    }


def security_opt() -> str:
    """The ``security_opt`` entry that installs :func:`profile` (its JSON *content*)."""
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))
