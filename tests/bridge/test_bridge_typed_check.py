"""The script-side argument check never refuses what the Gate would accept.

It is a first filter with a clearer message; the Gate's validation is the
guarantee. Checked differentially: random arguments against real schemas
(ringfence's own tools) and crafted ones, each refused locally only if
``ToolSpec.validate`` refuses it too.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from ringfence import create_kernel
from ringfence.bridge._typed import ArgumentError, check_arguments, drop_unset
from ringfence.runtime import InvalidArguments, ToolSpec

CRAFTED: list[dict[str, Any]] = [
    {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}},
    {"type": "object", "properties": {"e": {"enum": [1, "a", None, True]}}},
    {"type": "object", "properties": {"c": {"const": 2}}},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
    {"type": "object", "properties": {"o": {"oneOf": [{"type": "integer"}, {"minimum": 3}]}}},
    {
        "type": "object",
        "properties": {
            "deep": {
                "type": "object",
                "properties": {"x": {"type": "string", "maxLength": 3}},
                "required": ["x"],
                "additionalProperties": False,
            }
        },
        "required": ["deep"],
    },
    {
        "type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "number"}, "minItems": 1}},
    },
    {"type": "object", "properties": {"f": {"type": "number", "exclusiveMinimum": 0}}},
    {
        "type": "object",
        "patternProperties": {"^x": {"type": "string"}},
        "additionalProperties": False,
    },
    {"type": "object", "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"i": {"type": "integer", "maximum": 5}}},
    {"type": "object", "allOf": [{"required": ["a"]}, {"properties": {"a": {"type": "string"}}}]},
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-10, max_value=10)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=10)
    | st.sampled_from([1.0, 2.0, -0.0, 5.5])
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def _native_schemas() -> list[dict[str, Any]]:
    async def get() -> list[dict[str, Any]]:
        async with create_kernel(roots=["."]) as kernel:
            return [dict(s.input_schema) for s in kernel.tools()]

    return trio.run(get)


async def _noop(args: dict, ctx: object) -> None:
    return None


@pytest.mark.parametrize("schema", [*CRAFTED, *_native_schemas()], ids=repr)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_local_refusal_is_always_a_gate_refusal(schema: dict[str, Any], data: Any) -> None:
    spec = ToolSpec("t", "t", schema, _noop)
    props = [*(schema.get("properties") or {}), "x", "extra"]
    args = data.draw(st.dictionaries(st.sampled_from(props), json_values, max_size=4))
    args = drop_unset(schema, args)
    try:
        check_arguments(schema, args)
    except ArgumentError as local:
        with pytest.raises(InvalidArguments):
            spec.validate(args)
        assert local.message
