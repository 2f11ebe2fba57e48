"""The tree a change set leaves: the roots read as they will be, paths resolved as the kernel does.

A guard that judges a change set entry by entry judges spellings; what an
attacker needs is a *state* (a directory git takes for a repository, a link
that leads out). :class:`TreeView` reads the roots as they are now, or as they
will be once a change set is applied (its entries over what is on disk), and
never writes. :func:`realpath` and :func:`resolve` follow links through such a
view exactly as ``os.path.realpath`` and the kernel's path walk do, so a rule
can be checked on the resulting tree before anything is applied.

Paths are absolute, ``/``-separated strings. A path inside a root is read
relative to the root's descriptor (its components are physical: the callers
resolve links themselves); outside the roots the host is read by path, only
to judge, never to write (a link may lead there).

A link *outside* every root is never followed: what it names is the host's,
and may differ for each process that follows it (``/proc/self/cwd``,
``/proc/self/fd/N``, ``/dev/fd/N``, ``/proc/thread-self``) or change later.
Followed from ringfence, ``/proc/self/cwd`` is ringfence's own directory; for
the person's ``git status`` or editor it is theirs. So a walk that reaches
such a link stops there (:func:`realpath`: the path so far, outside the
roots; :func:`resolve`: :data:`HOST`, a node that counts as anything).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Sequence
from operator import itemgetter
from typing import NamedTuple

from ..git._rules import at_beneath
from ..git._walk import file_kind
from ._model import Blobs, Change, Image

__all__ = ["HOST", "MAX_LINKS", "PAST_MAX_LINKS", "Node", "TreeView", "realpath", "resolve"]

# The kernel's own limit on links followed in one path walk (ELOOP past it).
MAX_LINKS = 40


class Node:
    """What an ``lstat`` would say about one path: ``kind`` (``file``, ``dir``, ``symlink``,
    ``other``) and the permission bits; where the content comes from is the view's."""

    __slots__ = ("digest", "kind", "mode", "rel")

    def __init__(self, kind: str, mode: int, digest: str | None, rel: tuple[int, str] | None):
        self.kind = kind
        self.mode = mode
        self.digest = digest  # a change set's after-image: its content's digest
        self.rel = rel  # on disk inside a root: (root index, relative path)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node({self.kind}, {self.mode:o})"


# What a walk finds past a link outside every root (see the module docstring): not known for
# any other process, so a rule counts it as whatever is the safe side (a directory, valid).
HOST = Node("host", 0o777, None, None)

_ROOT, _PATH, _AFTER = itemgetter(0), itemgetter(1), itemgetter(3)  # Change's fields


class _Root(NamedTuple):
    path: str
    fd: int


