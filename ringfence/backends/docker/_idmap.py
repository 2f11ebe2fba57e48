"""An id-mapped, read-only view of a workspace root: how a root-owned workspace becomes writable.

Under change sets (:mod:`._session`) a command writes through an overlay whose
lower layer is the root. The overlay lives in a user namespace that maps
only the container user, so a lower entry owned by anyone else (root, on
CI's checkouts) cannot be copied up: writing, renaming or creating inside it
fails (``EACCES``/``EOVERFLOW``). When ringfence runs as root it can give
the overlay a lower layer in which the root's owner appears as the container
user: an id-mapped mount (Linux 5.12+, ``mount_setattr(MOUNT_ATTR_IDMAP)``)
of the root, read-only, made with the new mount API
(:func:`ringfence._confine.mounts.idmapped_mount`) on a directory of the
session's and bind-mounted into the container instead of the root.

Nothing on disk changes: the mapping is a property of that mount only. Only
the owner's ids are mapped; entries owned by anyone else appear unmapped
(``nobody``) and stay unwritable. The user namespace the mapping comes from
belongs to a short-lived ``unshare --user sleep`` started through
:mod:`ringfence._proc` and killed once the mount holds the mapping.

Not promised: without root, without ``unshare`` (util-linux) on the host, or
on a kernel or file system without id-mapped mounts, :func:`idmapped_view`
returns False and the root is used as it is. A crash of ringfence leaves the
read-only view mounted under ``$RINGFENCE_HOME/docker-uppers`` until the next
docker session on this host starts (two minutes on or later: it unmounts and
removes it, :func:`._session.remove_stale_containers`), a reboot or ``umount``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..._confine.mounts import MNT_DETACH, idmapped_mount, umount
from ..._proc import spawn
from ...runtime._errors import RingfenceError

__all__ = ["idmapped_view", "unmount"]

_HELPER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


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
    try:
        idmapped_mount(str(src), str(dst), ns)
        return True
    except OSError:
        return False
    finally:
        os.close(ns)


def unmount(dst: Path) -> None:
    """Detach the view at ``dst`` (blocking, best effort)."""
    umount(str(dst), MNT_DETACH)
