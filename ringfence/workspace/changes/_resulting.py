"""The resulting tree judged before a change set is applied: git's discovery, every link's resolution.

The merge's entry-by-entry refusals (:mod:`._merge`) are the fast first
filter. This is the guarantee: before anything is applied, the tree the set
would leave (:class:`~._view.TreeView`) is judged as git and the kernel
will read it.

* **Git**: git's discovery (``setup_git_directory``) finds at each directory
  a ``.git`` (a gitfile's target or a directory) that is a git directory,
  or the directory itself as a bare repository (:func:`git_at`, with git's
  own ``is_git_directory``: a valid ``HEAD``; ``objects`` and ``refs``, of
  the ``commondir`` when there is one, that ``access(X_OK)`` accepts — a
  directory, or an executable file, through links). A set is refused whole
  when what git finds at any directory would differ afterwards. Only
  directories where it can differ are looked at: those where the set
  touches a name git reads (``HEAD``, ``objects``, ``refs``, ``commondir``;
  case-folded; a ``.git`` name is refused by name before), those an up-to-date scan finds holding such names
  already (a candidate completed through a link or a ``commondir``
  elsewhere), the parents of every ``.git`` entry, and the roots. Anywhere
  else what git finds is unchanged: the names it needs are not there,
  before or after.
* **Links**: a link the set makes must resolve (``os.path.realpath``'s walk
  on the resulting tree, :func:`~._view.realpath`) inside a root, dangling
  or not; when the set makes, removes or replaces any link, every other
  link in the roots is resolved again, and one that resolved inside and no
  longer does refuses the set. (A set without links changes no link's
  ``realpath``: a missing component, a file and a directory are all kept
  as they are by that walk.) Neither walk follows a link outside the roots
  (:data:`~._view.HOST`): ``/proc/self/cwd`` names ringfence's directory
  for ringfence and the person's for their ``git status``, so a link
  reaching one leaves, and what git would find past one counts as there.

The scan that finds candidates and links is :func:`..git._scan.scan_git_metadata`,
incremental from the previous merge's scan of the same workspace, to which that merge
handed the directories inside the trees it renamed whole (:func:`note_moved`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from itertools import chain, compress, repeat
from operator import itemgetter
from typing import Any

from ...runtime._errors import GitMetadata, InvalidArguments
from .._names import escape_name
from .._resolver import Resolver
from ..git._rules import GITFILE_MAX_BYTES, git_discovery_name, parse_gitfile, valid_head
from ..git._snapshot import DirState, GitSnapshot
from ._linked import ConfigNamed, linked_metadata, names_places
from ._model import Blobs, Change
from ._view import HOST, MAX_LINKS, PAST_MAX_LINKS, Node, TreeView, realpath, resolve

__all__ = [
    "check_linked_write",
    "check_resulting_tree",
    "git_at",
    "is_git_dir",
]

# Fields, for passes over a set that run in C.
_ROOT, _PATH, _BEFORE, _AFTER = (itemgetter(i) for i in range(4))
_HEAD, _LEAF, _KIND = itemgetter(0), itemgetter(2), itemgetter(0)
_HEAD_READ = 255  # git's validate_headref reads this much
# git reads a commondir whole; one longer than this counts as a repository (the safe side).
_COMMONDIR_READ = GITFILE_MAX_BYTES


def _join(base: str, name: str) -> str:
    return base + name if base.endswith("/") else f"{base}/{name}"


# -- git's rules on a view -----------------------------------------------------------------


def _head_valid(view: TreeView, gitdir: str) -> bool:
    """git's ``validate_headref`` for ``gitdir/HEAD``: a link to ``refs/…``, or a file
    starting ``ref: refs/`` or with an object id."""
    path = _join(gitdir, "HEAD")
    found = resolve(view, path, follow=False)
    if found is None:
        return False
    if found[1] is HOST:
        return True  # what the host's link leads to, for the process reading it: anything
    if found[1].kind == "symlink":
        target = view.readlink(*found)
        return target is not None and target.startswith("refs/")
    content = view.read(found[0], found[1], _HEAD_READ)
    return content is not None and valid_head(content.split(b"\0", 1)[0])


def _searchable(view: TreeView, path: str) -> bool:
    """``access(path, X_OK)``: a directory, or anything with an execute bit. A link there
    counts whatever it leads to (``git/_rules.py`` ``_is_searchable``): its target can change
    in a later write that does not see this directory, a session on other roots."""
    found = resolve(view, path, follow=False)
    if found is None:
        return False
    node = found[1]
    return node is HOST or node.kind in ("dir", "symlink") or bool(node.mode & 0o111)


def is_git_dir(view: TreeView, gitdir: str) -> bool:
    """git's ``is_git_directory(gitdir)`` on the view."""
    if not _head_valid(view, gitdir):
        return False
    common = gitdir
    # git's file_exists() is an lstat: a dangling link counts, and then git dies reading it.
    if resolve(view, _join(gitdir, "commondir"), follow=False) is not None:
        found = resolve(view, _join(gitdir, "commondir"))
        content = view.read(found[0], found[1], _COMMONDIR_READ + 1) if found else None
        if not content or len(content) > _COMMONDIR_READ:
            return True  # git dies reading it, or more than we read: a repository (safe side)
        # git's order: the trailing newlines go first, then the string ends at a NUL
        # ("d\n\0" names "d\n").
        text = os.fsdecode(content.rstrip(b"\r\n").split(b"\0", 1)[0])
        common = realpath(view, text if text.startswith("/") else _join(gitdir, text))[0]
    return _searchable(view, _join(common, "objects")) and _searchable(view, _join(common, "refs"))