class TreeView:
    """The roots now (no ``changes``) or after ``changes`` (applied in order), read-only.

    ``roots`` are ``(real path, directory descriptor)`` pairs, the
    descriptors the caller's (held open while the view is used). ``blobs``
    holds the changes' after-images (link targets and file contents).
    ``disk`` is a cache of what is on disk (``lstat`` by path), which views
    of the same roots at the same moment may share: a path the set does not
    touch (nor anything above it) reads the same in both, one system call.
    """

    def __init__(
        self,
        roots: Sequence[tuple[str, int]],
        changes: Sequence[Change] = (),
        blobs: Blobs | None = None,
        disk: dict[str, Node | None] | None = None,
    ) -> None:
        self.roots = [_Root(p.rstrip("/") or "/", fd) for p, fd in roots]
        # Longest first: a path belongs to the innermost root that holds it.
        self._by_length = sorted(range(len(self.roots)), key=lambda i: -len(self.roots[i].path))
        self.blobs = blobs
        # Each changed path's final state (after-images, made into nodes when looked up).
        # Built in C (a command's set can be 10,000 changes); what was on disk below a path
        # the set removed, replaced or made (``_cut``) is found on first need.
        self._changes = changes
        self._final: dict[tuple[int, str], Image | None] = dict(
            zip(
                zip(map(_ROOT, changes), map(_PATH, changes), strict=True),
                map(_AFTER, changes),
                strict=True,
            )
        )
        self._cut: set[tuple[int, str]] | None = None
        self._cache: dict[str, Node | None] = {}
        self._disk: dict[str, Node | None] = {} if disk is None else disk
        # A root inside another (``--workspace /p --workspace /p/sub``): a change names its
        # path below the root it was made through, a lookup the innermost root holding the
        # path, so the two keys of one place differ. Every change is then keyed by where it
        # lies (:meth:`locate`); before, a directory ``write_file`` made below the inner root
        # through the outer one was read from disk, unmade, and so completed a repository
        # whose ``objects`` link led there unseen.
        self._nested = any(
            i != j and self._within(self.roots[j].path, self.roots[i].path)
            for i in range(len(self.roots))
            for j in range(len(self.roots))
        )
        if self._nested:
            self._final = {self._located(*key): image for key, image in self._final.items()}

    # -- where a path lies ---------------------------------------------------------------

    def locate(self, path: str) -> tuple[int, str] | None:
        """``(root index, path below it)`` for a path inside a root, else None."""
        for i in self._by_length:
            top = self.roots[i].path
            if path == top:
                return i, ""
            if path.startswith(top) and (top == "/" or path[len(top)] == "/"):
                return i, path[len(top) + 1 :] if top != "/" else path[1:]
        return None

    def inside(self, path: str) -> bool:
        return self.locate(path) is not None

    @staticmethod
    def _within(path: str, top: str) -> bool:
        """Is ``path`` at or below ``top`` (whole components)?"""
        return path == top or top == "/" or path.startswith(top + "/")

    def _located(self, root: int, path: str) -> tuple[int, str]:
        """A change's key ``(root, path below it)`` as :meth:`locate` names that place."""
        top = self.roots[root].path
        found = self.locate(_join(top, path) if path else top)
        return (root, path) if found is None else found

    def _gone(self) -> set[tuple[int, str]]:
        """The paths whose directory did not stay a directory throughout the set."""
        if self._cut is None:
            self._cut = {
                self._located(c[0], c[1]) if self._nested else (c[0], c[1])
                for c in self._changes
                if c[2] is None or c[3] is None or c[2][0] != "dir" or c[3][0] != "dir"
            }
        return self._cut

    def _below_cut(self, path: str, root: int, rel: str) -> bool:
        """Is ``path`` (``rel`` below root ``root``) below a directory the set removed,
        replaced or made? With nested roots its ancestors are located one by one: an inner
        root's top, and what holds it, are entries of the outer root."""
        if not self._nested:
            parent = rel
            while "/" in parent:
                parent = parent.rpartition("/")[0]
                if (root, parent) in self._final and (root, parent) in self._gone():
                    return True
            return False
        ancestor = path
        while True:
            ancestor = _parent(ancestor)
            where = self.locate(ancestor)
            if where is None:
                return False
            if where in self._final and where in self._gone():
                return True
            if ancestor == "/":
                return False

    # -- reading ---------------------------------------------------------------------------

    def lstat(self, path: str) -> Node | None:
        """The entry at ``path`` (never followed), or None when there is none."""
        try:
            return self._cache[path]
        except KeyError:
            pass
        node = self._node(path)
        self._cache[path] = node
        return node

    def _node(self, path: str) -> Node | None:
        where = self.locate(path)
        if where is not None:
            if where in self._final:
                image = self._final[where]
                return None if image is None else Node(image.kind, image.mode, image.digest, None)
            if self._below_cut(path, *where):
                return None  # below a directory the set removed, replaced or made
        try:
            return self._disk[path]
        except KeyError:
            pass
        node = self._lstat(path, where)
        self._disk[path] = node
        return node

    def _lstat(self, path: str, where: tuple[int, str] | None) -> Node | None:
        """What is on disk at ``path`` (``where``: its place in a root, if any)."""
        try:
            if where is None:
                st = os.lstat(path)  # outside every root: read only to judge
            else:
                with at_beneath(self.roots[where[0]].fd, where[1] or ".") as (fd, name):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (OSError, ValueError):
            return None
        return Node(file_kind(st.st_mode), stat.S_IMODE(st.st_mode), None, where)

    def readlink(self, path: str, node: Node) -> str | None:
        """The target of the link ``node`` found at ``path``."""
        try:
            if node.digest is not None:
                assert self.blobs is not None
                return os.fsdecode(self.blobs.get(node.digest))
            if node.rel is not None:
                root, rel = node.rel
                with at_beneath(self.roots[root].fd, rel) as (fd, name):
                    return os.readlink(name, dir_fd=fd)
            return os.readlink(path)  # outside every root
        except (OSError, KeyError, ValueError):
            return None

    def read(self, path: str, node: Node, limit: int) -> bytes | None:
        """Up to ``limit`` bytes of the regular file ``node`` found at ``path``."""
        if node.kind != "file":
            return None
        try:
            if node.digest is not None:
                assert self.blobs is not None
                return self.blobs.get(node.digest)[:limit]
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            if node.rel is not None:
                root, rel = node.rel
                with at_beneath(self.roots[root].fd, rel) as (at, name):
                    fd = os.open(name, flags, dir_fd=at)
            else:
                fd = os.open(path, flags)  # outside every root
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                return os.read(fd, limit)
            finally:
                os.close(fd)
        except (OSError, KeyError, ValueError):
            return None


