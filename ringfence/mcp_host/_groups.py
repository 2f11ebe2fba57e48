"""Exception groups from the SDK's task groups, reduced to the one error that matters."""

from __future__ import annotations

from collections.abc import Iterator

import trio

__all__ = ["single_error"]


def single_error(group: BaseExceptionGroup) -> BaseException:
    """The group's only non-``Cancelled`` leaf, or the group itself when there are several.

    The SDK wraps a transport's failure in nested groups together with the
    cancellations it caused; the caller wants the failure.
    """
    real = [e for e in _leaves(group) if not isinstance(e, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    return group


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from _leaves(e)
    else:
        yield exc
