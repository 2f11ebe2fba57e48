"""The error tree: one hierarchy, and errors copied (``with_``), never rewritten in flight."""

from __future__ import annotations

import traceback

import pytest

import ringfence
from ringfence.runtime import (
    ERROR_CODES,
    CallContext,
    MemorySink,
    NotFound,
    OutsideWorkspace,
    RingfenceError,
    ToolError,
    ToolSpec,
)


def test_errors_are_one_tree() -> None:
    for name in ("Denied", "OutsideWorkspace", "Unavailable", "ToolTimeout"):
        assert issubclass(getattr(ringfence, name), ringfence.RingfenceError)
    assert "outside_workspace" in ERROR_CODES


def test_with_copies_and_leaves_the_original_alone() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as cause:
            raise NotFound("nope.txt does not exist", field="path", hint=1) from cause
    except NotFound as exc:
        original = exc
    original.decision = "a decision"
    copy = original.with_(message="nope does not exist", field="cwd")
    assert type(copy) is NotFound and copy.code == "not_found"
    assert (copy.message, copy.field, copy.details) == ("nope does not exist", "cwd", {"hint": 1})
    assert copy.args == ("nope does not exist",) and str(copy) == "nope does not exist"
    assert copy.decision == "a decision"
    assert isinstance(copy.__cause__, KeyError) and copy.__traceback__ is original.__traceback__
    # The original (maybe already recorded, or seen by another task) is unchanged.
    assert (original.message, original.field) == ("nope.txt does not exist", "path")
    assert original.to_dict() == {
        "code": "not_found",
        "message": "nope.txt does not exist",
        "field": "path",
        "details": {"hint": 1},
    }
    copy.details["hint"] = 2
    assert original.details == {"hint": 1}


def test_with_keeps_what_is_not_named_and_can_clear_the_field() -> None:
    err = OutsideWorkspace("out", field="path")
    assert err.with_().to_dict() == err.to_dict()
    assert err.with_(field=None).field is None
    assert err.with_(details={"root": "/ws"}).details == {"root": "/ws"}


def test_a_copy_raises_as_the_same_kind_of_error() -> None:
    with pytest.raises(ToolError) as info:
        try:
            raise ToolError("a \udcff name")
        except RingfenceError as exc:
            raise exc.with_(message="a \\xff name") from exc.__cause__
    assert info.value.message == "a \\xff name"


# -- the kernel redacts and cuts a copy: an error raised once is never rewritten ----------


def _raising(name: str, error: RingfenceError) -> ToolSpec:
    async def run(args: dict, ctx: CallContext) -> None:
        raise error

    return ToolSpec(name, "raises a shared error", {"type": "object"}, run, consequence="read")


async def test_one_error_shared_by_two_sessions_keeps_its_own_text_in_each() -> None:
    """Two kernels with different secrets fail with the same error object: each outcome is
    that kernel's redaction of the original, and the original stays as it was raised."""
    try:
        raise KeyError("the cause")
    except KeyError as cause:
        shared = ToolError(
            "alpha-secret-1 and beta-secret-2 leaked", field="x", note="alpha-secret-1"
        )
        shared.__cause__ = cause
    outcomes = []
    for secret in ("alpha-secret-1", "beta-secret-2"):
        async with ringfence.Kernel(posture="unrestricted", secrets=[secret]) as kernel:
            kernel.register(_raising("boom", shared))
            outcomes.append(await kernel.invoke("boom", {}))
    first, second = (o.error for o in outcomes)
    assert first is not None and second is not None
    assert "alpha-secret-1" not in first.message and "beta-secret-2" in first.message
    assert "beta-secret-2" not in second.message and "alpha-secret-1" in second.message
    assert "alpha-secret-1" not in str(first.details)
    assert second.details == {"note": "alpha-secret-1"}
    for error in (first, second):
        assert type(error) is ToolError and error.field == "x"
        assert isinstance(error.__cause__, KeyError)  # where it came from is kept
    # A traceback shown of the safe copy (RINGFENCE_DEBUG) does not chain the original.
    assert "alpha-secret-1" not in "".join(traceback.format_exception(first))
    # The object the tool raised (and may raise again, or hold elsewhere) is untouched.
    assert shared.message == "alpha-secret-1 and beta-secret-2 leaked"
    assert shared.args == ("alpha-secret-1 and beta-secret-2 leaked",)
    assert shared.details == {"note": "alpha-secret-1"}


async def test_an_error_raised_twice_is_cut_on_a_copy_each_time() -> None:
    """A long message is cut for the outcome, not in the error object the tool raised."""
    long = ToolError("x" * 20_000)
    sink = MemorySink()
    async with ringfence.Kernel(posture="unrestricted", events_sink=sink) as kernel:
        kernel.register(_raising("long", long))
        a = await kernel.invoke("long", {})
        b = await kernel.invoke("long", {})
    assert a.error is not None and b.error is not None
    assert len(a.error.message.encode()) <= 8 * 1024 and a.error.message == b.error.message
    assert long.message == "x" * 20_000 and long.args == ("x" * 20_000,)
    failed = [r for r in sink.records() if r["kind"] == "failed"]
    assert len(failed) == 2 and all(r["error"]["message"] == a.error.message for r in failed)