GitFound = tuple[Any, bool]


def git_at(view: TreeView, directory: str) -> GitFound:
    """What git's discovery finds at ``directory`` itself: ``(its .git, bare)``.

    ``.git`` is None (nothing there), ``("gitfile", target, is a git dir)``,
    ``("bad-gitfile",)`` or ``("dir", path, is a git dir)``; ``bare`` whether
    the directory is itself a git directory.
    """
    dotgit: Any = None
    found = resolve(view, _join(directory, ".git"))
    if found is not None:
        path, node = found
        if node.kind == "file":
            content = view.read(path, node, GITFILE_MAX_BYTES + 1)
            target = parse_gitfile(content) if content is not None else None
            if target is None:
                dotgit = ("bad-gitfile",)
            else:
                where = target if target.startswith("/") else _join(directory, target)
                real = realpath(view, where)[0]
                dotgit = ("gitfile", real, is_git_dir(view, real))
        elif node.kind == "dir":
            dotgit = ("dir", path, is_git_dir(view, path))
        elif node is HOST:
            dotgit = ("dir", path, True)  # through the host's link: counted as a repository
    return dotgit, is_git_dir(view, directory)


def _describe(found: GitFound) -> str:
    dotgit, bare = found
    if bare:
        return "a bare repository"
    if dotgit is None:
        return "no repository"
    if dotgit[0] == "bad-gitfile":
        return "an unreadable gitfile"
    return "a repository" if dotgit[2] else "a .git that is not a repository"


# -- the check ------------------------------------------------------------------------------


def _scan(resolver: Resolver) -> GitSnapshot:
    """An up-to-date scan of the roots, incremental from the previous one."""
    from ..git._scan import scan_git_metadata

    with resolver.scan_lock:
        snapshot = scan_git_metadata([r.path for r in resolver.roots], base=resolver.scan_base)
        resolver.scan_base = snapshot
        return snapshot


def note_moved(
    resolver: Resolver, judged: GitSnapshot | None, moved: dict[tuple[int, str], DirState]
) -> None:
    """Hand the scan ``judged`` (the one a merge's check made, still the resolver's base) the
    directories the merge then renamed into the workspace inside whole trees, as the read of
    their upper directory listed them (:attr:`~._model.UpperTree.scan`).

    The next scan takes such a directory from its base instead of listing it only on the
    terms it takes any other: the same device, inode, ``ctime`` and ``mtime``, and a
    ``ctime`` older than ``judged``'s start by the hot margin (:func:`..git._scan.scan_git_metadata`).
    Its entries were then those the read listed, since no one writes an upper directory
    being read, and a rename changes the status of nothing it moves but its top (listed
    again, as the directory it went into). Anything written there since changed its
    ``ctime``: it is listed. A directory whose names make it a candidate git directory is
    listed by every scan all the same (``volatile``).
    """
    if judged is None or not moved:
        return
    with resolver.scan_lock:
        if resolver.scan_base is judged:  # else another scan replaced it: nothing to add
            resolver.scan_base = replace(judged, dirs={**judged.dirs, **moved})


