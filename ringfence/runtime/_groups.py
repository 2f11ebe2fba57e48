"""Exception groups reduced to the one error that matters: one rule for every package.

Nurseries (trio's, the MCP SDK's task groups, hypercorn's) wrap what they
raise in exception groups, nested, next to the ``Cancelled`` the failure
caused in its siblings. A caller that reports errors wants the failure
itself: :func:`single_error` finds it, :func:`raise_single` raises it with
its own ``__cause__`` kept (``raise leaf from None`` would erase it).

The rule: the only leaf that is not ``trio.Cancelled``, if it is an instance
of ``of``; otherwise the group stands (two real failures are both reported).
A caller that must turn any failure into exactly one error (an MCP
connection's error translation) takes :func:`first_error` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NoReturn

import trio

__all__ = ["first_error", "raise_single", "single_error"]


def single_error(
    group: BaseExceptionGroup[BaseException],
    of: type[BaseException] | tuple[type[BaseException], ...] = BaseException,
) -> BaseException:
    """The group's only non-``Cancelled`` leaf when it is an ``of``; else ``group`` itself."""
    real = [e for e in _leaves(group) if not isinstance(e, trio.Cancelled)]
    if len(real) == 1 and isinstance(real[0], of):
        return real[0]
    return group


def raise_single(
    group: BaseExceptionGroup[BaseException],
    of: type[BaseException] | tuple[type[BaseException], ...] = BaseException,
) -> NoReturn:
    """Raise :func:`single_error`: the leaf, its ``__cause__`` kept and the group not chained.

    When there is no single leaf of that kind the group is raised unchanged.
    """
    error = single_error(group, of)
    if error is group:
        raise group
    raise error from error.__cause__


def first_error(exc: BaseException) -> BaseException:
    """``exc`` itself, or the first leaf of the group that is not ``Cancelled`` (else the first)."""
    leaves = list(_leaves(exc))
    return next((e for e in leaves if not isinstance(e, trio.Cancelled)), leaves[0])


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from _leaves(e)
    else:
        yield exc
