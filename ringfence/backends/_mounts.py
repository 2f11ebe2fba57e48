"""Which mount a path is on (``/proc/self/mountinfo``): a rename works only within one.

A shell command's change set is merged by renaming its new files and trees
from the overlay's upper directory into the workspace; across mounts (even
two bind mounts of one file system) ``rename`` fails with ``EXDEV`` and every
file is copied instead. The backends use :func:`mount_of` to put the upper
directories on the workspace's mount when they can, and the benchmarks to
name the file system their scratch files are on.

Linux only: elsewhere, or when ``/proc`` is not mounted, :func:`mount_of`
returns None and callers keep their default.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = [
    "LAYERS_DIR_FIELD",
    "Mount",
    "kernel_state_mounts_below",
    "mount_of",
    "place_in_file_system",
]

# Where the local backend makes a session's overlay directories (confined._plan._layers_base):
# ``use_places(layers_dir=...)``, on the command line ``$RINGFENCE_LAYERS_DIR``.
LAYERS_DIR_FIELD = "layers_dir"
_ESCAPED = re.compile(r"\\([0-7]{3})")  # mountinfo writes space, tab, newline, \ as \ooo


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: its id, where it is mounted, its file system type and source."""

    id: int
    point: str
    fstype: str
    source: str
    device: str = ""  # major:minor of its file system
    within: str = "/"  # the directory of that file system mounted at ``point`` (a bind's source)


def _unescape(field: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 8)), field)


def _mounts() -> list[Mount]:
    """Every line of this process's mountinfo (none when it cannot be read)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(" ")
        try:
            rest = fields[fields.index("-") + 1 :]
            found.append(
                Mount(
                    int(fields[0]),
                    _unescape(fields[4]),
                    rest[0],
                    _unescape(rest[1]),
                    fields[2],
                    _unescape(fields[3]),
                )
            )
        except (ValueError, IndexError):
            continue
    return found


def kernel_state_mounts_below(root: str | os.PathLike[str], kinds: set[str]) -> list[str]:
    """The mount points strictly below ``root`` (resolved) whose file system type is one of
    ``kinds`` (``proc``, ``sysfs``, …: the kernel's state), outermost first; a mount below
    one of them is left out (covering the outer one hides it)."""
    top = os.path.realpath(root).rstrip("/") + "/"
    points = sorted(
        {m.point for m in _mounts() if m.fstype in kinds and m.point.startswith(top)},
        key=lambda p: (p.count("/"), p),
    )
    outer: list[str] = []
    for point in points:
        if not any(point.startswith(o.rstrip("/") + "/") for o in outer):
            outer.append(point)
    return outer


def mount_of(path: str | os.PathLike[str]) -> Mount | None:
    """The mount that holds ``path`` (resolved), or None when mountinfo cannot be read.

    The deepest mount point above the path wins; of two at the same point,
    the later one (mounted over the first) does.
    """
    real = os.path.realpath(path)
    found: Mount | None = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(" ")
        try:
            rest = fields[fields.index("-") + 1 :]
            mount = Mount(
                int(fields[0]),
                _unescape(fields[4]),
                rest[0],
                _unescape(rest[1]),
                fields[2],
                _unescape(fields[3]),
            )
        except (ValueError, IndexError):
            continue
        point = mount.point
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (found is None or len(point) >= len(found.point)):
            found = mount
    return found


def place_in_file_system(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``(major:minor, path within that file system)`` of ``path``'s real path, whatever
    mount spells it (a directory bind-mounted elsewhere has its source's place), or None
    when mountinfo cannot be read."""
    mount = mount_of(path)
    if mount is None or not mount.device:
        return None
    real = os.path.realpath(path)
    rest = real[len(mount.point.rstrip("/")) :] if mount.point != "/" else real
    return mount.device, (mount.within.rstrip("/") + rest) or "/"