def _join(base: str, name: str) -> str:
    return base + name if base.endswith("/") else f"{base}/{name}"


def _parent(path: str) -> str:
    head = path.rpartition("/")[0]
    return head or "/"


# What :func:`realpath` answers, asked to (``past_max_leaves``), for a walk that needs more than
# :data:`MAX_LINKS` links: no path, so inside no root.
PAST_MAX_LINKS = "(a walk through more than 40 links)"


class _PastMaxLinks(Exception):
    """A realpath walk needed more than :data:`MAX_LINKS` links (not a loop)."""


def realpath(view: TreeView, path: str, *, past_max_leaves: bool = False) -> tuple[str, bool]:
    """``os.path.realpath(path)`` on the view: ``(the path, whether every link resolved)``.

    ``past_max_leaves``: a walk that needs more than :data:`MAX_LINKS` links answers
    :data:`PAST_MAX_LINKS` (outside every root). The kernel stops such a walk (``ELOOP``);
    ``os.path.realpath`` and ``Path.resolve`` do not, so the lexical answer given otherwise
    (``p1/…/p9/L/../../../../../../etc`` with ``L`` 41 links from the root: inside by its
    spelling) is not what they find (``/etc``).

    The same walk as the standard library's (non-strict): a missing or
    non-directory component is kept as it is and the walk goes on, ``..``
    pops what was resolved so far, a link loop (or more than
    :data:`MAX_LINKS` links) ends the walk with the rest appended and
    ``False``. This is what ``realpath`` reports for a dangling link, and
    what the kernel would find if the missing parts became directories.
    A link outside every root ends the walk the same way, there (outside
    the roots): where it leads depends on who follows it.
    """
    seen: dict[str, str | None] = {}
    budget = [MAX_LINKS]
    try:
        resolved, ok = _join_real(
            view, "/" if path.startswith("/") else "", path, seen, budget, past_max_leaves
        )
    except _PastMaxLinks:
        return PAST_MAX_LINKS, False
    # realpath ends in abspath: what a loop left unresolved ("L/..") is normalized lexically.
    return posixpath.normpath(resolved or "/"), ok


def _join_real(
    view: TreeView,
    path: str,
    rest: str,
    seen: dict[str, str | None],
    budget: list[int],
    past_max_leaves: bool = False,
) -> tuple[str, bool]:
    if rest.startswith("/"):
        rest = rest[1:]
        path = "/"
    while rest:
        name, _, rest = rest.partition("/")
        if not name or name == ".":
            continue
        if name == "..":
            path = _parent(path) if path not in ("", "/") else "/"
            continue
        newpath = _join(path, name)
        node = view.lstat(newpath)
        if node is None or node.kind != "symlink":
            path = newpath
            continue
        if newpath in seen:
            cached = seen[newpath]
            if cached is not None:
                path = cached
                continue
            return _join(newpath, rest) if rest else newpath, False  # a loop
        if not view.inside(newpath):
            return _join(newpath, rest) if rest else newpath, False  # the host's link
        budget[0] -= 1
        if budget[0] < 0 and past_max_leaves:
            raise _PastMaxLinks
        target = view.readlink(newpath, node)
        if budget[0] < 0 or target is None:
            return _join(newpath, rest) if rest else newpath, False
        seen[newpath] = None
        path, ok = _join_real(view, path, target, seen, budget, past_max_leaves)
        if not ok:
            return _join(path, rest) if rest else path, False
        seen[newpath] = path
    return path, True


def resolve(view: TreeView, path: str, *, follow: bool = True) -> tuple[str, Node] | None:
    """The kernel's walk of an absolute ``path`` on the view: ``(physical path, its node)``.

    Every component must exist and every one but the last be a directory
    (after links); links are followed (the last one too with ``follow``), at
    most :data:`MAX_LINKS` of them. None where the kernel would fail
    (``ENOENT``, ``ENOTDIR``, ``ELOOP``). A link outside every root that the
    walk would follow ends it: ``(that link's path, HOST)``.
    """
    pending = [p for p in reversed(path.split("/")) if p]
    current = "/"
    links = 0
    node: Node | None = view.lstat("/")
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            current = _parent(current)
            node = view.lstat(current)
            continue
        if node is None or node.kind != "dir":
            return None
        candidate = _join(current, name)
        found = view.lstat(candidate)
        if found is None:
            return None
        if found.kind == "symlink" and (pending or follow):
            if not view.inside(candidate):
                return candidate, HOST
            links += 1
            target = view.readlink(candidate, found)
            if links > MAX_LINKS or not target:
                return None
            pending.extend(p for p in reversed(target.split("/")) if p)
            if target.startswith("/"):
                current = "/"
                node = view.lstat("/")
            continue
        current, node = candidate, found
    if node is None:
        return None
    return current, node
