"""cgroup v2 for the process supervisor: one command's cgroup, the hierarchy, the sweep.

:class:`Cgroup` is one command's group: add a pid, signal or kill every
member at once (``cgroup.kill``, else freeze, SIGKILL, thaw), freeze and thaw
it (a writable MCP server's, while its writes are read), remove it (and
any groups a nested ringfence made below it). :func:`cgroup2_mount` and
:func:`own_cgroup` read where the hierarchy is and where this process sits;
:func:`sweep` kills and removes what crashed ringfence processes left. Every
operation is a small blocking read or write of a cgroup file; nothing here
spawns a process (that is :mod:`ringfence._proc`'s).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import time
from pathlib import Path
from typing import Literal

__all__ = [
    "GONE_LIMIT",
    "POLL",
    "Cgroup",
    "cgroup2_mount",
    "own_cgroup",
    "sweep",
]

# How long SIGKILLed members may take to be gone before we stop waiting (they
# cannot run any more; they only have to finish exiting).
GONE_LIMIT = 3.0
POLL = 0.002


def cgroup2_mount() -> str | None:
    """Where the cgroup v2 hierarchy is mounted (its root), or None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        # "<id> <parent> <dev> <root> <mount point> <options> [optional…] - <fstype> <source> <super>"
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and len(fields) >= 5 and fields[3] == "/":
            return fields[4].replace("\\040", " ")
    return None


def own_cgroup() -> str | None:
    """This process's cgroup v2 path below the hierarchy's root, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            path = line[3:]
            return None if path.endswith(" (deleted)") else path
    return None


def _pid_exists(pid: int) -> bool:
    """``psutil.pid_exists`` for a pid above 0, without importing psutil (a CLI's start)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def sweep(parent: Path) -> None:
    """Kill and remove what ringfence processes that died left under ``parent``."""
    for entry in os.scandir(parent):
        pid, _, _ = entry.name.partition("-")
        if not entry.is_dir() or not pid.isdigit() or _pid_exists(int(pid)):
            continue
        for cmd in Path(entry.path).iterdir():
            if cmd.is_dir():
                Cgroup(cmd, "cgroup.kill" if (cmd / "cgroup.kill").exists() else "freeze").destroy()
        with contextlib.suppress(OSError):
            os.rmdir(entry.path)


def _read(path: Path) -> str:
    # os-level: a cgroup file is one small read; pathlib's wrappers cost as much again.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class Cgroup:
    """One command's cgroup. Blocking file operations, each a single small read or write."""

    _names = itertools.count()

    def __init__(self, path: Path, kill: Literal["cgroup.kill", "freeze"]) -> None:
        self.path = path
        self._kill = kill

    @classmethod
    def create(cls, base: str, kill: Literal["cgroup.kill", "freeze"]) -> Cgroup:
        path = Path(base) / f"cmd-{next(cls._names)}"
        path.mkdir()
        return cls(path, kill)

    def add(self, pid: int) -> None:
        _write(self.path / "cgroup.procs", f"{pid}\n")

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self.path / "cgroup.procs").split()]
        except FileNotFoundError:
            return []

    def populated(self) -> bool:
        """Whether a live process is in the cgroup (exited ones, zombies too, are not)."""
        try:
            return "populated 1" in _read(self.path / "cgroup.events")
        except FileNotFoundError:
            return False

    def signal(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every member at once: no member can fork a survivor meanwhile."""
        if self._kill == "cgroup.kill":
            with contextlib.suppress(FileNotFoundError):
                _write(self.path / "cgroup.kill", "1")
            return
        # Before Linux 5.14: freeze, kill each member (a fatal signal reaches a
        # frozen task), thaw. A frozen task cannot fork, so the list is complete.
        try:
            self.freeze()
            for _ in range(500):  # freezing is asynchronous; bounded (about 1 s)
                if self.frozen():
                    break
                time.sleep(POLL)
            self.signal(signal.SIGKILL)
        except FileNotFoundError:
            return
        finally:
            with contextlib.suppress(OSError):
                self.thaw()

    def can_freeze(self) -> bool:
        """Whether this kernel has the cgroup v2 freezer (``cgroup.freeze``, Linux 5.2+)."""
        return (self.path / "cgroup.freeze").exists()

    def freeze(self) -> None:
        """Ask the kernel to freeze every member (``cgroup.freeze``); asynchronous: the
        members are stopped once :meth:`frozen` says so. Raises OSError."""
        _write(self.path / "cgroup.freeze", "1")

    def frozen(self) -> bool:
        """Whether every member is frozen now (``frozen 1`` in ``cgroup.events``): each is
        stopped where it would take a signal (out of any system call that was under way),
        so none runs, writes or forks until :meth:`thaw`. Raises OSError."""
        return "frozen 1" in _read(self.path / "cgroup.events")

    def thaw(self) -> None:
        """Let the members run again. Raises OSError."""
        _write(self.path / "cgroup.freeze", "0")

    def remove(self) -> bool:
        """Remove the cgroup and any cgroups below it (a nested ringfence's); False while busy."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            # Busy: members still exiting, or child cgroups. Remove those bottom-up.
            try:
                for top, dirs, _files in os.walk(self.path, topdown=False):
                    for name in dirs:
                        os.rmdir(os.path.join(top, name))
                self.path.rmdir()
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                raise
        return True

    def destroy(self) -> None:
        """Kill, wait (bounded) until empty, remove. For the sweep and the last resort."""
        for _ in range(int(GONE_LIMIT / POLL)):
            self.kill()
            if self.remove():
                return
            time.sleep(POLL)
