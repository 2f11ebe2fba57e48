"""The confined local backend's seccomp filter and Landlock plan, built in the kernel.

Both are computed here, from the Linux primitives of :mod:`ringfence._confine`
(the BPF instructions, the system call table, the Landlock rights and ABI
probe), and handed to the sandbox: the filter to bubblewrap's ``--seccomp``
(installed right before the supervisor starts, so the supervisor and every
command run under it), the Landlock plan to the supervisor as numbers. The
supervisor then imports almost nothing, which is most of a session's start.

The filter (x86-64) extends the script runner's idea for shell commands,
which must fork, exec and signal their own processes: no ``ptrace`` or
cross-process memory access, no keyctl/bpf/perf/userfaultfd/io_uring, no
mounts, no new namespaces (``unshare``, ``setns``, ``clone`` with a namespace
flag; ``clone3``, whose flags a filter cannot read, answers ENOSYS so libc
falls back to ``clone``), no module loading, reboot, clock or hostname
changes, no setuid/setgid bit set by ``chmod``/``fchmod``/``fchmodat``/
``mknod``/``creat``/``open(O_CREAT)`` (``openat2``, whose mode a filter
cannot read, answers ENOSYS). Foreign-ABI (x32 or other architecture)
system calls kill the process. A deny list, not an allow list.
"""

from __future__ import annotations

import errno

from ..._confine import LayerUnavailable, landlock, seccomp
from ..._confine.seccomp import JEQ_K, JSET_K, arg, insn, load, ret

__all__ = [
    "DENIED_SYSCALLS",
    "LAYER_SYSCALLS",
    "LayerUnavailable",
    "landlock_plan",
    "layer_filter",
    "seccomp_program",
]

# clone flags that create namespaces: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
# NEWPID, NEWNET.
_CLONE_NEW_NAMESPACES = (
    0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
_SETID_BITS = 0o6000  # S_ISUID | S_ISGID
_O_CREAT = 0o100
_O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE
# System calls that set a mode: name -> which argument is the mode.
_SETID_MODE = {
    "chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "creat": 1, "mknod": 1, "mknodat": 2,
}  # fmt: skip
# System calls that set a mode only when creating: name -> (flags argument, mode argument).
_SETID_CREATE = {"open": (1, 2), "openat": (2, 3)}

# System calls a command may not make (EPERM), by name in ``_confine.seccomp.X86_64``.
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

# What the supervisor itself needs under change sets (an overlay per command; reading an
# exec's path and argv with process_vm_readv under exec checks): bubblewrap's filter leaves
# them out and each command's child installs :func:`layer_filter` before exec.
LAYER_SYSCALLS = ("mount", "umount2", "unshare", "process_vm_readv")

_NR = seccomp.X86_64
_EPERM = seccomp.errno_action(errno.EPERM)
_ENOSYS = seccomp.errno_action(errno.ENOSYS)


def layer_filter() -> bytes:
    """The second filter of a change-set command: ``LAYER_SYSCALLS`` answer EPERM.

    Stacked on bubblewrap's (seccomp filters only add up), installed by the
    command's child after its overlays are mounted. Raises LayerUnavailable.
    """
    seccomp.require_x86_64()
    prog = [
        *seccomp.prologue(kill_x32=False),
        *seccomp.deny((_NR[name] for name in LAYER_SYSCALLS), _EPERM),
        ret(seccomp.RET_ALLOW),
    ]
    return b"".join(prog)


def seccomp_program(layered: bool = False) -> bytes:
    """The commands' BPF filter as raw ``sock_filter`` instructions (bubblewrap's format).

    ``layered`` (change sets): without ``LAYER_SYSCALLS``, which the
    supervisor needs and :func:`layer_filter` denies to each command.
    Raises LayerUnavailable on an architecture without a built-in filter.
    """
    seccomp.require_x86_64()
    prog = [
        *seccomp.prologue(kill_x32=True),
        insn(JEQ_K, 0, 1, _NR["clone3"]),
        ret(_ENOSYS),
        insn(JEQ_K, 0, 4, _NR["clone"]),  # not clone: on to the deny list
        load(arg(0)),
        insn(JSET_K, 0, 1, _CLONE_NEW_NAMESPACES),
        ret(_EPERM),
        ret(seccomp.RET_ALLOW),
    ]
    # No setuid/setgid bit from inside: a file the sandbox's uid owns (host root's, when the
    # workspace is root's) must not become a setuid program on the host.
    for name, mode_arg in _SETID_MODE.items():
        prog += [
            insn(JEQ_K, 0, 4, _NR[name]),
            load(arg(mode_arg)),
            insn(JSET_K, 0, 1, _SETID_BITS),
            ret(_EPERM),
            ret(seccomp.RET_ALLOW),
        ]
    for name, (flags_arg, mode_arg) in _SETID_CREATE.items():
        prog += [
            insn(JEQ_K, 0, 6, _NR[name]),
            load(arg(flags_arg)),
            insn(JSET_K, 0, 3, _O_CREAT | _O_TMPFILE_BIT),  # not creating: allowed
            load(arg(mode_arg)),
            insn(JSET_K, 0, 1, _SETID_BITS),
            ret(_EPERM),
            ret(seccomp.RET_ALLOW),
        ]
    prog += [
        # openat2's mode sits behind a pointer: ENOSYS, and libc's openat is used instead
        insn(JEQ_K, 0, 1, _NR["openat2"]),
        ret(_ENOSYS),
    ]
    denied = [n for n in DENIED_SYSCALLS if not (layered and n in LAYER_SYSCALLS)]
    prog += seccomp.deny((_NR[name] for name in denied), _EPERM)
    prog.append(ret(seccomp.RET_ALLOW))
    return b"".join(prog)


def landlock_plan(network: bool) -> str:
    """The supervisor's ruleset: ``abi,fs,net,scoped,size,file_rights`` for this kernel's ABI.

    Write-type rights only (reading and executing are not handled: the mount
    layout decides what is visible); a file (not a directory) is granted only
    ``file_rights``. Raises LayerUnavailable when Landlock is absent or disabled.
    """
    abi = landlock.abi()
    if abi < 1:
        raise landlock.unavailable()
    fs = landlock.fs_rights(abi, landlock.FS_WRITES_ABI1)
    file_rights = landlock.FS_WRITE_FILE | (landlock.FS_TRUNCATE if abi >= 3 else 0)
    net = 0 if network else landlock.net_rights(abi)
    scoped = landlock.scopes(abi)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    return f"{abi},{fs},{net},{scoped},{size},{file_rights}"
