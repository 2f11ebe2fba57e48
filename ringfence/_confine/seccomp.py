"""seccomp: BPF filters on system calls, their installation, and user notifications.

A filter is classic BPF over ``struct seccomp_data`` (``nr``, ``arch``, the six
arguments), built here from instructions (:func:`insn`, :func:`load`,
:func:`ret`, :func:`prologue`, :func:`deny`) and system call numbers by name
(:data:`X86_64`: x86-64 is the one architecture ringfence builds filters for;
:func:`require_x86_64`). :class:`Filter` installs one on the calling thread,
for good, stacked on any installed before (needs ``no_new_privs`` or
``CAP_SYS_ADMIN``). With :data:`FILTER_FLAG_NEW_LISTENER` a filter's
``SECCOMP_RET_USER_NOTIF`` calls wait for a supervisor that reads the listener
(:func:`receive`, :func:`still_valid`, :func:`answer`). Which calls a sandbox
denies, and why, is its user's policy, not this module's.
"""

from __future__ import annotations

import ctypes
import os
import struct

from . import LayerUnavailable
from .libc import PR_GET_SECCOMP, failure, libc

TYPE_CHECKING = False  # no typing import: this module loads at every sandbox's start
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "AUDIT_ARCH_X86_64",
    "FILTER_FLAG_NEW_LISTENER",
    "FILTER_FLAG_TSYNC",
    "JEQ_K",
    "JGE_K",
    "JSET_K",
    "LD_W_ABS",
    "RET_ALLOW",
    "RET_K",
    "RET_KILL_PROCESS",
    "RET_USER_NOTIF",
    "X32_SYSCALL_BIT",
    "X86_64",
    "Filter",
    "answer",
    "arg",
    "deny",
    "errno_action",
    "insn",
    "load",
    "mode",
    "prologue",
    "receive",
    "require_x86_64",
    "ret",
    "still_valid",
    "sync_wakeups",
]

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes a filter uses.
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
RET_K = 0x06

# What a filter returns.
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_USER_NOTIF = 0x7FC00000
RET_ALLOW = 0x7FFF0000

_DATA_NR = 0
_DATA_ARCH = 4
_DATA_ARG0 = 16  # offsetof(struct seccomp_data, args[0]), the low half on x86-64

_SYS_SECCOMP = 317
_SET_MODE_FILTER = 1
FILTER_FLAG_TSYNC = 1  # every thread of the process, or none
FILTER_FLAG_NEW_LISTENER = 1 << 3  # the call returns the user notification listener
_FLAG_NAMES = {FILTER_FLAG_TSYNC: "TSYNC", FILTER_FLAG_NEW_LISTENER: "NEW_LISTENER"}

# ioctls on a listener (linux/seccomp.h, x86-64): _IOWR('!', 0, struct seccomp_notif) …
_NOTIF_RECV = 0xC0502100
_NOTIF_SEND = 0xC0182101
_NOTIF_ID_VALID = 0x40082102
_NOTIF_SET_FLAGS = 0x40082104
_USER_NOTIF_FD_SYNC_WAKE_UP = 1
_USER_NOTIF_FLAG_CONTINUE = 1

# x86-64 system call numbers by name: every call a ringfence filter names.
X86_64 = {
    "open": 2, "ioctl": 16, "shmget": 29, "shmat": 30, "shmctl": 31, "socket": 41, "connect": 42,
    "accept": 43, "bind": 49, "listen": 50, "socketpair": 53, "clone": 56, "fork": 57,
    "vfork": 58, "execve": 59, "kill": 62, "semget": 64, "semop": 65, "semctl": 66,
    "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "fcntl": 72, "truncate": 76,
    "creat": 85, "readlink": 89, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93,
    "lchown": 94, "ptrace": 101, "syslog": 103, "setuid": 105, "setgid": 106,
    "setpgid": 109, "setsid": 112, "setreuid": 113, "setregid": 114, "setgroups": 116,
    "setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123, "capset": 126,
    "rt_sigqueueinfo": 129, "utime": 132, "mknod": 133, "uselib": 134, "personality": 135,
    "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144, "vhangup": 153,
    "modify_ldt": 154, "pivot_root": 155, "prctl": 157, "adjtimex": 159, "setrlimit": 160,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191, "lgetxattr": 192,
    "fgetxattr": 193, "listxattr": 194, "llistxattr": 195, "flistxattr": 196,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "tkill": 200,
    "sched_setaffinity": 203, "semtimedop": 220, "clock_settime": 227, "tgkill": 234,
    "utimes": 235, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
    "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "kexec_load": 246,
    "add_key": 248, "request_key": 249, "keyctl": 250, "ioprio_set": 251,
    "inotify_init": 253, "inotify_add_watch": 254, "inotify_rm_watch": 255,
    "migrate_pages": 256, "openat": 257, "mknodat": 259, "fchownat": 260, "futimesat": 261,
    "readlinkat": 267, "fchmodat": 268, "unshare": 272, "move_pages": 279, "utimensat": 280,
    "accept4": 288, "inotify_init1": 294, "rt_tgsigqueueinfo": 297, "perf_event_open": 298,
    "fanotify_init": 300, "fanotify_mark": 301, "prlimit64": 302, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "sched_setattr": 314,
    "seccomp": 317, "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_open": 434, "clone3": 435,
    "openat2": 437, "pidfd_getfd": 438, "mount_setattr": 442, "fchmodat2": 452,
    "statmount": 457, "listmount": 458, "setxattrat": 463, "getxattrat": 464,
    "listxattrat": 465, "removexattrat": 466, "open_tree_attr": 467,
}  # fmt: skip