def check_resulting_tree(
    resolver: Resolver,
    changes: Sequence[Change],
    blobs: Blobs | None = None,
    *,
    what: str = "this change set",
) -> GitSnapshot | None:
    """Refuse ``changes`` (``git_metadata``, ``invalid_arguments``) when the tree they leave
    differs where git or a link would see it (see the module docstring). Blocking; reads only;
    inside an operation of ``resolver`` (its root descriptors held open). ``what`` names the
    writer in the refusal (``this change set``, ``this write``). Returns the scan of the roots
    it judged from (None: no changes, nothing judged).
    """
    if not changes:
        return None
    snapshot = _scan(resolver)
    roots = [(str(r.path), r.fd) for r in resolver.roots]
    disk: dict[str, Node | None] = {}  # what both views read on disk, read once
    before = TreeView(roots, disk=disk)
    after = TreeView(roots, changes, blobs, disk=disk)
    root_paths = [p for p, _ in roots]

    def absolute(root: int, path: str) -> str:
        return _join(root_paths[root], path) if path else root_paths[root]

    # One pass each, in C: a command's set can be 10,000 changes (see _tree).
    written = list(compress(changes, map(_AFTER, changes)))
    _check_physical(after, written, absolute, what)

    # Git: every directory where what discovery finds may differ.
    candidates: dict[str, None] = dict.fromkeys(root_paths)
    # (A .git name never gets here: both callers refuse it by name first.)
    leaves = set(map(_LEAF, map(str.rpartition, map(_PATH, changes), repeat("/"))))
    # In any case, NFKC form or with trailing dots (a case-insensitive file system's spellings).
    if any(map(git_discovery_name, leaves)):
        for change in changes:
            parent, _, leaf = change.path.rpartition("/")
            if git_discovery_name(leaf) is not None:
                candidates[absolute(change.root, parent)] = None
    for key, state in snapshot.dirs.items():
        if state.volatile:
            candidates[absolute(*key)] = None
    for root, path in snapshot.tops:
        candidates[absolute(root, path.rpartition("/")[0])] = None
        candidates[absolute(root, path)] = None
    for directory in candidates:
        was, will = git_at(before, directory), git_at(after, directory)
        if was != will:
            shown = escape_name(directory)
            raise GitMetadata(
                f"after {what} git would find {_describe(will)} at {shown} "
                f"(now {_describe(was)}); {_refused(what)}",
                path=shown,
            )

    if names_places(snapshot):  # else the check returns at once: no 10,000 paths made for it
        _check_linked_metadata(snapshot, (before, after), written_paths(changes, absolute), what)

    # Links: only a set that makes, removes or replaces a link can move any link's target.
    images = chain(filter(None, map(_BEFORE, changes)), filter(None, map(_AFTER, changes)))
    if "symlink" not in set(map(_KIND, images)):
        return snapshot
    # A walk past 40 links leaves: the kernel stops it, os.path.realpath goes on (_view).
    made = {(c.root, c.path) for c in changes if c.after is not None and c.after.kind == "symlink"}
    for key in made:
        where = absolute(*key)
        target, _ = realpath(after, where, past_max_leaves=True)
        if not after.inside(target):
            raise _leaves(where, target, what)
    existing = set(snapshot.links) | {k for k, e in snapshot.entries.items() if e.kind == "symlink"}
    for key in existing - made:
        where = absolute(*key)
        node = after.lstat(where)
        if node is None or node.kind != "symlink":
            continue  # removed or replaced by the set
        target, _ = realpath(after, where, past_max_leaves=True)
        if not after.inside(target) and before.inside(
            realpath(before, where, past_max_leaves=True)[0]
        ):
            raise _leaves(where, target, what, existing=True)
    return snapshot


def written_paths(changes: Sequence[Change], absolute: Any) -> list[str]:
    """The absolute path of every entry ``changes`` make, replace or remove."""
    return [absolute(c.root, c.path) for c in changes]


