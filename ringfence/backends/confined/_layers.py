"""The confined local backend's seccomp filter and Landlock plan, built in the kernel.

Both are computed here, with the script runner's helpers (``bridge/_sandbox``:
its BPF instruction encoder, system call table, Landlock constants and ABI
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
import os

from ...bridge import _sandbox as sb

__all__ = [
    "DENIED_SYSCALLS",
    "LAYER_SYSCALLS",
    "LayerUnavailable",
    "landlock_plan",
    "layer_filter",
    "seccomp_program",
]

LayerUnavailable = sb.LayerUnavailable

# clone flags that create namespaces: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
# NEWPID, NEWNET.
_CLONE_NEW_NAMESPACES = (
    0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
_NR_CLONE = 56
_NR_CLONE3 = 435
_BPF_JSET_K = 0x45
_SECCOMP_DATA_ARG0 = 16  # offsetof(struct seccomp_data, args[0]), the low half on x86-64
_SETID_BITS = 0o6000  # S_ISUID | S_ISGID
_O_CREAT = 0o100
_O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE
_NR_OPENAT2 = 437
# System calls that set a mode: number -> which argument is the mode.
_SETID_MODE = {90: 1, 91: 1, 268: 2, 452: 2, 85: 1, 133: 1, 259: 2}  # chmod, fchmod,
# fchmodat, fchmodat2, creat, mknod, mknodat
# System calls that set a mode only when creating: number -> (flags argument, mode argument).
_SETID_CREATE = {2: (1, 2), 257: (2, 3)}  # open, openat


def _arg(index: int) -> int:
    """Offset of the low half of ``seccomp_data.args[index]`` (x86-64 is little-endian)."""
    return _SECCOMP_DATA_ARG0 + 8 * index


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

# What the supervisor itself needs under change sets (an overlay per command): bubblewrap's
# filter leaves them out and each command's child installs :func:`layer_filter` before exec.
LAYER_SYSCALLS = ("mount", "umount2", "unshare")

# Write-type Landlock filesystem rights (ABI 1): write_file, remove_dir, remove_file,
# make_char, make_dir, make_reg, make_sock, make_fifo, make_block, make_sym. Reading and
# executing are not handled: the mount layout decides what is visible.
_FS_WRITE_FILE = 1 << 1
_FS_WRITES_ABI1 = _FS_WRITE_FILE | sum(1 << bit for bit in range(4, 13))


def _check_arch() -> None:
    if os.uname().machine != "x86_64":
        raise LayerUnavailable(
            "seccomp", f"no seccomp filter is built in for {os.uname().machine} (only x86_64)"
        )


def layer_filter() -> bytes:
    """The second filter of a change-set command: ``LAYER_SYSCALLS`` answer EPERM.

    Stacked on bubblewrap's (seccomp filters only add up), installed by the
    command's child after its overlays are mounted. Raises LayerUnavailable.
    """
    _check_arch()
    ins = sb._insn
    prog = [
        ins(sb._BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        ins(sb._BPF_JEQ_K, 1, 0, sb._AUDIT_ARCH_X86_64),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_KILL_PROCESS),
        ins(sb._BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    for nr in sorted(sb._DENIED_X86_64[name] for name in LAYER_SYSCALLS):
        prog.append(ins(sb._BPF_JEQ_K, 0, 1, nr))
        prog.append(ins(sb._BPF_RET_K, 0, 0, sb._RET_ERRNO | errno.EPERM))
    prog.append(ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW))
    return b"".join(prog)


def seccomp_program(layered: bool = False) -> bytes:
    """The commands' BPF filter as raw ``sock_filter`` instructions (bubblewrap's format).

    ``layered`` (change sets): without ``LAYER_SYSCALLS``, which the
    supervisor needs and :func:`layer_filter` denies to each command.
    Raises LayerUnavailable on an architecture without a built-in filter.
    """
    _check_arch()
    ins = sb._insn
    eperm = sb._RET_ERRNO | errno.EPERM
    prog = [
        ins(sb._BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        ins(sb._BPF_JEQ_K, 1, 0, sb._AUDIT_ARCH_X86_64),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_KILL_PROCESS),
        ins(sb._BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        ins(sb._BPF_JGE_K, 0, 1, sb._X32_SYSCALL_BIT),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_KILL_PROCESS),
        ins(sb._BPF_JEQ_K, 0, 1, _NR_CLONE3),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_ERRNO | errno.ENOSYS),
        ins(sb._BPF_JEQ_K, 0, 4, _NR_CLONE),  # not clone: on to the deny list
        ins(sb._BPF_LD_W_ABS, 0, 0, _arg(0)),
        ins(_BPF_JSET_K, 0, 1, _CLONE_NEW_NAMESPACES),
        ins(sb._BPF_RET_K, 0, 0, eperm),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW),
    ]
    # No setuid/setgid bit from inside: a file the sandbox's uid owns (host root's, when the
    # workspace is root's) must not become a setuid program on the host.
    for nr, mode_arg in _SETID_MODE.items():
        prog += [
            ins(sb._BPF_JEQ_K, 0, 4, nr),
            ins(sb._BPF_LD_W_ABS, 0, 0, _arg(mode_arg)),
            ins(_BPF_JSET_K, 0, 1, _SETID_BITS),
            ins(sb._BPF_RET_K, 0, 0, eperm),
            ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW),
        ]
    for nr, (flags_arg, mode_arg) in _SETID_CREATE.items():
        prog += [
            ins(sb._BPF_JEQ_K, 0, 6, nr),
            ins(sb._BPF_LD_W_ABS, 0, 0, _arg(flags_arg)),
            ins(_BPF_JSET_K, 0, 3, _O_CREAT | _O_TMPFILE_BIT),  # not creating: allowed
            ins(sb._BPF_LD_W_ABS, 0, 0, _arg(mode_arg)),
            ins(_BPF_JSET_K, 0, 1, _SETID_BITS),
            ins(sb._BPF_RET_K, 0, 0, eperm),
            ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW),
        ]
    prog += [
        # openat2's mode sits behind a pointer: ENOSYS, and libc's openat is used instead
        ins(sb._BPF_JEQ_K, 0, 1, _NR_OPENAT2),
        ins(sb._BPF_RET_K, 0, 0, sb._RET_ERRNO | errno.ENOSYS),
    ]
    denied = [n for n in DENIED_SYSCALLS if not (layered and n in LAYER_SYSCALLS)]
    for nr in sorted({sb._DENIED_X86_64[name] for name in denied}):
        prog.append(ins(sb._BPF_JEQ_K, 0, 1, nr))
        prog.append(ins(sb._BPF_RET_K, 0, 0, eperm))
    prog.append(ins(sb._BPF_RET_K, 0, 0, sb._RET_ALLOW))
    return b"".join(prog)


def landlock_plan(network: bool) -> str:
    """The supervisor's ruleset: ``abi,fs,net,scoped,size,file_rights`` for this kernel's ABI.

    Raises LayerUnavailable when Landlock is absent or disabled.
    """
    abi = sb.landlock_abi()
    if abi < 1:
        raise LayerUnavailable(
            "landlock",
            "Landlock is not available (needs Linux >= 5.13 with landlock in the lsm= boot list)",
        )
    fs = _FS_WRITES_ABI1
    file_rights = _FS_WRITE_FILE
    if abi >= 2:
        fs |= sb._FS_REFER
    if abi >= 3:
        fs |= sb._FS_TRUNCATE
        file_rights |= sb._FS_TRUNCATE
    net = sb._NET_BIND_TCP | sb._NET_CONNECT_TCP if abi >= 4 and not network else 0
    scoped = sb._SCOPE_ABSTRACT_UNIX | sb._SCOPE_SIGNAL if abi >= 6 else 0
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    return f"{abi},{fs},{net},{scoped},{size},{file_rights}"
