"""An id-mapped, read-only view of a workspace root: how a root-owned workspace becomes writable.

Under change sets (:mod:`._session`) a command writes through an overlay whose
lower layer is the root. The overlay lives in a user namespace that maps
only the container user, so a lower entry owned by anyone else (root, on
CI's checkouts) cannot be copied up: writing, renaming or creating inside it
fails (``EACCES``/``EOVERFLOW``). When ringfence runs as root it can give
the overlay a lower layer in which the root's owner appears as the container
user: an id-mapped mount (Linux 5.12+, ``mount_setattr(MOUNT_ATTR_IDMAP)``)
of the root, read-only, made with the new mount API on a directory of the
session's and bind-mounted into the container instead of the root.

Nothing on disk changes: the mapping is a property of that mount only. Only
the owner's ids are mapped; entries owned by anyone else appear unmapped
(``nobody``) and stay unwritable. The user namespace the mapping comes from
belongs to a short-lived ``unshare --user sleep`` started through
:mod:`ringfence._proc` and killed once the mount holds the mapping.

Not promised: without root, without ``unshare`` (util-linux) on the host, or
on a kernel or file system without id-mapped mounts, :func:`idmapped_view`
returns False and the root is used as it is. A crash of ringfence leaves the
read-only view mounted under ``$RINGFENCE_HOME/docker-uppers`` until reboot
or ``umount``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from pathlib import Path

from ..._proc import spawn
from ...runtime import RingfenceError

__all__ = ["idmapped_view", "unmount"]

_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # the same on x86_64/arm64
_AT_FDCWD = -100
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
_AT_EMPTY_PATH = 0x1000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x100000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MNT_DETACH = 2
_HELPER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(number, *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def _userns(owner: tuple[int, int], user: tuple[int, int]) -> int:
    """A descriptor of a user namespace mapping ``owner`` (uid, gid) to ``user``."""
    mine = os.readlink("/proc/self/ns/user")
    helper = spawn(["unshare", "--user", "sleep", "30"], cwd=Path("/"), env={"PATH": _HELPER_PATH})
    try:
        deadline = time.monotonic() + 5
        while os.readlink(f"/proc/{helper.pid}/ns/user") == mine:
            if helper.leader_exited() or time.monotonic() > deadline:
                raise OSError("the user namespace helper did not start")
            time.sleep(0.001)
        proc = f"/proc/{helper.pid}"
        Path(f"{proc}/uid_map").write_text(f"{owner[0]} {user[0]} 1\n")
        Path(f"{proc}/setgroups").write_text("deny\n")
        Path(f"{proc}/gid_map").write_text(f"{owner[1]} {user[1]} 1\n")
        return os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill_rest_now()
        helper.close()
        os.close(helper.stdout)
        os.close(helper.stderr)


def idmapped_view(src: Path, dst: Path, owner: tuple[int, int], user: tuple[int, int]) -> bool:
    """Mount ``src`` read-only at the existing directory ``dst``, ``owner`` shown as ``user``.

    Blocking. Returns False (nothing mounted) where it cannot be done (see
    the module docstring); never raises for that.
    """
    if os.geteuid() != 0:
        return False
    try:
        ns = _userns(owner, user)
    except (OSError, RingfenceError):
        return False
    tree = -1
    try:
        tree = _syscall(
            _SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(src), _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC
        )
        attr = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY, 0, 0, ns)
        _syscall(
            _SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)
        )
        _syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(dst), _MOVE_MOUNT_F_EMPTY_PATH)
        return True
    except OSError:
        return False
    finally:
        os.close(ns)
        if tree >= 0:
            os.close(tree)


def unmount(dst: Path) -> None:
    """Detach the view at ``dst`` (blocking, best effort)."""
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.umount2(os.fsencode(dst), _MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "umount2")