def require_x86_64() -> None:
    """Raise LayerUnavailable (``seccomp``) on a machine ringfence builds no filter for."""
    machine = os.uname().machine
    if machine != "x86_64":
        raise LayerUnavailable(
            "seccomp", f"no seccomp filter is built in for {machine} (only x86_64)"
        )


def insn(code: int, jt: int, jf: int, k: int) -> bytes:
    """One ``struct sock_filter``: opcode, jump offsets if true and if false, constant."""
    return struct.pack("<HBBI", code, jt, jf, k)


def load(offset: int) -> bytes:
    """``A = seccomp_data[offset]`` (a 32-bit word)."""
    return insn(LD_W_ABS, 0, 0, offset)


def arg(index: int) -> int:
    """The offset of the low half of ``seccomp_data.args[index]`` (x86-64 is little-endian)."""
    return _DATA_ARG0 + 8 * index


def ret(action: int) -> bytes:
    """Return ``action`` (``RET_ALLOW``, ``errno_action(…)``, …)."""
    return insn(RET_K, 0, 0, action)


def errno_action(err: int) -> int:
    """The action that fails the call with ``err``."""
    return RET_ERRNO | err


def prologue(*, kill_x32: bool = True) -> list[bytes]:
    """The start of every filter: a call of another architecture kills the process; then
    ``A`` holds the call's number (and an x32 call, with ``kill_x32``, kills too)."""
    prog = [
        load(_DATA_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ret(RET_KILL_PROCESS),
        load(_DATA_NR),
    ]
    if kill_x32:
        prog += [insn(JGE_K, 0, 1, X32_SYSCALL_BIT), ret(RET_KILL_PROCESS)]
    return prog


def deny(numbers: Iterable[int], action: int) -> list[bytes]:
    """With the call's number in ``A``: each of ``numbers`` returns ``action``."""
    prog = []
    for nr in sorted(set(numbers)):
        prog += [insn(JEQ_K, 0, 1, nr), ret(action)]
    return prog


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Filter:
    """A filter ready to install: its instructions and the ``sock_fprog`` pointing at them.

    Built ahead where installing must touch as little as possible (a forked
    child, between ``fork`` and ``exec``).
    """

    __slots__ = ("_buf", "_fprog", "program")

    def __init__(self, program: bytes) -> None:
        self.program = program
        self._buf = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len(program) // 8, ctypes.cast(self._buf, ctypes.c_void_p))

    def __len__(self) -> int:
        """How many instructions."""
        return len(self.program) // 8

    def install(self, flags: int = 0) -> int:
        """Install on the calling thread (``flags``: ``FILTER_FLAG_TSYNC``,
        ``FILTER_FLAG_NEW_LISTENER``): what the call returns (0, a listener, or with TSYNC
        the id of a thread that could not be synced). Raises LayerUnavailable (``seccomp``)."""
        rc = libc().syscall(
            _SYS_SECCOMP,
            ctypes.c_uint(_SET_MODE_FILTER),
            ctypes.c_uint(flags),
            ctypes.byref(self._fprog),
        )
        if rc < 0:
            named = [n for bit, n in _FLAG_NAMES.items() if flags & bit]
            flags_shown = "".join(f", SECCOMP_FILTER_FLAG_{n}" for n in named)
            raise failure("seccomp", f"seccomp(SECCOMP_SET_MODE_FILTER{flags_shown})")
        return int(rc)


def mode() -> int:
    """This process's seccomp mode (0 none, 1 strict, 2 filter), or -1 without seccomp."""
    return int(libc().prctl(PR_GET_SECCOMP, 0, 0, 0, 0))


# -- user notifications ------------------------------------------------------------------------


def sync_wakeups(listener: int) -> None:
    """Ask the kernel to wake the supervisor and the notifying task as a pair (Linux 6.6+:
    fewer scheduler round trips per call); nothing happens on older kernels."""
    import fcntl  # (here: a sandbox without exec checks never loads it)

    try:  # noqa: SIM105 (contextlib is one import more)
        fcntl.ioctl(listener, _NOTIF_SET_FLAGS, _USER_NOTIF_FD_SYNC_WAKE_UP)
    except OSError:
        pass


# struct seccomp_notif: id, pid, (flags), data.nr, (data.arch, data.instruction_pointer), args
_NOTIF = struct.Struct("<QI4xi4x8x6Q")
_RESPONSE = struct.Struct("<QqiI")  # struct seccomp_notif_resp: id, val, error, flags


def receive(listener: int) -> tuple[int, int, int, tuple[int, ...]]:
    """The next notification: ``(id, pid, call number, the six arguments)``. Raises OSError
    (the task was interrupted or died meanwhile)."""
    import fcntl

    request = bytearray(80)  # zeroed: the kernel refuses a buffer that is not
    fcntl.ioctl(listener, _NOTIF_RECV, request, True)
    nid, pid, nr, *args = _NOTIF.unpack(request)
    return nid, pid, nr, tuple(args)


def still_valid(listener: int, nid: int) -> bool:
    """Is the notification ``nid`` still live (its task waiting, its pid not reused)?"""
    import fcntl

    try:
        fcntl.ioctl(listener, _NOTIF_ID_VALID, struct.pack("<Q", nid))
    except OSError:
        return False
    return True


def answer(listener: int, nid: int, error: int = 0) -> None:
    """Let the call go on (``error`` 0), or fail it with ``error``. Raises OSError (the task
    is gone)."""
    import fcntl

    if error:
        response = _RESPONSE.pack(nid, 0, -error, 0)
    else:
        response = _RESPONSE.pack(nid, 0, 0, _USER_NOTIF_FLAG_CONTINUE)
    fcntl.ioctl(listener, _NOTIF_SEND, bytearray(response), True)
