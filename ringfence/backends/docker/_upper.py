"""The host side of the docker backend's change sets: one upper directory per workspace root.

Layout of a session's directories (``base`` is ``$RINGFENCE_HOME/docker-uppers``)::

    base/<session id>/          the host's; never visible in the container      0700
    ├─ l<i>/                    root i's id-mapped read-only view, if any (:mod:`._idmap`)
    └─ c/                       bind-mounted at /.rf-uppers                      host user, 0755
       └─ <i>/                  one per root, in root order                      host user, 0755
          ├─ u/                 the overlay's upper directory: Upper.path        container user
          └─ w/                 its work directory                               container user

The container user owns ``u`` and ``w`` (the overlay in its user namespace
writes them) but, when ringfence runs as root, not ``c`` or ``<i>``: it
cannot replace ``u`` by a link that would make the host read something
else. When ringfence does not run as root the container user *is*
ringfence's user (it must be, to own ``u``), so :meth:`SessionUppers.check`
compares every ``u`` with the inode made at the start and refuses a result
whose upper was replaced. Nothing of the container runs while the host reads
or empties them: the supervisor kills every process of the container user
before a command's end marker.

Emptying (:meth:`SessionUppers.empty`) walks by descriptor and never follows
a link; directories a command left unreadable (mode 000) are opened up
first, which their owner (or root) may always do.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from ...runtime._errors import InvalidArguments, ToolError
from ...runtime._files import ringfence_home
from .._trees import empty_directory, remove_tree
from .._types import Upper
from ._idmap import idmapped_view, unmount

__all__ = [
    "CONTAINER_DIR",
    "GVISOR_REFUSAL",
    "SessionUppers",
    "change_set_user",
    "remove_session_dirs",
    "uppers_base",
]

CONTAINER_DIR = "/.rf-uppers"
# Measured (issue 34) with Debian's runsc (2022): the container user can make a user and
# mount namespace there and write its maps (there is no /proc/self/setgroups), but mounting
# an overlay in it fails with EPERM, with or without userxattr.
GVISOR_REFUSAL = (
    "change sets need an overlay mounted in a user namespace inside the container, which "
    "gVisor (runtime runsc) refuses (its user namespaces cannot mount overlayfs: EPERM); "
    "use the default runtime (runc) for change sets, or --no-change-sets under gVisor"
)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# In a session's directory: the pid of the process the session belongs to, so a sweep
# (._session._remove_orphaned_dirs) leaves a live process's directories alone.
OWNER = "owner"


def uppers_base() -> Path:
    return ringfence_home() / "docker-uppers"


def change_set_user(uid: int | None) -> str | None:
    """The container user change sets force (None: the usual rule applies).

    The container user must own the upper directories ringfence makes. As
    root, ringfence gives them to any user; otherwise the user is ringfence's
    own, and an ``options.user`` with another uid is refused.
    """
    if os.geteuid() == 0 or uid == os.geteuid():
        return None
    own = f"{os.geteuid()}:{os.getegid()}"
    if uid is not None:
        raise InvalidArguments(
            f"with change sets the container user must be ringfence's own uid ({own}) when "
            f"ringfence does not run as root (it owns the upper directories), not uid {uid}",
            field="options.user",
        )
    return own


@dataclass(frozen=True)
class _Made:
    root: Path
    path: Path
    dev: int
    ino: int


class SessionUppers:
    """The upper and work directories of one docker session (see the module docstring)."""

    def __init__(
        self, session_id: str, roots: Sequence[Path], owner: tuple[int, int], base: Path
    ) -> None:
        self.top = base / session_id
        self.mount_source = self.top / "c"
        self._roots = tuple(roots)
        self._owner = owner
        self._made: list[_Made] = []
        self._started: list[int | None] = []  # the uppers' modes as the last command started
        # Whether the last check() found every upper and work directory empty (then empty()
        # has nothing to do and the session skips its thread hop before the next command).
        self._clean = False
        self.lowers: dict[int, Path] = {}  # root index -> its id-mapped view, where one was made
        for root in self._roots:
            if base.resolve() == root or base.resolve().is_relative_to(root):
                raise InvalidArguments(
                    f"the change-set directories ({base}) would be inside the workspace root "
                    f"{root}; set RINGFENCE_HOME outside the workspace",
                    field="roots",
                )

    def container_dirs(self, i: int) -> tuple[str, str]:
        """``(upper, work)`` of root ``i`` as the container sees them."""
        return f"{CONTAINER_DIR}/{i}/u", f"{CONTAINER_DIR}/{i}/w"

    def create(self) -> None:
        """Make the directories (blocking). Raises ToolError when they cannot be made."""
        try:
            self.top.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.top.mkdir(mode=0o700)
            (self.top / OWNER).write_text(str(os.getpid()))
            self.mount_source.mkdir(mode=0o755)
            for i, root in enumerate(self._roots):
                here = self.mount_source / str(i)
                here.mkdir(mode=0o755)
                for name in ("u", "w"):
                    (here / name).mkdir(mode=0o755)
                    if os.geteuid() == 0:
                        os.chown(here / name, *self._owner)
                owned = os.stat(root)
                # The overlay's top directory shows the upper directory's own mode: the root's.
                os.chmod(here / "u", stat.S_IMODE(owned.st_mode))
                st = os.lstat(here / "u")
                self._made.append(_Made(root, here / "u", st.st_dev, st.st_ino))
                if owned.st_uid != self._owner[0]:
                    # Someone else's root (root's, on CI): the overlay could copy nothing up.
                    view = self.top / f"l{i}"
                    view.mkdir(mode=0o700)
                    if idmapped_view(root, view, (owned.st_uid, owned.st_gid), self._owner):
                        self.lowers[i] = view
        except OSError as exc:
            raise ToolError(
                f"cannot make the change-set directories under {self.top}: {exc}"
            ) from None

    def uppers(self) -> tuple[Upper, ...]:
        """The last command's upper directories, with their modes as it started."""
        return tuple(
            Upper(m.root, m.path, made_mode=mode)
            for m, mode in zip(self._made, self._started or [None] * len(self._made), strict=True)
        )

    @property
    def clean(self) -> bool:
        """Whether :meth:`after_command` found every upper empty (nothing ran since)."""
        return self._clean

    def mark_used(self) -> None:
        """A command starts: not :attr:`clean` until :meth:`after_command` says so (a
        cancelled command never gets there, and the next run empties everything). Notes the
        uppers' modes now (their roots', as the command will see them; a stat each)."""
        self._clean = False
        self._started = []
        for made in self._made:
            try:
                self._started.append(_mode(made.path))
            except OSError:  # gone: check() refuses the command's writes
                self._started.append(None)

    def check(self) -> None:
        """Refuse (ToolError) when a command replaced an upper directory (see the docstring)."""
        for made in self._made:
            try:
                st = os.lstat(made.path)
            except OSError as exc:
                raise ToolError(f"the upper directory {made.path} is gone ({exc})") from None
            if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (made.dev, made.ino):
                raise ToolError(
                    f"the command replaced its upper directory {made.path}; its writes "
                    "were not kept"
                )

    def after_command(self) -> None:
        """After a command (an lstat and at most one directory read a root, cheap enough for
        the event loop: run_shell's :func:`.._changesets.wrote` reads the uppers the
        same way right after): :meth:`check`; note whether every
        upper is empty (:attr:`clean`: then :meth:`empty` is not needed before the next
        command). The work directories are the overlay's own: the kernel clears them at the
        next mount, and the next command's ``enter`` removes a ``volatile`` overlay's mark
        first (:data:`._shell.VOLATILE_MARK`; emptying them here cost ~0.6 ms a command,
        a dozen journaled metadata changes on the host's disk)."""
        self._clean = False
        self.check()
        clean = True
        for made in self._made:
            try:
                with os.scandir(made.path) as entries:
                    clean = clean and next(entries, None) is None
                clean = clean and _mode(made.path) == _mode(made.root)  # no chmod of the root
            except OSError:
                clean = False
        self._clean = clean

    def empty(self) -> None:
        """Empty every upper and work directory (blocking; links are removed, never followed)
        and give each upper its root's mode again (a command's ``chmod .`` is refused)."""
        self._clean = False
        for made in self._made:
            for path in (made.path, made.path.parent / "w"):
                _empty_path(path)
            with contextlib.suppress(OSError):  # gone or replaced: check() reports it
                mode = _mode(made.root)
                fd = os.open(made.path, _DIR)
                try:
                    os.chmod(fd, mode)
                finally:
                    os.close(fd)

    def remove(self) -> None:
        """Remove everything (blocking, best effort); see :func:`remove_session_dirs`."""
        remove_session_dirs(self.top.name, self.top.parent)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _empty_path(path: Path) -> None:
    """Empty a directory by descriptor (links removed, never followed); one that was
    replaced or is gone is left alone (:meth:`SessionUppers.check` reports it)."""
    try:
        fd = os.open(path, _DIR)
    except OSError:
        return
    try:
        empty_directory(fd)
    finally:
        os.close(fd)


def remove_session_dirs(session_id: str, base: Path | None = None) -> None:
    """Remove a session's directories (blocking, best effort), a stale one's too.

    The views are unmounted, never emptied: a view still mounted keeps its
    directory (``rmdir`` fails), and the workspace it shows is left intact.
    """
    if not re.fullmatch(r"[0-9a-f]{6,64}", session_id):
        return
    top = (base or uppers_base()) / session_id
    with contextlib.suppress(OSError):
        fd = os.open(top / "c", _DIR)
        try:
            empty_directory(fd)
        finally:
            os.close(fd)
        os.rmdir(top / "c")
    with contextlib.suppress(OSError):  # a remote session's rebuilt uppers (..engines._remote)
        remove_tree(top / "r")
    with contextlib.suppress(OSError):
        for view in top.glob("l*"):
            unmount(view)
            view.rmdir()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(top / OWNER)
        top.rmdir()


def owner_alive(top: Path) -> bool:
    """Whether the process a session directory names as its owner is still running."""
    try:
        pid = int((top / OWNER).read_text())
    except (OSError, ValueError):
        return False
    return psutil.pid_exists(pid)
