"""A flat schema is compiled once into a closure that is never more lenient than jsonschema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from ringfence.runtime import CallContext, InvalidArguments, ToolSpec
from ringfence.runtime._tools import _compile_simple

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 10},
            "f": {"type": "number", "exclusiveMinimum": 0},
            "b": {"type": "boolean"},
            "s": {"type": "string", "minLength": 1, "maxLength": 3, "enum": ["a", "bb", "é"]},
            "o": {"type": ["string", "null"]},
        },
        "required": ["n"],
    },
    {"type": "object"},
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-20, 20) | st.floats(-20, 20) | st.text(max_size=4),
    lambda children: (
        st.lists(children, max_size=2) | st.dictionaries(st.text(max_size=2), children, max_size=2)
    ),
    max_leaves=4,
)
arguments = st.dictionaries(
    st.sampled_from(["x", "n", "f", "b", "s", "o", "z"]), json_values, max_size=5
)


@settings(max_examples=400, deadline=None)
@given(schema=st.sampled_from(SCHEMAS), args=arguments)
def test_the_compiled_check_never_accepts_what_jsonschema_refuses(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    fast = _compile_simple(schema)
    assert fast is not None
    if fast(args):
        assert jsonschema.Draft202012Validator(schema).is_valid(args), args


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}},
        {"type": "object", "properties": {"x": {"enum": [1, True]}}},
        {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "anyOf": [{"required": ["x"]}]},
    ],
)
def test_schemas_outside_the_flat_subset_are_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert _compile_simple(schema) is None


def test_a_refusal_still_names_the_field() -> None:
    async def run(args: dict[str, Any], ctx: CallContext) -> None:
        return None

    spec = ToolSpec("t", "t", SCHEMAS[1], run)
    assert spec.validate({"n": 3, "s": "bb"}) == {"n": 3, "s": "bb"}
    with pytest.raises(InvalidArguments, match="'n'") as info:
        spec.validate({"n": True})
    assert info.value.field == "n"
