"""The Workspace: the roots file tools are confined to, and its one way out, the host-root view.

The operations themselves live in :mod:`._reader` (open, resolve a
directory, read, list), :mod:`._writer` (write, edit) and :mod:`._search`
(glob, grep), all over :mod:`._resolver`; each takes the resolver and the
:class:`~._resolver.Access` of the call. This module holds the two fronts
(:class:`Workspace`, confined; :class:`HostRootView`, from
:meth:`Workspace.with_host_root`), the roots' lifetime and
:meth:`Workspace.git_directories`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ..runtime._errors import InvalidArguments, Unavailable
from ..runtime._programs import in_root, search_path
from . import _judged, _reader, _search, _writer
from ._resolver import CONFINED, Access, Resolver, Root, open_root
from .git._rules import is_dotgit, is_git_directory, read_commondir, read_gitfile

if TYPE_CHECKING:
    from .git._snapshot import GitSnapshot

__all__ = ["FileOps", "HostRootView", "Workspace"]

T = TypeVar("T")


class FileOps:
    """The file operations, shared by :class:`Workspace` and :class:`HostRootView`.

    Which roots a call may reach is the object's, not an argument's: a
    ``Workspace`` reaches its roots, a ``HostRootView`` also ``/``.
    """

    _resolver: Resolver

    def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return fn(self._resolver, CONFINED, *args, **kwargs)

    def _ripgrep(self) -> str | None:
        raise NotImplementedError

    def open_fd(self, path: str, flags: int = os.O_RDONLY) -> int:
        """Open ``path`` inside the roots; the caller owns (and closes) the descriptor.

        Raises OutsideWorkspace, NotFound, InvalidArguments or ToolError.
        """
        return self._call(_reader.open_fd, path, flags)

    def final_name(self, path: str) -> str:
        """The name (escaped as tools show it) of the file ``path`` resolves to, every link
        inside the roots followed: what a policy rule on the path is judged against."""
        return self._call(_judged.final_name, path)

    def resolve_dir(self, path: str) -> Path:
        """The host path of a directory inside the workspace (``run_shell``'s cwd).

        Relative paths are relative to the first root. The answer is a path
        string, so a process that later uses it is not held to it: the
        backend confines the process itself. Raises OutsideWorkspace,
        NotFound or InvalidArguments (not a directory).
        """
        return self._call(_reader.resolve_dir, path)

    # -- reading -----------------------------------------------------------------------

    def read_text(self, path: str, *, offset: int = 1, limit: int | None = None) -> str:
        """Lines ``offset``.. (1-based) of a text file, at most ``limit`` of them.

        Text is UTF-8; undecodable bytes become U+FFFD. A file with a NUL byte
        in its first 8000 bytes or in the lines returned is binary and is
        refused (InvalidArguments), as are directories and special files.
        More than 16 MiB of text needs ``offset``/``limit``.
        """
        return self._call(_reader.read_text, path, offset=offset, limit=limit)

    def list_dir(self, path: str) -> list[dict[str, str]]:
        """Entries of a directory, sorted by name: ``{"name", "type"}``.

        ``type`` is ``file``, ``directory``, ``symlink`` or ``other``; a link is
        listed as ``symlink`` whatever it points to (reading through it is
        checked like any path).
        """
        return self._call(_reader.list_dir, path)

    # -- writing -----------------------------------------------------------------------

    def write_text(
        self, path: str, content: str, *, record: _writer.Recorder | None = None
    ) -> dict[str, Any]:
        """Create or replace a file with ``content`` (UTF-8), creating missing directories.

        Returns ``{"path", "bytes", "created"}``. Raises GitMetadata,
        OutsideWorkspace, Unwritable, InvalidArguments, NotFound. ``record`` (the
        checkpoint recorder) is told the before- and after-image before the
        write becomes visible; if it raises, nothing is written.
        """
        return self._call(_writer.write_text, path, content, record=record)

    def check_write(self, path: str, content: str) -> dict[str, Any]:
        """What :meth:`write_text` would refuse, raised without writing (a dry run's staging)."""
        return self._call(_writer.write_text, path, content, dry=True)

    def edit_text(
        self, path: str, old: str, new: str, *, record: _writer.Recorder | None = None
    ) -> dict[str, Any]:
        """Replace the one occurrence of ``old`` with ``new`` in a UTF-8 text file.

        Raises InvalidArguments (field ``old``) when ``old`` is missing or
        occurs more than once, and everything :meth:`write_text` raises. The
        file must not change between the read and the replace (ToolError).
        """
        return self._call(_writer.edit_text, path, old, new, record=record)

    def check_edit(self, path: str, old: str, new: str) -> dict[str, Any]:
        """What :meth:`edit_text` would refuse, raised without writing (a dry run's staging)."""
        return self._call(_writer.edit_text, path, old, new, dry=True)

    # -- searching ---------------------------------------------------------------------

    def glob(self, pattern: str, path: str = ".", *, max_results: int = 1000) -> list[str]:
        """Paths under ``path`` matching ``pattern``, sorted, at most ``max_results``.

        ``*``, ``?`` and ``[...]`` match within one name (a leading dot
        included), ``**`` matches any number of directories. Files only,
        unless the pattern ends in ``/`` (directories only, shown with a
        trailing ``/``). Links are listed when their target is inside a root;
        linked directories are never entered; ``.git`` entries are skipped.
        Paths are shown as tools take them: relative to the first root, else
        absolute.
        """
        return self._call(_search.glob, pattern, path, max_results=max_results)

    def grep(
        self,
        pattern: str,
        path: str = ".",
        *,
        glob: str | None = None,
        max_results: int = 100,
        on_notice: Callable[[str], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Lines matching a regular expression: ``{"path", "line", "text"}``, sorted by path and line.

        At most ``max_results``. ``glob`` filters files like ripgrep's ``-g``
        (no ``/``: the file name). Binary files (a NUL byte), files over
        64 MiB and ``.git`` entries are skipped; linked directories are never
        entered; links to files are searched when their target is inside a
        root. ripgrep, when available, only narrows which files are read;
        both engines return the same results (see ``_search``). ``on_notice``
        hears when ripgrep could not run and Python searched every file.
        """
        return self._call(
            _search.grep,
            pattern,
            path,
            glob=glob,
            max_results=max_results,
            ripgrep=self._ripgrep(),
            on_notice=on_notice,
        )


class Workspace(FileOps):
    """The roots that file tools are confined to, held open as directory descriptors.

    ``Workspace(roots)`` opens every root (each must exist and be a directory,
    else InvalidArguments naming it). A relative path is relative to the first
    root; an absolute path must lie inside one. Use as a context manager or
    call :meth:`close`.

    A ``Workspace`` is confined: none of its methods reaches outside the
    roots. The one way out is :meth:`with_host_root`, a view that may also
    reach ``/`` and reports each place it reached there; leaving the sandbox
    is therefore explicit and searchable (cap-std's ``ambient_authority``).

    Guarantees
        * No operation opens, lists, creates or replaces a file outside the
          roots. Paths are resolved through descriptors (``openat2`` with
          ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``, else an ``O_NOFOLLOW``
          walk), and the I/O happens relative to the directory descriptor the
          resolution ended on: the file acted on is the file checked.
        * Symbolic links are followed only while they stay inside a root
          (a link to another root is fine); a link out of the roots, directly,
          through a chain, dangling, absolute or via ``/proc/self/root`` or
          ``/proc/self/fd``, is ``outside_workspace``. So are ``..`` climbs out,
          sibling-prefix paths (``/ws-evil`` is not inside ``/ws``) and a
          leading ``//``. NUL bytes are ``invalid_arguments``.
        * Git metadata is never written, whatever the posture: a ``.git``
          component at any depth in any spelling git protects, any git
          directory (bare, separate, worktree, submodule, and so the target of
          a ``.git`` file: git only follows ``gitdir:`` to a git directory),
          and no write may assemble one (the write that would complete
          ``HEAD`` + ``objects/`` + ``refs/`` or add ``commondir`` is refused,
          in whatever order the pieces come). Errors say why (``git_metadata``).
        * Writes replace (temp file, ``fsync``, rename relative to the parent
          descriptor): hard links are replaced, not written through; owner,
          mode and extended attributes are kept or the write is
          ``unwritable`` with the original byte-for-byte unchanged; a crash
          never leaves a truncated target.
        * The search tools never enter a linked directory and list or read a
          file only when its resolved target lies inside a root.

    Non-guarantees
        * Not a sandbox for code: it confines these operations, not processes
          (``run_shell`` is confined by its backend).
        * A directory that another process *renames* out of the roots while an
          operation holds its descriptor takes that operation with it; symlink
          swaps are caught, moves of held directories are not. Bind mounts
          inside a root are followed like directories.
        * Device nodes and FIFOs inside a root are refused after opening
          (``O_NONBLOCK``), so opening one can still have a device's side effect.
        * A git directory whose ``commondir`` points elsewhere is refused
          without checking the common directory (more refusals, never fewer).
        * A crashed write can leave a ``.ringfence-*.tmp`` file next to the target.

    Platform notes
        * Linux only: the resolver needs ``O_PATH`` and ``/proc/self/fd``; on
          other systems the constructor raises ``unavailable``.
        * ``openat2`` (Linux 5.6+) is the fast path; without it (``ENOSYS``,
          remembered) the ``O_NOFOLLOW`` walk does all the work, with the same
          results.
        * Windows spelling rules (case, ``\\\\?\\``, 8.3 names, device names,
          streams) exist as pure functions in ``ringfence.workspace`` for a
          Windows resolver to use; there is no Windows resolver yet.
        * Running as root does not make a read-only file writable: permission
          bits are checked, not just the OS's answer.
    """

    def __init__(self, roots: Sequence[str | os.PathLike[str]]) -> None:
        if not sys.platform.startswith("linux"):
            raise Unavailable(
                f"the workspace resolver needs Linux (O_PATH, /proc/self/fd); this is {sys.platform}"
            )
        if isinstance(roots, (str, os.PathLike)) or not roots:
            raise InvalidArguments("give at least one workspace root, as a list", field="roots")
        opened: list[Root] = []
        try:
            for index, given in enumerate(roots):
                opened.append(open_root(index, given))
        except BaseException:
            for root in opened:
                os.close(root.fd)
            raise
        self._resolver = Resolver(opened)
        # ripgrep, when installed, prefilters grep_files; set to None to use Python only. Never
        # one in a root (an activated project venv puts <root>/.venv/bin first on PATH): the
        # agent's own "rg" there ran on the host, unconfined, at the next grep_files.
        roots_now = [r.path for r in opened]
        found = shutil.which("rg", path=search_path(os.environ.get("PATH", os.defpath), roots_now))
        self.ripgrep: str | None = None if found is None or in_root(found, roots_now) else found

    def _ripgrep(self) -> str | None:
        return self.ripgrep

    # -- lifetime and facts ------------------------------------------------------------

    @property
    def roots(self) -> list[Path]:
        """The real paths of the roots, in order."""
        return [r.path for r in self._resolver.roots]

    @property
    def use_openat2(self) -> bool:
        """Whether the ``openat2`` fast path is tried (tests switch it off)."""
        return self._resolver.use_openat2

    @use_openat2.setter
    def use_openat2(self, value: bool) -> None:
        self._resolver.use_openat2 = value

    def close(self) -> None:
        """Release the root descriptors (after any operation in flight). Idempotent.

        Later calls, on the workspace and on its host-root views, raise ToolError.
        """
        self._resolver.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace({[str(p) for p in self.roots]!r})"

    # -- the way out -------------------------------------------------------------------

    def with_host_root(self, on_notice: Callable[[str], None]) -> HostRootView:
        """A view of this workspace that may also reach the host's ``/``.

        For the ``unrestricted`` posture, and nothing else. The view shares
        this workspace's descriptors (closing the workspace closes it); paths
        inside the roots resolve exactly as here, and a path that leaves them
        resolves against ``/`` instead of being ``outside_workspace``. After
        each call that succeeds, ``on_notice`` is called (in the calling
        thread) with the place it reached outside the roots, if any. Git
        metadata stays unwritable through the view.
        """
        return HostRootView(self, on_notice)

    # -- git directories ---------------------------------------------------------------

    def git_directories(self) -> list[Path]:
        """Every git directory inside the roots, for mounting read-only.

        ``.git`` directories (any spelling), directories git would accept as a
        repository (bare, separate, worktree and submodule git dirs), and the
        targets of ``.git`` files (``gitdir: …``) and ``.git`` links that lie
        inside a root. Linked directories are not entered; a git directory's
        contents are not searched further (mounting it covers them). Real
        paths, sorted, none inside another.
        """
        found: set[Path] = set()
        real_roots = self.roots
        with self._resolver:
            for root in self._resolver.roots:
                if root.git_reason is not None or is_git_directory(root.fd):
                    found.add(root.path)
                    continue
                self._scan_git(root, found, real_roots)
        _add_common_directories(found, real_roots)
        # A directory inside another listed one is covered by that one's mount.
        return sorted(p for p in found if not any(a in found for a in p.parents))

    def linked_git_metadata(self, snapshot: GitSnapshot) -> list[Path]:
        """What git reads through links in the git metadata ``snapshot`` found (a
        ``.git/hooks -> ../githooks``, a ``hooks/pre-commit -> ../../scripts/pre-commit``),
        inside the roots, for mounting read-only: each place, or its deepest part that exists
        (a dangling link's target is made by creating it, so its directory is held; never a
        root itself). Sorted."""
        from .changes._linked import ConfigNamed, linked_metadata
        from .changes._view import TreeView

        found: set[Path] = set()
        with self._resolver:
            view = TreeView([(str(r.path), r.fd) for r in self._resolver.roots])
            for target, link in linked_metadata(snapshot, view).items():
                if isinstance(link, ConfigNamed) and view.lstat(target) is None:
                    # A file or hooks directory a configuration names that is not there
                    # (an optional include beside the checkout): its directory is the
                    # worktree, never made read-only; what a command makes there is
                    # quarantined by the scan after it, and the merge refuses a set's.
                    continue
                place = target
                while view.lstat(place) is None:
                    where = view.locate(place)
                    if where is None or not where[1]:
                        break
                    place = place.rpartition("/")[0] or "/"
                where = view.locate(place)
                # A root itself is never made read-only for a dangling link (every command
                # would then fail); the merge judges what a command wrote there.
                if where is not None and where[1] and view.lstat(place) is not None:
                    found.add(Path(place))
        return sorted(found)

    def _scan_git(self, root: Root, found: set[Path], real_roots: list[Path]) -> None:
        top = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root.fd)
        stack: list[tuple[int, Path]] = [(top, root.path)]
        try:
            while stack:
                fd, where = stack.pop()
                try:
                    try:
                        with os.scandir(fd) as it:
                            entries = [
                                (e.name, e.is_dir(follow_symlinks=False), e.is_symlink())
                                for e in it
                            ]
                    except OSError:
                        continue
                    for name, is_dir, is_link in entries:
                        host = where / name
                        if is_dotgit(name):
                            if is_dir:
                                found.add(host)
                            elif is_link:
                                _add_if_inside(Path(os.path.realpath(host)), real_roots, found)
                            else:
                                target = read_gitfile(fd, name)
                                if target is not None:
                                    resolved = Path(os.path.realpath(where / target))
                                    _add_if_inside(resolved, real_roots, found)
                            continue
                        if not is_dir:
                            continue
                        try:
                            sub = os.open(
                                name,
                                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=fd,
                            )
                        except OSError:
                            continue
                        if is_git_directory(sub):
                            found.add(host)
                            os.close(sub)
                        else:
                            stack.append((sub, host))
                finally:
                    os.close(fd)
        finally:
            while stack:
                os.close(stack.pop()[0])


class HostRootView(FileOps):
    """A :class:`Workspace` that may also reach the host's ``/``; see :meth:`Workspace.with_host_root`.

    Made only by ``with_host_root``, so leaving the sandbox is spelled out
    where it happens. Holds no descriptors of its own.
    """

    def __init__(self, workspace: Workspace, on_notice: Callable[[str], None]) -> None:
        self._workspace = workspace
        self._resolver = workspace._resolver
        self._on_notice = on_notice

    def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        # Places are collected per call and passed on only when it succeeds.
        reached: list[str] = []
        result = fn(self._resolver, Access(host_root=True, note=reached.append), *args, **kwargs)
        for where in reached:
            self._on_notice(where)
        return result

    def _ripgrep(self) -> str | None:
        return self._workspace.ripgrep

    @property
    def roots(self) -> list[Path]:
        """The workspace's roots (``/`` is reachable besides them, but not one of them)."""
        return self._workspace.roots

    def __repr__(self) -> str:
        return f"{self._workspace!r}.with_host_root(...)"


# -- helpers ------------------------------------------------------------------------------


def _add_common_directories(found: set[Path], roots: list[Path]) -> None:
    """Add the common directory of each git directory in ``found`` (what its ``commondir``
    names, read as git reads it) that lies inside a root: git reads that repository's config
    and hooks there, and it needs no ``HEAD`` of its own to be found otherwise."""
    for gitdir in list(found):
        try:
            fd = os.open(gitdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            common = read_commondir(fd) if is_git_directory(fd) else None
        finally:
            os.close(fd)
        if common is not None:
            _add_if_inside(Path(os.path.realpath(gitdir / common)), roots, found)


def _add_if_inside(path: Path, roots: list[Path], found: set[Path]) -> None:
    if any(path == r or r in path.parents for r in roots):
        found.add(path)
