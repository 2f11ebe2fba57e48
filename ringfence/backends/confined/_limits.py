"""The confined session's process and memory limits: cgroups (v2, else v1) around the sandbox.

Used by :mod:`._session` while a sandbox starts; nothing here raises (a
limit that cannot be had is reported as the ``pids`` layer's detail).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ... import _proc

if TYPE_CHECKING:
    from ._plan import ConfinedOptions

__all__ = [
    "_cgroup_mounts",
    "_children",
    "_join_limit_cgroups",
    "_make_limit_cgroups",
    "_processes_of",
    "_remove_cgroup",
    "_sweep_limit_cgroups",
    "_v2_limits",
]


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """controller -> (mount point, this process's cgroup in it), for v1 pids and memory."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                own[c] = path
    found: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(rfields) < 3 or rfields[0] != "cgroup" or fields[3] != "/":
                continue
            for c in ("pids", "memory"):
                if c in rfields[2].split(",") and c in own:
                    found[c] = (fields[4], own[c])
    return found


def _v2_limits(group: Path | None, options: ConfinedOptions) -> str | None:
    """Limits on the sandbox's own cgroup v2 (made by _proc) where the controllers can be had.

    Each ancestor must delegate ``pids`` and ``memory`` to its children; one
    that does not is enabled here when allowed (the hierarchy's root, a
    cgroup without processes of its own). None when that fails: the caller
    tries cgroup v1. Never raises.
    """
    if group is None:
        return None
    mount = _proc._cgroup2_mount()
    if mount is None or Path(mount) not in group.parents:
        return None
    try:
        chain = [p for p in reversed(group.parents) if Path(mount) in (p, *p.parents)]
        for parent in chain:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            missing = [c for c in ("pids", "memory") if c not in enabled]
            if missing:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
        (group / "pids.max").write_text(str(options.pids))
        (group / "memory.max").write_text(str(options.memory))
        with contextlib.suppress(OSError):
            (group / "memory.swap.max").write_text("0")
    except OSError:
        return None
    return f"cgroup v2 pids.max={options.pids}, memory.max={options.memory}"


def _make_limit_cgroups(max_pids: int, memory: int) -> tuple[list[Path], str]:
    """A cgroup per limited controller, limits set, still empty; (made, detail). Never raises.

    Uses cgroup v1 ``pids``/``memory`` hierarchies where they are mounted and
    writable (hybrid hosts keep their controllers there). Without ``pids``
    nothing is made.
    """
    made: list[Path] = []
    done: list[str] = []
    why: list[str] = []
    name = f"ringfence-{os.getpid()}-{secrets.token_hex(4)}"
    settings = {
        "pids": ("pids.max", str(max_pids)),
        "memory": ("memory.limit_in_bytes", str(memory)),
    }
    mounts = _cgroup_mounts()
    for controller, (file, value) in settings.items():
        if controller not in mounts:
            why.append(f"no writable {controller} hierarchy")
            continue
        mount, own = mounts[controller]
        path = Path(mount) / own.lstrip("/") / name
        _sweep_limit_cgroups(path.parent)
        try:
            path.mkdir()
        except OSError as exc:
            why.append(f"{controller}: {exc.strerror}")
            continue
        try:
            (path / file).write_text(value)
        except OSError as exc:
            why.append(f"{controller}: {exc.strerror}")
            _remove_cgroup(path)
            continue
        made.append(path)
        done.append(f"{file}={value}")
    if not any(d.startswith("pids.") for d in done):
        for path in made:
            _remove_cgroup(path)
        return [], "; ".join(why)
    return made, "cgroup " + ", ".join(done)


def _join_limit_cgroups(pid: int, made: list[Path], detail: str) -> tuple[list[Path], str]:
    """Move bubblewrap (``pid``), then its children, into ``made``; before any command runs.

    bubblewrap first: a child it forks afterwards inherits the cgroups; one it
    forked before is listed afterwards. The supervisor forks nothing until the
    first command. Never raises.
    """
    try:
        for path in made:
            for member in (pid, *_children(pid)):
                with contextlib.suppress(ProcessLookupError):
                    (path / "cgroup.procs").write_text(str(member))
    except OSError as exc:
        return [], f"cannot join the limit cgroups: {exc.strerror}"
    return made, detail


def _processes_of(uid: int) -> int:
    """How many processes ``uid`` runs now (RLIMIT_NPROC counts them all without a user
    namespace, so the sandbox's allowance comes on top)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _sweep_limit_cgroups(parent: Path) -> None:
    """Remove the limit cgroups of ringfence processes that died (their sandboxes died too)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            prefix, pid, _ = (entry.name + "--").split("-", 2)
            dead = pid.isdigit() and not os.path.exists(f"/proc/{pid}")
            if prefix == "ringfence" and dead:
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)


def _remove_cgroup(path: Path) -> None:
    for _ in range(200):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return
            time.sleep(0.005)
