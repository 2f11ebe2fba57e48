"""The error tree: one hierarchy, and errors copied (``with_``), never rewritten in flight."""

from __future__ import annotations

import pytest

import ringfence
from ringfence.runtime import ERROR_CODES, NotFound, OutsideWorkspace, RingfenceError, ToolError


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
