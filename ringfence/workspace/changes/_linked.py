"""What git reads through a link in its metadata: places that are git metadata by another name.

A repository whose ``.git/hooks`` links to ``../githooks`` (or whose
``hooks/pre-commit`` links to ``../../scripts/pre-commit``, or whose ``config`` is a
link) runs and reads what lies there: that place is git metadata however the tree
spells it. :func:`linked_metadata` finds each such place inside the roots on a
:class:`~._view.TreeView` (now, or after a change set), for the writers' checks
(:mod:`._resulting`), the scan around shell commands (:mod:`..git._scan`) and the
sandboxes' read-only mounts.
"""

from __future__ import annotations

import contextlib
import os

from ..git._snapshot import GitSnapshot
from ._view import TreeView, realpath

__all__ = ["linked_metadata"]


def _join(base: str, name: str) -> str:
    return base + name if base.endswith("/") else f"{base}/{name}"


def linked_metadata(snapshot: GitSnapshot, view: TreeView) -> dict[str, str]:
    """What git reads through a link in git metadata, inside the roots on ``view``: each
    place such a link leads (``.git/hooks -> ../githooks``, ``.git/hooks/pre-commit ->
    ../../scripts/pre-commit``, ``.git/config -> ../gitconfig``), resolved as the kernel
    would (dangling parts kept: what a write there would make), mapped to the link.

    git follows these links when it runs hooks and reads its config, so what lies there is
    git metadata however it is spelled in the tree; links below such a place are followed
    too (what git reads through them as well)."""
    starts = [k for k, e in snapshot.entries.items() if e.kind == "symlink"]
    if not starts:
        return {}
    paths = [p for p, _ in view.roots]

    def absolute(root: int, path: str) -> str:
        return _join(paths[root], path) if path else paths[root]

    others = [absolute(*k) for k in snapshot.links]
    found: dict[str, str] = {}
    pending = [(absolute(*k), absolute(*k)) for k in starts]
    seen: set[str] = set()
    while pending:
        where, link = pending.pop()
        if where in seen:
            continue
        seen.add(where)
        target, _ = realpath(view, where)
        if not view.inside(target):
            # Another spelling of a root's place (a host link on the way, a bind mount of
            # the root) is the same place for git: mapped into the root by identity.
            mapped = _into_root(view, target)
            if mapped is None:
                continue
            target = realpath(view, mapped)[0]
            if not view.inside(target):
                continue
        if target in found:
            continue
        found[target] = link
        below = target if target.endswith("/") else target + "/"
        pending.extend((p, link) for p in others if p.startswith(below))
    return found


def _into_root(view: TreeView, outside: str) -> str | None:
    """``outside`` (a path the view's walk left the roots at) spelled below a root, when the
    host resolves it (or its deepest existing part) into one: the same directory by device
    and inode, found through a host link or another mount of the root. Else None."""
    ids = {}
    for root in view.roots:
        with contextlib.suppress(OSError):
            st = os.fstat(root.fd)
            ids[(st.st_dev, st.st_ino)] = root.path
    here = os.path.realpath(outside)
    rest: list[str] = []
    while True:
        with contextlib.suppress(OSError):
            st = os.stat(here)
            top = ids.get((st.st_dev, st.st_ino))
            if top is not None:
                return "/".join([top.rstrip("/") or "", *reversed(rest)]) or "/"
        if here in ("/", ""):
            return None
        here, leaf = os.path.split(here)
        rest.append(leaf)
