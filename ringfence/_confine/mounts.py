"""Mounts: a mount namespace of one's own, overlays, id-mapped views, unmounting.

Thin wrappers of ``unshare``, ``mount`` and ``umount2`` (Python has none), and
of the new mount API's ``open_tree``, ``mount_setattr`` and ``move_mount``
(:func:`idmapped_mount`); a failure raises OSError with the call's errno, for
the caller to name.
"""

from __future__ import annotations

import ctypes
import os

from .libc import error, libc

__all__ = [
    "CLONE_NEWNS",
    "MNT_DETACH",
    "MS_NODEV",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_REC",
    "idmapped_mount",
    "mount",
    "umount",
    "unshare",
]

CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18
MNT_DETACH = 2


def unshare(flags: int) -> None:
    """``unshare(flags)``. Raises OSError."""
    if libc().unshare(flags):
        raise error("unshare")


def mount(
    source: bytes, target: str, fstype: bytes | None, flags: int, data: str | None = None
) -> None:
    """``mount(2)``. Raises OSError."""
    options = os.fsencode(data) if data is not None else None
    if libc().mount(source, os.fsencode(target), fstype, flags, options):
        raise error("mount")


def umount(target: str, flags: int = 0) -> bool:
    """``umount2(target, flags)``: whether it was unmounted (False: busy, or not mounted)."""
    return libc().umount2(os.fsencode(target), flags) == 0


# open_tree, move_mount and mount_setattr: the same numbers on x86_64 and arm64
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x100000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _syscall(what: str, number: int, *args: object) -> int:
    result = libc().syscall(number, *args)
    if result < 0:
        raise error(what)
    return int(result)


def idmapped_mount(src: str, dst: str, userns_fd: int) -> None:
    """Mount a read-only clone of ``src`` at the existing directory ``dst``, its ids mapped
    through the user namespace ``userns_fd`` (Linux 5.12+). Raises OSError; nothing is
    mounted then."""
    tree = _syscall(
        "open_tree",
        _SYS_OPEN_TREE,
        _AT_FDCWD,
        os.fsencode(src),
        _OPEN_TREE_CLONE | os.O_CLOEXEC,
    )
    try:
        attr = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY, 0, 0, userns_fd)
        _syscall(
            "mount_setattr",
            _SYS_MOUNT_SETATTR,
            tree,
            b"",
            _AT_EMPTY_PATH,
            ctypes.byref(attr),
            ctypes.sizeof(attr),
        )
        _syscall(
            "move_mount",
            _SYS_MOVE_MOUNT,
            tree,
            b"",
            _AT_FDCWD,
            os.fsencode(dst),
            _MOVE_MOUNT_F_EMPTY_PATH,
        )
    finally:
        os.close(tree)