def _check_linked_metadata(
    snapshot: GitSnapshot, views: Sequence[TreeView], written: Sequence[str], what: str
) -> None:
    """Refuse writing at or below a place a link in git metadata leads to, as the tree is
    now or will be (:func:`linked_metadata`)."""
    if not written or not names_places(snapshot):
        return
    targets: dict[str, str] = {}
    seen: list[dict[str, str]] = []
    for view in views:
        seen.append(linked_metadata(snapshot, view))
        for target, link in seen[-1].items():
            targets.setdefault(target, link)
    if len(seen) == 2 and seen[0].keys() != seen[1].keys():
        # A link on the way moved (lnk -> elsewhere): git would read other files there.
        moved = sorted(seen[0].keys() ^ seen[1].keys())[0]
        link = targets[moved]
        if isinstance(link, ConfigNamed):
            how = f"the place the {link.setting} of {escape_name(link)} names would be another"
        else:
            how = f"the link {escape_name(link)} in git metadata would lead somewhere else"
        raise GitMetadata(
            f"after {what} {how} (it leads to {escape_name(moved)} on one side only): git "
            f"reads hooks and config through it; {_refused(what)}",
            path=escape_name(link),
        )
    for path in written:
        for target, link in targets.items():
            if path == target or path.startswith(target if target.endswith("/") else target + "/"):
                raise GitMetadata(
                    f"{escape_name(path)} is git metadata: {_how(link, target)} and runs what "
                    f"hooks and config name there; {_refused(what)}",
                    path=escape_name(path),
                )


def _how(link: str, target: str) -> str:
    """What makes ``target`` git metadata, for a refusal: a link or a configuration's setting."""
    if isinstance(link, ConfigNamed):
        return f"the {link.setting} of {escape_name(link)} names {escape_name(target)}, so git reads it"
    return f"git reads it through the link {escape_name(link)} (it leads to {escape_name(target)})"


def check_linked_write(resolver: Resolver, root: int, path: str, what: str) -> None:
    """Refuse a file tool's write of ``path`` below root ``root`` when a link in git metadata
    leads there (:func:`linked_metadata`), by an up-to-date scan of the roots.

    Scanned only when the last scan of the roots found a link in git metadata (or there
    was none yet): no writer of the agent's can make one (git metadata is never written),
    so a workspace without one costs no scan per write."""
    roots = [(str(r.path), r.fd) for r in resolver.roots]
    view = TreeView(roots)
    base = resolver.scan_base
    # The configuration files read as they are now: the person's ``git config`` since the
    # last scan (an include, a hooks directory, a command) names places all the same.
    if base is not None and not names_places(base, now=view):
        return
    snapshot = _scan(resolver)
    if not names_places(snapshot):
        return
    base = roots[root][0]
    where = _join(base, path) if path else base
    _check_linked_metadata(snapshot, (view,), [where], what)


def _refused(what: str) -> str:
    if what == "this change set":
        return "the change set was refused as a whole, nothing was changed"
    return "nothing was written"


def _leaves(where: str, target: str, what: str, existing: bool = False) -> InvalidArguments:
    link = "the existing link" if existing else "the link"
    if target == PAST_MAX_LINKS:
        return InvalidArguments(
            f"after {what} {link} {escape_name(where)} would resolve only through more than "
            f"{MAX_LINKS} links: the kernel stops there, but os.path.realpath and other "
            f"resolvers without that limit follow it on, out of the workspace roots or not; "
            f"{_refused(what)}",
            field="path",
        )
    return InvalidArguments(
        f"after {what} {link} {escape_name(where)} would resolve to {escape_name(target)}, "
        f"outside the workspace roots; {_refused(what)}",
        field="path",
    )


def _check_physical(after: TreeView, written: Sequence[Change], absolute: Any, what: str) -> None:
    """Every path the set writes lies in a directory of the resulting tree (never a link):
    a change set names physical paths, so the view judges what will be written."""
    parents = map(_HEAD, map(str.rpartition, map(_PATH, written), repeat("/")))
    for root, parent in set(zip(map(_ROOT, written), parents, strict=True)):
        if not parent:
            continue
        node: Node | None = after.lstat(absolute(root, parent))
        if node is not None and node.kind != "dir":
            raise InvalidArguments(
                f"a change below {escape_name(parent)}: not a directory after {what} "
                f"(a {node.kind}); {_refused(what)}",
                field="path",
            )
