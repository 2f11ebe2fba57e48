"""Landlock (Linux 5.13+): rulesets that restrict what this process may do to files and TCP.

A ruleset *handles* access rights (filesystem, TCP, scopes) and *grants* some of
them beneath directories; :func:`restrict_self` enforces it on the calling
thread and every process it starts, for good (needs ``no_new_privs`` or
``CAP_SYS_ADMIN``). What each ABI adds is read at run time (:func:`abi`):
2 ``refer``, 3 ``truncate``, 4 TCP bind/connect, 5 device ``ioctl``, 6 scoping
of abstract Unix sockets and signals. Landlock applies to root too.

Every failure raises :class:`~ringfence._confine.LayerUnavailable` for the layer
``landlock``, naming the call and the error.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

from . import LayerUnavailable
from .libc import failure, libc

TYPE_CHECKING = False  # no typing import: this module loads at every sandbox's start
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "FS_ABI1",
    "FS_EXECUTE",
    "FS_IOCTL_DEV",
    "FS_READ_DIR",
    "FS_READ_FILE",
    "FS_REFER",
    "FS_TRUNCATE",
    "FS_WRITES_ABI1",
    "FS_WRITE_FILE",
    "NET_BIND_TCP",
    "NET_CONNECT_TCP",
    "SCOPE_ABSTRACT_UNIX",
    "SCOPE_SIGNAL",
    "abi",
    "create_ruleset",
    "fs_rights",
    "net_rights",
    "probe",
    "restrict_self",
    "ruleset_beneath",
    "scopes",
    "unavailable",
]

# The system calls (the same numbers on every Linux architecture).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# Filesystem access rights by the ABI that introduced them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_ABI1 = (1 << 13) - 1  # execute, write_file, read_file, read_dir, remove_dir … make_sym
# The write-type rights of ABI 1: write_file, remove_dir, remove_file, make_char, make_dir,
# make_reg, make_sock, make_fifo, make_block, make_sym.
FS_WRITES_ABI1 = FS_WRITE_FILE | sum(1 << bit for bit in range(4, 13))
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def probe() -> tuple[int, int]:
    """``(ABI version, 0)``, or ``(0, errno)`` when Landlock is absent (ENOSYS) or disabled
    (EOPNOTSUPP: built in, not in the ``lsm=`` boot list)."""
    if sys.platform != "linux":
        return 0, 0
    n = libc().syscall(
        _SYS_CREATE_RULESET,
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(_CREATE_RULESET_VERSION),
    )
    return (int(n), 0) if n >= 1 else (0, ctypes.get_errno())


def abi() -> int:
    """The running kernel's Landlock ABI version, or 0 when Landlock is absent or disabled."""
    return probe()[0]


def unavailable() -> LayerUnavailable:
    """The refusal when :func:`abi` is 0."""
    return LayerUnavailable(
        "landlock",
        "Landlock is not available (needs Linux >= 5.13 with landlock in the lsm= boot list)",
    )


def fs_rights(abi: int, base: int) -> int:
    """``base`` and the filesystem rights ABI ``abi`` adds to it (``refer``, ``truncate``)."""
    return base | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)


def net_rights(abi: int) -> int:
    """TCP bind and connect where the ABI governs them (4+), else nothing."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    """Abstract Unix sockets and signals scoped to the domain where the ABI can (6+)."""
    return SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0


def create_ruleset(
    fs: int, net: int = 0, scoped: int = 0, *, size: int = 0, what: str = "landlock_create_ruleset"
) -> int:
    """A ruleset handling these rights (a descriptor, close-on-exec).

    ``size`` 0: the smallest attribute that holds the non-zero fields (a kernel
    older than a field refuses a larger one only when that field is set).
    """
    attr = _RulesetAttr(fs, net, scoped)
    if not size:
        size = 24 if scoped else 16 if net else 8
    ruleset = libc().syscall(
        _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise failure("landlock", what)
    return int(ruleset)


def ruleset_beneath(
    fs: int,
    net: int,
    scoped: int,
    grants: Iterable[tuple[str, int, int]],
    *,
    size: int = 0,
    open_flags: int = os.O_PATH | os.O_CLOEXEC,
    skip_missing: bool = False,
    what: str = "landlock_create_ruleset",
) -> int:
    """A ruleset (:func:`create_ruleset`) granting, per ``(path, on a directory, on anything
    else)``, those rights beneath ``path``, opened with ``open_flags``.

    A path that cannot be opened raises OSError, or is left out with
    ``skip_missing`` (a directory this machine does not have needs no rule).
    The ruleset is closed on any failure.
    """
    ruleset = create_ruleset(fs, net, scoped, size=size, what=what)
    try:
        for path, on_dir, on_other in grants:
            try:
                fd = os.open(path, open_flags)
            except OSError:
                if skip_missing:
                    continue
                raise
            try:
                access = on_dir
                if on_dir != on_other and not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access = on_other
                rule = _PathBeneathAttr(access, fd)
                if libc().syscall(
                    _SYS_ADD_RULE,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ):
                    raise failure("landlock", f"landlock_add_rule({path})")
            finally:
                os.close(fd)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def restrict_self(ruleset: int) -> None:
    """Enforce ``ruleset`` on the calling thread, for good (the descriptor stays open)."""
    if libc().syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)):
        raise failure("landlock", "landlock_restrict_self")
