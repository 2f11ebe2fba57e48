"""The confined walk: every workspace operation resolves its path here.

(About 690 lines on purpose: the walk, its lexical re-entry into a root, the
``openat2`` fast path that must agree with it and the roots' lifetime share
one set of invariants, and are reviewed as one. ``openat2`` itself is in
:mod:`ringfence._confine.openat2`.)

Never check-then-open. A path is resolved *through descriptors*: each root is
held open as an ``O_PATH`` directory descriptor, every component is opened
relative to the one before it with ``O_NOFOLLOW``, and the operation itself
(open, list, replace) runs relative to the directory descriptor the walk
ended on, so the file acted on is the file that was checked.

* Fast path: ``openat2(root, path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)``
  through ``ctypes`` (syscall 437), retried on ``EAGAIN``. ``ENOSYS`` is
  remembered and the walk below is used from then on. ``RESOLVE_BENEATH``
  also refuses absolute symlinks that point *inside* the root and links
  between roots, which ringfence allows, so ``EXDEV`` gets a second look
  from the walk before it becomes ``outside_workspace``.
* The walk (:meth:`Resolver.walk`): one component at a time; a symlink is read
  with ``readlinkat`` and its target spliced into the remaining path, followed
  only while the result stays inside a root (at most :data:`MAX_SYMLINKS`
  links and :data:`MAX_STEPS` components per call). ``..`` pops the
  directory stack the walk came down, never a string; climbing above a root
  continues *lexically* outside the roots, where nothing is ever opened, until
  the path re-enters a root (a link from one root into another) or runs out
  (``outside_workspace``).

Races: a directory swapped for a symlink mid-walk is caught, because no
component is ever opened with symlinks followed; the walk reads the new link
and checks it like any other. What the walk cannot stop is a *directory
descriptor it already holds* being renamed out of the roots by another
process; see the Non-guarantees in :class:`~ringfence.workspace.Workspace`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .._confine.openat2 import (
    RESOLVE_BENEATH,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    fs_type,
    openat2,
    openat2_available,
)
from ..runtime._errors import (
    InvalidArguments,
    NotFound,
    OutsideWorkspace,
    RingfenceError,
    ToolError,
    Unwritable,
)
from .git._rules import first_git_directory, is_dotgit

__all__ = [
    "CONFINED",
    "MAX_STEPS",
    "MAX_SYMLINKS",
    "Access",
    "FollowLeaf",
    "Place",
    "Resolver",
    "Root",
    "check_path_string",
    "display_path",
    "fd_path",
    "is_link",
    "open_leaf",
    "open_root",
    "openat2",
    "openat2_available",
    "path_parts",
    "pseudo_filesystem",
    "refuse_pseudo",
    "translate_oserror",
]

T = TypeVar("T")

# Linux's MAXSYMLINKS; openat2 stops at the same count, so both paths agree.
MAX_SYMLINKS = 40
# Components processed per call, symlink expansions included (PATH_MAX / 2).
MAX_STEPS = 2048

O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


# -- roots and places -------------------------------------------------------------------


def path_parts(path: str) -> tuple[str, ...]:
    """The names of a "/"-separated path, without empty and ``.`` components (lexical only)."""
    return tuple(p for p in path.split("/") if p not in ("", "."))


@dataclass(eq=False)
class Root:
    """One workspace root, held open as an ``O_PATH`` directory descriptor."""

    index: int  # position in the roots; -1 for the host root (Workspace.with_host_root)
    path: Path  # the real path, read back from the descriptor when it was opened
    fd: int
    match_parts: tuple[tuple[str, ...], ...]  # spellings that name this root
    git_reason: str | None = None  # set when the root itself lies in git metadata

    @property
    def parts(self) -> tuple[str, ...]:
        return path_parts(str(self.path))

    @property
    def is_host(self) -> bool:
        return self.index < 0


@dataclass
class Place:
    """Where a walk ended: the directory descriptors from the root down, and a leaf name.

    ``leaf`` is None when the path names a directory itself (``""``, ``a/..``,
    ``dir/``). The descriptors belong to the walk and are closed when it ends.
    """

    root: Root
    dirs: list[tuple[str, int]] = field(default_factory=list)
    leaf: str | None = None

    @property
    def dir_fd(self) -> int:
        return self.dirs[-1][1] if self.dirs else self.root.fd

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.dirs]

    @property
    def beneath(self) -> tuple[int, str]:
        """The root's descriptor and this directory's physical path below it: where git's
        rules follow links from, never past the root (:func:`.git._rules.is_git_directory`)."""
        return self.root.fd, "/".join(self.names)

    def display(self, *extra: str) -> str:
        """The path as tools show it: relative to the first root, else absolute."""
        names = self.names + ([self.leaf] if self.leaf is not None else []) + list(extra)
        return display_path(self.root, names)


def open_root(index: int, given: str | os.PathLike[str]) -> Root:
    """Open one workspace root (position ``index``) as an ``O_PATH`` directory descriptor.

    The root is the one place a path *string* is opened: the caller names
    it. Raises InvalidArguments (field ``roots``) when it does not exist, is
    not a directory or cannot be opened.
    """
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
    kind = pseudo_filesystem(fd)
    if kind is not None:
        os.close(fd)
        raise InvalidArguments(
            f"workspace root {os.fspath(given)!r} is on a {kind} file system (the kernel's "
            "own state: process environments, memory, devices), not a directory of files; "
            "choose a project directory",
            field="roots",
        )
    real = fd_path(fd)
    spellings = tuple(dict.fromkeys([path_parts(str(real)), path_parts(spelled)]))
    return Root(index, real, fd, spellings, _git_reason(real))


# File systems whose files are the kernel's state, not anyone's files: /proc/self/environ
# holds the kernel process's secrets, /proc/<pid>/mem its memory, sysfs and tracefs files
# block or act when read. A root on one is refused, and the file tools refuse a file or
# directory on one wherever it is mounted (a chroot's proc inside a root). By the magic
# number fstatfs(2) reports (linux/magic.h), so no mount table can be out of date.
PSEUDO_FILESYSTEMS: dict[int, str] = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x62656570: "configfs",
    0xDE5E81E4: "efivarfs",
    0xCAFE4A11: "bpf",
    0x6165676C: "pstore",
    0x42494E4D: "binfmt_misc",
    0x27E0EB: "cgroup",
    0x63677270: "cgroup2",
    0x1CD1: "devpts",
    0x65735543: "fusectl",
    0x6E736673: "nsfs",
    0x50494446: "pidfs",
    0x19800202: "mqueue",
    0xF97CFF8C: "selinuxfs",
    0x67596969: "rpc_pipefs",
    0x6E667364: "nfsd",
}


def pseudo_filesystem(fd: int) -> str | None:
    """The name of the kernel-state file system (``proc``, ``sysfs``...) ``fd`` is on, or None.

    One ``fstatfs`` (about a microsecond). A descriptor the kernel cannot answer for
    counts as such a file system: refused, never guessed.
    """
    try:
        return PSEUDO_FILESYSTEMS.get(fs_type(fd))
    except OSError as exc:
        return f"unidentified ({exc.strerror})"


def refuse_pseudo(fd: int, display: str, *, close: bool = True) -> None:
    """Raise InvalidArguments when ``fd`` is on a kernel-state file system (closing ``fd``
    first unless ``close`` is False: a directory descriptor the walk owns)."""
    kind = pseudo_filesystem(fd)
    if kind is not None:
        if close:
            os.close(fd)
        raise InvalidArguments(
            f"{display} is on a {kind} file system (the kernel's own state), not a workspace "
            "file; the file tools do not read, list or write it",
            field="path",
        )


def _git_reason(real: Path) -> str | None:
    """Why a root lies in git metadata (so every write in it is refused), or None."""
    for part in real.parts[1:]:
        if is_dotgit(part):
            return f"the workspace root {real} lies inside a .git directory"
    ancestor = first_git_directory([real, *real.parents])
    if ancestor is not None:
        return f"the workspace root {real} lies inside the git directory {ancestor}"
    return None


def display_path(root: Root, names: Sequence[str]) -> str:
    rel = "/".join(names)
    if root.is_host:
        return "/" + rel
    if root.index == 0:
        return rel or "."
    return str(root.path / rel) if rel else str(root.path)


class FollowLeaf(Exception):
    """Raised by an operation to say "the leaf is a symlink: follow it and call me again"."""


@dataclass(frozen=True)
class Access:
    """Which roots one operation may reach, and who hears where it went outside them.

    :data:`CONFINED` (the default everywhere) reaches the workspace roots
    only. An access with ``host_root`` also has ``/`` as a last root; only
    :meth:`ringfence.workspace.Workspace.with_host_root` makes one, so every
    way out of the sandbox is spelled ``with_host_root`` at its call site.
    ``note`` hears the place of each walk that ended on the host root (see
    :meth:`Resolver.walk`); it is not told about link targets a search
    looked at on the way.
    """

    host_root: bool = False
    note: Callable[[str], None] | None = None

    def reached(self, place: Place) -> None:
        """Tell ``note`` about ``place`` when it lies on the host root."""
        if self.note is not None and place.root.is_host:
            self.note(place.display())


CONFINED = Access()


# -- the resolver -----------------------------------------------------------------------


def check_path_string(path: str, name: str = "path") -> None:
    """Refuse what no file name can hold (NUL, non-encodable text) and empty paths."""
    if not isinstance(path, str):
        raise InvalidArguments(f"{name} must be a string", field=name)
    if not path:
        raise InvalidArguments(f"{name} is empty; use '.' for the first workspace root", field=name)
    if "\x00" in path:
        raise InvalidArguments(
            f"{name} contains a NUL byte, which no file name can hold", field=name
        )
    try:
        os.fsencode(path)
    except UnicodeError:
        raise InvalidArguments(
            f"{name} contains characters that cannot be encoded as a file name", field=name
        ) from None


class Resolver:
    """Resolves paths inside a set of roots and runs operations at the place found.

    Thread-safe; :meth:`close` waits for no one but defers closing the root
    descriptors until the last operation in flight has finished, so a
    descriptor number is never reused under a running walk. Idempotent.
    """

    def __init__(self, roots: list[Root]) -> None:
        self.roots = roots
        self.use_openat2 = True  # tests switch this off to exercise the walk alone
        self._host: Root | None = None
        self._lock = threading.Lock()
        self._users = 0  # operations in flight (a refcount guarded by _lock)
        self._closed = False
        # The last scan of the roots a resulting-tree check used (changes._resulting): the next
        # one starts from it.
        self.scan_base: Any = None
        self.scan_lock = threading.Lock()
        # Run by the writers' lock (``_writelock.writing``) each time a writer of this
        # process takes it: a checkpoint store's recovery of what a dead process left in
        # flight, so no writer ever judges or writes a half-written tree.
        self.on_turn: list[Callable[[], None]] = []

    # -- lifetime ----------------------------------------------------------------------

    # A plain refcount under a lock (tens of nanoseconds per call): whoever brings it to
    # zero after close() closes the descriptors, exactly once. A refused __enter__ never
    # counts, so it cannot leave descriptors open behind a close() that saw it.

    def __enter__(self) -> Resolver:
        """Mark an operation in flight (``with resolver:``); refuses once closed."""
        with self._lock:
            if self._closed:
                raise ToolError("the workspace is closed")
            self._users += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._users -= 1
            last = self._closed and self._users == 0
        if last:
            self._close_fds()

    def close(self) -> None:
        """Refuse new operations; close the root descriptors once none is in flight."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            last = self._users == 0
        if last:
            self._close_fds()

    def _close_fds(self) -> None:
        # Called once: by close() with nothing in flight, or by the last operation out.
        for root in [*self.roots, *([self._host] if self._host else [])]:
            if root.fd >= 0:
                os.close(root.fd)
                root.fd = -1

    def host_root(self) -> Root:
        """``/`` as a root: used only by host-root accesses (inside an operation)."""
        with self._lock:
            if self._host is None:
                fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                self._host = Root(-1, Path("/"), fd, ((),))
            return self._host

    def roots_for(self, access: Access) -> list[Root]:
        """The roots ``access`` may reach, the host root last."""
        return [*self.roots, self.host_root()] if access.host_root else list(self.roots)

    # -- locating a path ---------------------------------------------------------------

    def start(self, path: str, roots: Sequence[Root]) -> tuple[Root, deque[str]]:
        """The root a path starts in and its remaining components (nothing opened yet)."""
        check_path_string(path)
        if path.startswith("//"):
            # POSIX leaves a leading "//" implementation-defined (a network root on
            # some systems): it is not a spelling of any workspace path.
            raise OutsideWorkspace(
                f"{path!r} starts with '//', which POSIX leaves implementation-defined; "
                "it names no workspace root (spell absolute paths with one '/')",
                field="path",
            )
        if path.startswith("/"):
            return self.map_lexical(
                roots, [], deque(path.split("/")), path, "it is not under any root"
            )
        return roots[0], deque(path.split("/"))

    def map_lexical(
        self,
        roots: Sequence[Root],
        parts: list[str],
        pending: deque[str],
        original: str,
        why: str,
    ) -> tuple[Root, deque[str]]:
        """Continue a path *as spelled* from ``parts`` (outside every root) until it enters one.

        Nothing outside a root is opened or followed: there the path is read
        lexically. Raises OutsideWorkspace when it never re-enters a root.
        """
        while True:
            found = _containing_root(roots, parts)
            if found is not None:
                root, depth = found
                rest = deque(parts[depth:])
                rest.extend(pending)
                return root, rest
            if not pending:
                names = ", ".join(str(r.path) for r in roots if not r.is_host)
                raise OutsideWorkspace(
                    f"{original!r} is outside the workspace ({why}); the roots are: {names}",
                    field="path",
                )
            c = pending.popleft()
            if c in ("", "."):
                continue
            if c == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(c)

    # -- the walk ----------------------------------------------------------------------

    def walk(
        self,
        path: str,
        op: Callable[[Place], T],
        *,
        access: Access = CONFINED,
        make_dir: Callable[[Place, str], None] | None = None,
    ) -> T:
        """Resolve ``path`` and run ``op(place)`` at the directory it ends in.

        ``op`` raises :class:`FollowLeaf` when the leaf turns out to be a
        symlink; the walk then reads the link, checks it and calls ``op``
        again at the target. ``make_dir(place, name)``, when given, is called
        for a missing intermediate directory and must create it (or raise).
        When ``op`` returns at a place on the host root, ``access`` is told.
        """
        roots = self.roots_for(access)
        root, pending = self.start(path, roots)

        def noted(place: Place) -> T:
            result = op(place)
            access.reached(place)
            return result

        return self.walk_from(
            root,
            pending,
            noted if access.host_root else op,
            roots=roots,
            original=path,
            make_dir=make_dir,
        )

    def walk_from(
        self,
        root: Root,
        pending: deque[str],
        op: Callable[[Place], T],
        *,
        roots: Sequence[Root],
        original: str,
        make_dir: Callable[[Place, str], None] | None = None,
    ) -> T:
        place = Place(root)
        links = 0
        steps = 0
        via = ""  # the last symlink followed, for messages
        try:
            while True:
                leaf: str | None = None
                while pending:
                    steps += 1
                    if steps > MAX_STEPS:
                        raise InvalidArguments(
                            f"{original!r} takes more than {MAX_STEPS} steps to resolve",
                            field="path",
                        )
                    c = pending.popleft()
                    if c in ("", "."):
                        continue
                    if c == "..":
                        if place.dirs:
                            os.close(place.dirs.pop()[1])
                            continue
                        place.root, pending = self.map_lexical(
                            roots,
                            list(place.root.parts[:-1]),
                            pending,
                            original,
                            f"the symbolic link {via} leads out of the root"
                            if via
                            else "'..' climbs above the root",
                        )
                        continue
                    if not pending:
                        leaf = c
                        break
                    try:
                        fd = os.open(c, O_PATH_DIR, dir_fd=place.dir_fd)
                    except FileNotFoundError:
                        if make_dir is None:
                            raise NotFound(
                                f"{place.display(c)} does not exist (resolving {original!r})",
                                field="path",
                            ) from None
                        make_dir(place, c)
                        pending.appendleft(c)
                        continue
                    except NotADirectoryError:
                        # O_NOFOLLOW|O_DIRECTORY on a symlink is ENOTDIR: is it one?
                        target = _readlink(c, place.dir_fd)
                        if target is None:
                            raise NotFound(
                                f"{place.display(c)} is not a directory (resolving {original!r})",
                                field="path",
                            ) from None
                        links = _count_link(links, original)
                        via = place.display(c)
                        pending = self._splice(place, roots, c, target, pending, original)
                        continue
                    except OSError as exc:
                        raise translate_oserror(exc, place.display(c)) from None
                    place.dirs.append((c, fd))
                place.leaf = leaf
                try:
                    return op(place)
                except FollowLeaf:
                    assert leaf is not None
                    target = _readlink(leaf, place.dir_fd)
                    if target is None:  # it stopped being a link: look again
                        pending = deque([leaf])
                        continue
                    links = _count_link(links, original)
                    via = place.display()
                    pending = self._splice(place, roots, leaf, target, deque(), original)
        finally:
            _close_dirs(place)

    def _splice(
        self,
        place: Place,
        roots: Sequence[Root],
        name: str,
        target: str,
        pending: deque[str],
        original: str,
    ) -> deque[str]:
        """Continue at a symlink's target: relative to the link's directory, or absolute."""
        parts = deque(target.split("/"))
        parts.extend(pending)
        place.leaf = None
        if target.startswith("/"):
            _close_dirs(place)
            place.root, rest = self.map_lexical(
                roots,
                [],
                parts,
                original,
                f"the symbolic link {place.display(name)} points outside",
            )
            return rest
        return parts

    # -- opening -----------------------------------------------------------------------

    def open(self, path: str, flags: int, *, access: Access = CONFINED) -> int:
        """Open ``path`` with ``flags``; the caller owns the descriptor.

        Confined: ``openat2`` first (one syscall); anything it refuses for
        being outside the root or a link loop is resolved again by the walk,
        which decides. A host-root access always walks (and is noted). What
        lies on a kernel-state file system (``/proc``, ``/sys``...) is refused
        (:func:`refuse_pseudo`), wherever it is mounted.
        """
        fd = self._open(path, flags, access)
        refuse_pseudo(fd, path)
        return fd

    def _open(self, path: str, flags: int, access: Access) -> int:
        if access.host_root:
            return self.walk(path, open_leaf(flags), access=access)
        if (
            self.use_openat2
            and openat2.available is not False
            and path
            and path[0] != "/"
            and "\x00" not in path
        ):
            # The common case, a relative path: one syscall against the first root.
            try:
                raw = os.fsencode(path)
            except UnicodeError:
                raw = None  # start() below reports it
            if raw is not None:
                fd = openat2.quick(self.roots[0].fd, raw, flags, _BENEATH)
                if fd >= 0:
                    return fd
                try:  # the careful call: retries EAGAIN, remembers ENOSYS, raises
                    return openat2(self.roots[0].fd, raw, flags, _BENEATH)
                except OSError as exc:
                    if exc.errno not in _SECOND_LOOK:
                        raise translate_oserror(exc, path) from None
        roots = self.roots
        root, pending = self.start(path, roots)
        if self.use_openat2 and openat2.available is not False:
            rel = "/".join(pending)
            try:
                return openat2(root.fd, os.fsencode(rel) or b".", flags, _BENEATH)
            except OSError as exc:
                if exc.errno not in _SECOND_LOOK:
                    raise translate_oserror(exc, display_path(root, path_parts(rel))) from None
        return self.walk_from(root, pending, open_leaf(flags), roots=roots, original=path)

    def open_beneath_nofollow(self, dir_fd: int, rel: str, flags: int) -> int:
        """Open ``rel`` ("/"-joined names) below ``dir_fd`` refusing every symlink.

        The search tools re-open what their walker found this way, so a
        directory swapped for a link since is not entered. Raises OSError.
        """
        if self.use_openat2 and openat2.available is not False:
            try:
                return openat2(dir_fd, os.fsencode(rel), flags, _BENEATH_NO_LINKS)
            except OSError as exc:
                if exc.errno != errno.ENOSYS:
                    raise
        names = rel.split("/")
        if any(n in ("", ".", "..") for n in names):
            raise OSError(errno.EINVAL, "not a plain relative path")
        fds: list[int] = []
        try:
            cur = dir_fd
            for name in names[:-1]:
                cur = os.open(name, O_PATH_DIR, dir_fd=cur)
                fds.append(cur)
            return os.open(names[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
        finally:
            for fd in fds:
                os.close(fd)


_BENEATH = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
# openat2 refusals the walk must look at again: ringfence allows absolute links inside a
# root and links between roots (EXDEV), and reports loops itself (ELOOP). EPERM is what
# older container seccomp profiles return for a syscall they do not know; a plain
# read-only open has no other reason to fail with it, so the walk (openat) decides.
_SECOND_LOOK = frozenset({errno.EXDEV, errno.ELOOP, errno.EAGAIN, errno.ENOSYS, errno.EPERM})
_BENEATH_NO_LINKS = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS


def open_leaf(flags: int) -> Callable[[Place], int]:
    """An operation that opens the place's leaf (or the directory itself) with ``flags``."""

    def op(place: Place) -> int:
        if place.leaf is None:
            try:
                return os.open(".", flags | os.O_CLOEXEC, dir_fd=place.dir_fd)
            except OSError as exc:
                raise translate_oserror(exc, place.display()) from None
        try:
            fd = os.open(place.leaf, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=place.dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and is_link(place.leaf, place.dir_fd):
                raise FollowLeaf from None
            raise translate_oserror(exc, place.display()) from None
        if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
            os.close(fd)  # O_PATH|O_NOFOLLOW opens the link itself: follow it instead
            raise FollowLeaf
        return fd

    return op


def _containing_root(roots: Sequence[Root], parts: Sequence[str]) -> tuple[Root, int] | None:
    """The root whose spelling is a whole-component prefix of ``parts`` (never a string prefix)."""
    n = len(parts)
    for root in roots:
        for spelled in root.match_parts:
            k = len(spelled)
            if k <= n and tuple(parts[:k]) == spelled:
                return root, k
    return None


def _readlink(name: str, dir_fd: int) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def is_link(name: str, dir_fd: int) -> bool:
    """Is ``name`` (relative to ``dir_fd``) a symbolic link right now? False if it is gone."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _count_link(links: int, original: str) -> int:
    if links + 1 > MAX_SYMLINKS:
        raise InvalidArguments(
            f"{original!r} goes through more than {MAX_SYMLINKS} symbolic links (a loop?)",
            field="path",
        )
    return links + 1


def _close_dirs(place: Place) -> None:
    while place.dirs:
        os.close(place.dirs.pop()[1])


def translate_oserror(exc: OSError, display: str, *, writing: bool = False) -> RingfenceError:
    """One place that turns an OSError into the error a tool returns."""
    code = exc.errno
    reason = exc.strerror or str(exc)
    if code == errno.ENOENT:
        return NotFound(f"{display} does not exist", field="path")
    if code == errno.ENOTDIR:
        return NotFound(f"{display}: a component of the path is not a directory", field="path")
    if code == errno.EISDIR:
        return InvalidArguments(f"{display} is a directory", field="path")
    if code == errno.ELOOP:
        return InvalidArguments(f"{display}: too many levels of symbolic links", field="path")
    if code == errno.ENAMETOOLONG:
        return InvalidArguments(f"{display}: the name is too long", field="path")
    if code == errno.EXDEV:
        return OutsideWorkspace(f"{display} resolves outside the workspace", field="path")
    if writing and code in (
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ETXTBSY,
        errno.ENOSPC,
        errno.EDQUOT,
    ):
        return Unwritable(f"{display} cannot be written: {reason}", field="path")
    if code in (errno.EACCES, errno.EPERM):
        return ToolError(f"{display}: permission denied", field="path")
    return ToolError(f"{display}: {reason}", field="path")


def fd_path(fd: int) -> Path:
    """The path the kernel reports for an open descriptor."""
    return Path(os.readlink(f"/proc/self/fd/{fd}"))
