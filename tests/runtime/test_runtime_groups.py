"""One exception-group reducer (``runtime._groups``): its rule, and ``__cause__`` kept."""

from __future__ import annotations

import pytest
import trio

from ringfence.runtime import InvalidArguments, RingfenceError, ToolError
from ringfence.runtime._groups import raise_single, single_error


async def _grouped(*raisers) -> BaseExceptionGroup:
    """A real nursery's group: each raiser fails, a sleeper is cancelled by the failure."""

    async def sleeper() -> None:
        await trio.sleep_forever()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            for raiser in raisers:
                nursery.start_soon(raiser)
    except BaseExceptionGroup as group:
        return group
    raise AssertionError("no group")


async def _bind_failure() -> None:
    try:
        raise OSError(98, "Address already in use")
    except OSError as exc:
        raise InvalidArguments("cannot listen", field="port") from exc


async def _tool_error() -> None:
    raise ToolError("second")


async def test_the_one_real_failure_is_raised_with_its_own_cause() -> None:
    group = await _grouped(_bind_failure)
    assert isinstance(single_error(group), InvalidArguments)
    with pytest.raises(InvalidArguments) as info:
        raise_single(group, RingfenceError)
    assert isinstance(info.value.__cause__, OSError)  # `raise leaf from None` lost this


async def test_two_failures_or_another_kind_leave_the_group_standing() -> None:
    two = await _grouped(_bind_failure, _tool_error)
    assert single_error(two) is two
    with pytest.raises(BaseExceptionGroup):
        raise_single(two)
    one = await _grouped(_bind_failure)
    assert single_error(one, OSError) is one  # an InvalidArguments is not an OSError


async def test_first_error_always_names_one_failure() -> None:
    """For translating any failure into one error (an MCP connection's)."""
    from ringfence.runtime._groups import first_error

    two = await _grouped(_bind_failure, _tool_error)
    assert isinstance(first_error(two), (InvalidArguments, ToolError))
    plain = ToolError("plain")
    assert first_error(plain) is plain
