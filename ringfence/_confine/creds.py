"""Credentials and capabilities: becoming another uid for good, emptying every capability set.

:func:`drop_root` is how a sandbox stops being root (its user namespace's or the
host's): supplementary groups, then gid and uid (real, effective, saved), which
clears every capability, proved by a ``setuid(0)`` that must fail.
:func:`drop_capabilities` empties the bounding set too (so no later ``exec`` of a
file with capabilities gets any back) and the process's own sets, for a
process that keeps its uid.
"""

from __future__ import annotations

import ctypes
import os

from . import LayerUnavailable
from .libc import PR_CAPBSET_DROP, failure, libc

__all__ = ["become", "drop_capabilities", "drop_root"]

_SYS_CAPSET = 126
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CAP_LAST = 63  # PR_CAPBSET_DROP answers EINVAL past the kernel's last capability
_EINVAL = 22


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def become(uid: int, gid: int) -> None:
    """No supplementary groups, then ``gid`` and ``uid`` as real, effective and saved ids.
    Raises OSError."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def drop_root(uid: int, gid: int, layer: str) -> str:
    """As root, become ``uid``/``gid`` for good and prove it; what happened, for a report.

    Raises LayerUnavailable (``layer``) when the switch fails or root is still
    reachable after it.
    """
    try:
        become(uid, gid)
    except OSError as exc:
        raise LayerUnavailable(layer, f"could not become uid {uid}: {exc}") from None
    try:
        os.setuid(0)
    except PermissionError:
        return f"uid/gid {uid}/{gid}, no capabilities"
    raise LayerUnavailable(layer, "setuid(0) still succeeds after dropping root")


def drop_capabilities(switch: tuple[int, int] | None) -> None:
    """Every capability gone: the bounding set emptied, then the process's own sets.

    ``switch`` (uid, gid): become them on the way (which clears the process's
    sets by itself). Raises LayerUnavailable (``capabilities``) or OSError.
    """
    lib = libc()
    for cap in range(_CAP_LAST + 1):
        if lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == _EINVAL:  # past the kernel's last capability
                break
            raise failure("capabilities", f"PR_CAPBSET_DROP({cap})")
    if switch is not None:
        become(*switch)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if lib.syscall(_SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)):
        raise failure("capabilities", "capset")
