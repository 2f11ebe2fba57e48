"""The file a path argument resolves to, handed to the policy at the place it is opened.

Policy rules compare names (``read_file(path=.env)`` is about the spelling ``.env``);
the resolver follows links inside the roots, so ``read_file x`` with ``x -> .env``
opens ``.env``. A file tool sets a *judge* for its own path argument
(:func:`judging`) and the operation hands it the workspace name of what its walk
actually reached — the final place (writes, searches) or the opened descriptor
(reads, listings) — before any byte is read or written. The judge is the call's
:meth:`~ringfence.runtime._calls.CallContext.check_path`; it raises the refusal.

A context variable, not an argument: the worker thread a tool's work runs in is
started with a copy of the executor's context (trio's ``to_thread``), and operations
run outside a tool (undo, a shell's directory) see no judge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import PurePosixPath

from ._names import escape_name
from ._resolver import Access, FollowLeaf, Place, Resolver, display_path, fd_path, is_link

__all__ = ["final_name", "judge_fd", "judge_place", "judging"]

_JUDGE: ContextVar[Callable[[str], None] | None] = ContextVar("ringfence_path_judge", default=None)


@contextlib.contextmanager
def judging(check: Callable[[str], None]) -> Iterator[None]:
    """While inside, the operations of this context hand ``check`` the (escaped) name of
    the file their path argument resolved to."""
    token = _JUDGE.set(check)
    try:
        yield
    finally:
        _JUDGE.reset(token)


def judge_place(place: Place) -> None:
    """Hand the judge the final place of a walk (its leaf, or the directory itself)."""
    check = _JUDGE.get()
    if check is not None:
        check(escape_name(place.display()))


def judge_fd(resolver: Resolver, fd: int) -> None:
    """Hand the judge the workspace name of an opened descriptor (read back from the kernel)."""
    check = _JUDGE.get()
    if check is not None:
        check(escape_name(fd_name(resolver, fd)))


def fd_name(resolver: Resolver, fd: int) -> str:
    """The name tools show for an open descriptor: relative to the first root, else absolute."""
    real = PurePosixPath(fd_path(fd))
    for root in resolver.roots:
        with contextlib.suppress(ValueError):
            return display_path(root, real.relative_to(root.path).parts)
    return str(real)


def final_name(resolver: Resolver, access: Access, path: str) -> str:
    """The name of the file ``path`` resolves to, every link inside the roots followed (a
    missing leaf is named as it would be created). Raises as the resolver does."""

    def op(place: Place) -> str:
        if place.leaf is not None and is_link(place.leaf, place.dir_fd):
            raise FollowLeaf
        return place.display()

    with resolver:
        return escape_name(resolver.walk(path, op, access=access))
