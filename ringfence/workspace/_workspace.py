"""The Workspace: the roots file tools are confined to, and the operations on them."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ..runtime import (
    GitMetadata,
    InvalidArguments,
    RingfenceError,
    Unavailable,
    Unwritable,
)
from ._gitguard import is_dotgit, is_git_directory, read_gitfile
from ._resolver import (
    FollowLeaf,
    Place,
    Resolver,
    Root,
    check_path_string,
    display_path,
    fd_path,
    open_leaf,
    translate_oserror,
)
from ._search import (
    GREP_MAX_FILE_BYTES,
    RipgrepRun,
    compile_glob,
    compile_name_filter,
    compile_regex,
    list_tree,
    search_text,
)
from ._writer import Expected, dir_denies_create, replace_file

__all__ = ["READ_MAX_BYTES", "Workspace"]

# read_file returns at most this much text per call; larger reads need offset/limit.
READ_MAX_BYTES = 16 * 1024 * 1024
# A file whose first bytes (this many) hold a NUL is binary (git's heuristic size).
BINARY_SNIFF_BYTES = 8000

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # NONBLOCK: a FIFO never hangs a read
_GIT_EXPLANATION = (
    "Git runs programs that its configuration and hooks name, so ringfence never writes git "
    "metadata, in any posture. Reading it still works; change git settings with a git command "
    "you run or approve."
)


@dataclass
class _Access:
    """How one call may reach files: confined to the roots, or unrestricted (noted)."""

    unrestricted: bool = False
    notices: list[str] = field(default_factory=list)

    def note(self, place: Place) -> None:
        if place.root.is_host:
            self.notices.append(place.display())


class Workspace:
    """The roots that file tools are confined to, held open as directory descriptors.

    ``Workspace(roots)`` opens every root (each must exist and be a directory,
    else InvalidArguments naming it). A relative path is relative to the first
    root; an absolute path must lie inside one. Use as a context manager or
    call :meth:`close`.

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
                opened.append(_open_root(index, given))
        except BaseException:
            for root in opened:
                os.close(root.fd)
            raise
        self._resolver = Resolver(opened)
        # ripgrep, when installed, prefilters grep_files; set to None to use Python only.
        self.ripgrep: str | None = shutil.which("rg")

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
        """Release the root descriptors (after any operation in flight). Idempotent."""
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

    # -- low level ---------------------------------------------------------------------

    def open_fd(self, path: str, flags: int = os.O_RDONLY, *, unrestricted: bool = False) -> int:
        """Open ``path`` confined to the roots; the caller owns (and closes) the descriptor.

        Raises OutsideWorkspace, NotFound, InvalidArguments or ToolError.
        """
        with self._resolver as resolver:
            if not unrestricted:
                return resolver.open(path, flags)
            return self._open(path, flags, _Access(unrestricted))

    def _open(self, path: str, flags: int, access: _Access) -> int:
        if not access.unrestricted:
            return self._resolver.open(path, flags)
        opener = open_leaf(flags)

        def op(place: Place) -> int:
            fd = opener(place)
            access.note(place)
            return fd

        return self._resolver.walk(path, op, unrestricted=True)

    def resolve_dir(self, path: str, *, unrestricted: bool = False) -> Path:
        """The host path of a directory inside the workspace (``run_shell``'s cwd).

        Relative paths are relative to the first root. The answer is a path
        string, so a process that later uses it is not held to it: the
        backend confines the process itself. Raises OutsideWorkspace,
        NotFound or InvalidArguments (not a directory).
        """
        with self._resolver:
            fd = self._open(path, os.O_PATH, _Access(unrestricted))
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    raise InvalidArguments(f"{path!r} is not a directory", field="path")
                return fd_path(fd)
            finally:
                os.close(fd)

    # -- reading -----------------------------------------------------------------------

    def read_text(
        self,
        path: str,
        *,
        offset: int = 1,
        limit: int | None = None,
        unrestricted: bool = False,
        notices: list[str] | None = None,
    ) -> str:
        """Lines ``offset``.. (1-based) of a text file, at most ``limit`` of them.

        Text is UTF-8; undecodable bytes become U+FFFD. A file with a NUL byte
        in its first 8000 bytes or in the lines returned is binary and is
        refused (InvalidArguments), as are directories and special files.
        More than 16 MiB of text needs ``offset``/``limit``.
        """
        if offset < 1:
            raise InvalidArguments("offset is a 1-based line number", field="offset")
        if limit is not None and limit < 1:
            raise InvalidArguments("limit must be at least 1 line", field="limit")
        access = _Access(unrestricted)
        with self._resolver:
            fd = self._open(path, _READ_FLAGS, access)
            try:
                text = _read_lines(fd, path, offset, limit)
            finally:
                os.close(fd)
        _pass_notices(access, notices)
        return text

    def list_dir(
        self, path: str, *, unrestricted: bool = False, notices: list[str] | None = None
    ) -> list[dict[str, str]]:
        """Entries of a directory, sorted by name: ``{"name", "type"}``.

        ``type`` is ``file``, ``directory``, ``symlink`` or ``other``; a link is
        listed as ``symlink`` whatever it points to (reading through it is
        checked like any path).
        """
        access = _Access(unrestricted)
        with self._resolver:
            fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY, access)
            try:
                with os.scandir(fd) as it:
                    entries = [{"name": e.name, "type": _entry_type(e)} for e in it]
            except OSError as exc:
                raise translate_oserror(exc, path) from None
            finally:
                os.close(fd)
        _pass_notices(access, notices)
        return sorted(entries, key=lambda e: e["name"])

    # -- writing -----------------------------------------------------------------------

    def write_text(
        self,
        path: str,
        content: str,
        *,
        unrestricted: bool = False,
        notices: list[str] | None = None,
    ) -> dict[str, Any]:
        """Create or replace a file with ``content`` (UTF-8), creating missing directories.

        Returns ``{"path", "bytes", "created"}``. Raises GitMetadata,
        OutsideWorkspace, Unwritable, InvalidArguments, NotFound.
        """
        data = _encode(content, "content")
        return self._write(path, lambda place: (data, None), unrestricted, notices, create=True)

    def edit_text(
        self,
        path: str,
        old: str,
        new: str,
        *,
        unrestricted: bool = False,
        notices: list[str] | None = None,
    ) -> dict[str, Any]:
        """Replace the one occurrence of ``old`` with ``new`` in a UTF-8 text file.

        Raises InvalidArguments (field ``old``) when ``old`` is missing or
        occurs more than once, and everything :meth:`write_text` raises. The
        file must not change between the read and the replace (ToolError).
        """
        if not old:
            raise InvalidArguments("old is empty; give the exact text to replace", field="old")
        _encode(old, "old")
        _encode(new, "new")

        def produce(place: Place) -> tuple[bytes, Expected]:
            return _edited(place, old, new)

        result = self._write(path, produce, unrestricted, notices, create=False)
        result.pop("created", None)
        result["replacements"] = 1
        return result

    def _write(
        self,
        path: str,
        produce: Callable[[Place], tuple[bytes, Expected | None]],
        unrestricted: bool,
        notices: list[str] | None,
        *,
        create: bool,
    ) -> dict[str, Any]:
        check_path_string(path)
        for name in path.split("/"):
            if is_dotgit(name):
                raise GitMetadata(
                    f"{path!r} is git metadata (the component {name!r} is how git spells .git). "
                    + _GIT_EXPLANATION,
                    field="path",
                )
        access = _Access(unrestricted)
        made: list[tuple[int, str]] = []  # directories this call created: removed if it fails

        def make_dir(place: Place, name: str) -> None:
            display = place.display(name)
            if is_dotgit(name):
                raise GitMetadata(
                    f"{display} would be a .git directory. " + _GIT_EXPLANATION, field="path"
                )
            self._check_git_chain(place, display)
            if is_git_directory(place.dir_fd, {name: ("dir", None)}):
                raise GitMetadata(
                    f"creating {display} would make {place.display() or '.'} a git directory "
                    "(it has a HEAD and would then have objects/ and refs/). " + _GIT_EXPLANATION,
                    field="path",
                )
            if dir_denies_create(os.fstat(place.dir_fd)):
                raise Unwritable(
                    f"{display} cannot be created: its directory does not allow creating entries",
                    field="path",
                )
            try:
                os.mkdir(name, 0o777, dir_fd=place.dir_fd)
            except FileExistsError:
                return
            except OSError as exc:
                raise translate_oserror(exc, display, writing=True) from None
            made.append((os.dup(place.dir_fd), name))

        def op(place: Place) -> dict[str, Any]:
            display = place.display()
            if place.leaf is not None and is_dotgit(place.leaf):
                raise GitMetadata(f"{display} is git metadata. " + _GIT_EXPLANATION, field="path")
            self._check_git_chain(place, display)
            if place.leaf is None:
                raise InvalidArguments(f"{display} is a directory, not a file", field="path")
            if _is_link(place):
                raise FollowLeaf
            data, expected = produce(place)
            if is_git_directory(place.dir_fd, {place.leaf: ("file", data)}):
                raise GitMetadata(
                    f"writing {display} would make {display_path(place.root, place.names)} a git directory "
                    "(git would read it as a repository and run what its config names). "
                    + _GIT_EXPLANATION,
                    field="path",
                )
            created = replace_file(place, data, expected=expected)
            access.note(place)
            return {"path": display, "bytes": len(data), "created": created}

        with self._resolver:
            try:
                result = self._resolver.walk(
                    path, op, unrestricted=unrestricted, make_dir=make_dir if create else None
                )
            except BaseException:
                for dir_fd, name in reversed(made):
                    with contextlib.suppress(OSError):
                        os.rmdir(name, dir_fd=dir_fd)
                raise
            finally:
                for dir_fd, _ in made:
                    os.close(dir_fd)
        _pass_notices(access, notices)
        return result

    def _check_git_chain(self, place: Place, display: str) -> None:
        """Refuse a write below git metadata: a root inside it, a .git name, a git directory."""
        if place.root.git_reason is not None:
            raise GitMetadata(
                f"{display}: {place.root.git_reason}. " + _GIT_EXPLANATION, field="path"
            )
        names = place.names
        for i, name in enumerate(names):
            if is_dotgit(name):
                raise GitMetadata(
                    f"{display} is inside {display_path(place.root, names[: i + 1])}, a .git "
                    "directory. " + _GIT_EXPLANATION,
                    field="path",
                )
        fds = [place.root.fd, *(fd for _, fd in place.dirs)]
        for depth, fd in enumerate(fds):
            # Checked on the descriptor each time: a number closed by ".." can be reused.
            if is_git_directory(fd):
                where = display_path(place.root, names[:depth])
                raise GitMetadata(
                    f"{display} is inside {where}, which is a git directory (it has HEAD, "
                    "objects/ and refs/). " + _GIT_EXPLANATION,
                    field="path",
                )

    # -- searching ---------------------------------------------------------------------

    def _start_dir(self, path: str, access: _Access) -> tuple[Root, list[str], int]:
        """Resolve a search's starting directory: (root, names from the root, O_PATH fd)."""
        opener = open_leaf(os.O_PATH)

        def op(place: Place) -> tuple[Root, list[str], int]:
            fd = opener(place)
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                os.close(fd)
                raise InvalidArguments(
                    f"{place.display()} is not a directory; give the directory to search",
                    field="path",
                )
            access.note(place)
            names = place.names + ([place.leaf] if place.leaf is not None else [])
            return place.root, names, fd

        return self._resolver.walk(path, op, unrestricted=access.unrestricted)

    def _link_kind(self, root: Root, names: list[str], rel: str, access: _Access) -> str | None:
        """What a symlink found by a search resolves to, if inside a root: file, dir or None."""
        roots = self._resolver.roots_for(access.unrestricted)
        try:
            fd = self._resolver.walk_from(
                root,
                deque([*names, *rel.split("/")]),
                open_leaf(os.O_PATH),
                roots=roots,
                original=rel,
            )
        except RingfenceError:
            return None
        try:
            mode = os.fstat(fd).st_mode
        finally:
            os.close(fd)
        if stat.S_ISREG(mode):
            return "file"
        return "dir" if stat.S_ISDIR(mode) else None

    def glob(
        self,
        pattern: str,
        path: str = ".",
        *,
        max_results: int = 1000,
        unrestricted: bool = False,
        notices: list[str] | None = None,
    ) -> list[str]:
        """Paths under ``path`` matching ``pattern``, sorted, at most ``max_results``.

        ``*``, ``?`` and ``[...]`` match within one name (a leading dot
        included), ``**`` matches any number of directories. Files only,
        unless the pattern ends in ``/`` (directories only, shown with a
        trailing ``/``). Links are listed when their target is inside a root;
        linked directories are never entered; ``.git`` entries are skipped.
        Paths are shown as tools take them: relative to the first root, else
        absolute.
        """
        compiled = compile_glob(pattern)
        want = "dir" if compiled.dirs_only else "file"
        access = _Access(unrestricted)
        found: list[str] = []
        with self._resolver:
            root, names, start_fd = self._start_dir(path, access)
            try:
                base_fd = start_fd
                if compiled.prefix:
                    try:
                        base_fd = self._resolver.open_beneath_nofollow(
                            start_fd, "/".join(compiled.prefix), os.O_PATH | os.O_DIRECTORY
                        )
                    except OSError:
                        return []
                base = _display_base(root, names)
                prefix = "".join(f"{p}/" for p in compiled.prefix)
                try:
                    for entry_rel, kind in list_tree(base_fd, max_depth=compiled.max_depth):
                        rel = prefix + entry_rel
                        if kind not in (want, "link") or not compiled.matches(rel):
                            continue
                        if kind == "link" and self._link_kind(root, names, rel, access) != want:
                            continue
                        shown = base + rel
                        found.append(shown + "/" if want == "dir" else shown)
                finally:
                    if base_fd != start_fd:
                        os.close(base_fd)
            finally:
                os.close(start_fd)
        _pass_notices(access, notices)
        found.sort()
        return found[:max_results]

    def grep(
        self,
        pattern: str,
        path: str = ".",
        *,
        glob: str | None = None,
        max_results: int = 100,
        unrestricted: bool = False,
        notices: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Lines matching a regular expression: ``{"path", "line", "text"}``, sorted by path and line.

        At most ``max_results``. ``glob`` filters files like ripgrep's ``-g``
        (no ``/``: the file name). Binary files (a NUL byte), files over
        64 MiB and ``.git`` entries are skipped; linked directories are never
        entered; links to files are searched when their target is inside a
        root. ripgrep, when available, only narrows which files are read;
        both engines return the same results (see ``_search``).
        """
        if max_results < 1:
            raise InvalidArguments("max_results must be at least 1", field="max_results")
        rx = compile_regex(pattern)
        name_filter = compile_name_filter(glob) if glob else None
        access = _Access(unrestricted)
        results: list[dict[str, Any]] = []
        with self._resolver:
            root, names, start_fd = self._start_dir(path, access)
            rg = RipgrepRun(self.ripgrep, start_fd, pattern) if self.ripgrep else None
            try:
                candidates: list[tuple[str, bool]] = [
                    (rel, kind == "link")
                    for rel, kind in list_tree(start_fd)
                    if kind in ("file", "link") and (name_filter is None or name_filter(rel))
                ]
                if rg is not None:
                    maybe = rg.finish()
                    if maybe is None:
                        access.notices.append(
                            "ripgrep could not run this search; every file was searched in Python"
                        )
                    else:
                        candidates = [c for c in candidates if c[1] or c[0] in maybe]
                candidates.sort()
                base = _display_base(root, names)
                for rel, is_link in candidates:
                    data = self._read_candidate(root, names, start_fd, rel, is_link, access)
                    if data is None:
                        continue
                    shown = base + rel
                    for line, text in search_text(rx, data, max_results - len(results)):
                        results.append({"path": shown, "line": line, "text": text})
                    if len(results) >= max_results:
                        break
            finally:
                if rg is not None:
                    rg.kill()
                os.close(start_fd)
        _pass_notices(access, notices)
        return results

    def _read_candidate(
        self,
        root: Root,
        names: list[str],
        start_fd: int,
        rel: str,
        is_link: bool,
        access: _Access,
    ) -> bytes | None:
        """A search candidate's bytes, read confined; None to skip it silently."""
        try:
            if is_link:
                roots = self._resolver.roots_for(access.unrestricted)
                fd = self._resolver.walk_from(
                    root,
                    deque([*names, *rel.split("/")]),
                    open_leaf(_READ_FLAGS),
                    roots=roots,
                    original=rel,
                )
            else:
                # Found by the walker as a plain file: re-open it refusing every link on
                # the way, so a directory swapped for a link since is not entered.
                fd = self._resolver.open_beneath_nofollow(start_fd, rel, _READ_FLAGS)
        except (OSError, RingfenceError):
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > GREP_MAX_FILE_BYTES:
                return None
            return _read_all(fd, GREP_MAX_FILE_BYTES)
        except OSError:
            return None
        finally:
            os.close(fd)

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
        # A directory inside another listed one is covered by that one's mount.
        return sorted(p for p in found if not any(a in found for a in p.parents))

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


# -- helpers ------------------------------------------------------------------------------


def _open_root(index: int, given: str | os.PathLike[str]) -> Root:
    spelled = os.path.abspath(os.fspath(given))
    try:
        fd = os.open(spelled, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidArguments(
            f"workspace root {os.fspath(given)!r} does not exist", field="roots"
        ) from None
    except NotADirectoryError:
        raise InvalidArguments(
            f"workspace root {os.fspath(given)!r} is not a directory", field="roots"
        ) from None
    except OSError as exc:
        raise InvalidArguments(
            f"workspace root {os.fspath(given)!r} cannot be opened: {exc.strerror}", field="roots"
        ) from None
    real = fd_path(fd)
    spellings = tuple(dict.fromkeys([_split(str(real)), _split(spelled)]))
    return Root(index, real, fd, spellings, _git_reason(real))


def _split(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p not in ("", "."))


def _git_reason(real: Path) -> str | None:
    """Why a root lies in git metadata (so every write in it is refused), or None."""
    for part in real.parts[1:]:
        if is_dotgit(part):
            return f"the workspace root {real} lies inside a .git directory"
    for ancestor in [real, *real.parents]:
        try:
            fd = os.open(ancestor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if is_git_directory(fd):
                return f"the workspace root {real} lies inside the git directory {ancestor}"
        finally:
            os.close(fd)
    return None


def _display_base(root: Root, names: list[str]) -> str:
    """What to put before a search result's relative path so tools can take it back."""
    base = display_path(root, names)
    if base == ".":
        return ""
    return base if base.endswith("/") else base + "/"


def _add_if_inside(path: Path, roots: list[Path], found: set[Path]) -> None:
    if any(path == r or r in path.parents for r in roots):
        found.add(path)


def _pass_notices(access: _Access, notices: list[str] | None) -> None:
    if notices is not None:
        notices.extend(access.notices)


def _encode(text: str, name: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArguments(
            f"{name} contains text that cannot be encoded as UTF-8", field=name
        ) from None


def _entry_type(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _is_link(place: Place) -> bool:
    assert place.leaf is not None
    try:
        return stat.S_ISLNK(os.stat(place.leaf, dir_fd=place.dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_regular(fd: int, display: str) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise InvalidArguments(f"{display} is a directory; use list_directory", field="path")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArguments(f"{display} is not a regular file", field="path")
    return st


def _binary_error(display: str) -> InvalidArguments:
    return InvalidArguments(
        f"{display} is a binary file (it contains NUL bytes); read_file returns text only",
        field="path",
    )


def _read_lines(fd: int, display: str, offset: int, limit: int | None) -> str:
    st = _check_regular(fd, display)
    if b"\x00" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
        raise _binary_error(display)
    if offset == 1 and limit is None:
        if st.st_size > READ_MAX_BYTES:
            raise InvalidArguments(
                f"{display} is {st.st_size} bytes; read it in parts with offset and limit "
                f"(at most {READ_MAX_BYTES} bytes per call)",
                field="path",
            )
        data = _read_all(fd, READ_MAX_BYTES + 1)
        if len(data) > READ_MAX_BYTES:  # it grew while being read
            raise InvalidArguments(
                f"{display} is over {READ_MAX_BYTES} bytes; read it in parts with offset and limit",
                field="path",
            )
    else:
        data = _read_range(fd, display, offset, limit)
    if b"\x00" in data:
        raise _binary_error(display)
    return data.decode("utf-8", "replace")


def _read_range(fd: int, display: str, offset: int, limit: int | None) -> bytes:
    chunks: list[bytes] = []
    size = 0
    line_no = 0
    too_much = InvalidArguments(
        f"lines {offset}.. of {display} are more than {READ_MAX_BYTES} bytes; ask for fewer lines",
        field="limit",
    )
    with io.open(fd, "rb", closefd=False) as f:  # noqa: UP020 - io.open takes a descriptor
        while limit is None or len(chunks) < limit:
            line = f.readline(READ_MAX_BYTES + 1)  # bounded: one huge line cannot exhaust memory
            if not line:
                break
            if len(line) > READ_MAX_BYTES:
                raise too_much
            line_no += 1
            if line_no < offset:
                continue
            chunks.append(line)
            size += len(line)
            if size > READ_MAX_BYTES:
                raise too_much
    if offset > 1 and not chunks:
        raise InvalidArguments(
            f"offset {offset} is past the end of {display} ({line_no} lines)", field="offset"
        )
    return b"".join(chunks)


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _edited(place: Place, old: str, new: str) -> tuple[bytes, Expected]:
    display = place.display()
    assert place.leaf is not None
    try:
        fd = os.open(place.leaf, _READ_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=place.dir_fd)
    except OSError as exc:
        raise translate_oserror(exc, display) from None
    try:
        st = _check_regular(fd, display)
        if st.st_size > READ_MAX_BYTES:
            raise InvalidArguments(
                f"{display} is too large to edit ({st.st_size} bytes)", field="path"
            )
        data = _read_all(fd, READ_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if b"\x00" in data:
        raise InvalidArguments(f"{display} is a binary file; edit_file edits text", field="path")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArguments(
            f"{display} is not valid UTF-8, so it cannot be edited as text without changing "
            "other bytes; rewrite it with write_file if that is intended",
            field="path",
        ) from None
    count = text.count(old)
    if count == 0:
        raise InvalidArguments(f"old was not found in {display}; nothing was changed", field="old")
    if count > 1:
        raise InvalidArguments(
            f"old occurs {count} times in {display}; include more surrounding text so it "
            "matches exactly once",
            field="old",
        )
    return text.replace(old, new, 1).encode("utf-8"), Expected.of(st)
