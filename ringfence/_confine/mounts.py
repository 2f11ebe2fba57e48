"""Mounts from inside a sandbox: a mount namespace of one's own, overlays, unmounting.

Thin wrappers of ``unshare``, ``mount`` and ``umount2`` (Python has none); a
failure raises OSError with the call's errno, for the caller to name.
"""

from __future__ import annotations

import os

from .libc import error, libc

__all__ = [
    "CLONE_NEWNS",
    "MNT_DETACH",
    "MS_NODEV",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_REC",
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
