"""A flat schema is compiled once into a closure that is never more lenient than jsonschema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from ringfence.backends._run_shell import INPUT_SCHEMA as RUN_SHELL_SCHEMA
from ringfence.runtime import CallContext, InvalidArguments, ToolSpec
from ringfence.runtime._schema import compile_simple as _compile_simple, linear_validator

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


DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def _draft_07(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as a zod-built MCP server writes it (server-everything's ``echo``)."""
    return {"$schema": DRAFT_07, **schema}


@settings(max_examples=400, deadline=None)
@given(schema=st.sampled_from(SCHEMAS + [_draft_07(s) for s in SCHEMAS]), args=arguments)
def test_the_compiled_check_never_accepts_what_jsonschema_refuses(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    fast = _compile_simple(schema)
    assert fast is not None
    if fast(args):
        assert jsonschema.validators.validator_for(schema)(schema).is_valid(args), args


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(?=a)"}}},
        {"type": "object", "properties": {"x": {"enum": [1, True]}}},
        {"type": "object", "properties": {"x": {"type": "array", "items": {"$ref": "#"}}}},
        {"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}, True]}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "anyOf": [{"required": ["x"]}]},
        # draft-07's tuple form of items, and drafts whose keywords mean other things
        _draft_07({"type": "object", "properties": {"x": {"items": [{"type": "string"}]}}}),
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
        {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"},
    ],
)
def test_schemas_outside_the_flat_subset_are_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert _compile_simple(schema) is None


# Schemas with patterns and subschemas (run_shell's among them). ``not`` and ``oneOf`` turn a
# sub-check's refusal into an acceptance, so here the compiled check must be exact: it agrees
# with the full validator (jsonschema with RE2 patterns) on every argument, both ways.
NESTED_SCHEMAS: list[dict[str, Any]] = [
    RUN_SHELL_SCHEMA,
    {
        "type": "object",
        "properties": {
            "x": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]},
            "n": {"not": {"type": "string", "pattern": "^a"}},
            "s": {"type": "array", "items": {"enum": ["a", "é"]}, "maxItems": 1},
            "o": {"type": "object", "additionalProperties": False},
            "b": {"type": "object", "propertyNames": {"maxLength": 1}, "additionalProperties": {}},
        },
    },
]
nested_arguments = st.dictionaries(
    st.sampled_from(["command", "cwd", "env", "timeout_seconds", "x", "n", "s", "o", "b"]),
    json_values
    | st.dictionaries(st.sampled_from(["A", "LD_X", "1", "a\n", "é", ""]), json_values, max_size=2)
    | st.lists(st.sampled_from(["a", "é", "b"]), max_size=2),
    max_size=4,
)


@settings(max_examples=600, deadline=None)
@given(
    schema=st.sampled_from(NESTED_SCHEMAS + [_draft_07(s) for s in NESTED_SCHEMAS]),
    args=nested_arguments,
)
def test_the_compiled_check_of_nested_schemas_agrees_with_the_full_validator(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    fast = _compile_simple(schema)
    assert fast is not None
    assert fast(args) == linear_validator(schema).is_valid(args), args


def test_a_refusal_still_names_the_field() -> None:
    async def run(args: dict[str, Any], ctx: CallContext) -> None:
        return None

    spec = ToolSpec("t", "t", SCHEMAS[1], run)
    assert spec.validate({"n": 3, "s": "bb"}) == {"n": 3, "s": "bb"}
    with pytest.raises(InvalidArguments, match="'n'") as info:
        spec.validate({"n": True})
    assert info.value.field == "n"


# -- the meta-schema check without jsonschema --------------------------------------------

_any = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-3, 3) | st.text(max_size=3)
_keyword_values = {
    "type": st.sampled_from(["string", "integer", "nope", ["string", "null"], ["a"], [], 1])
    | st.lists(st.sampled_from(["string", "number", "string"]), max_size=3),
    "required": st.lists(st.sampled_from(["a", "b", 1]), max_size=3),
    "minLength": st.integers(-2, 3) | st.floats(-1, 2) | st.booleans(),
    "maxItems": st.integers(-2, 3) | st.text(max_size=1),
    "minimum": _any,
    "exclusiveMinimum": _any,
    "multipleOf": st.integers(-1, 2) | st.floats(-1, 1),
    "pattern": st.sampled_from(["^a+$", "([", "(?=x)", "\\d", 5]),
    "description": _any,
    "format": _any,
    "examples": _any | st.lists(_any, max_size=2),
    "enum": _any | st.lists(_any, max_size=2),
    "uniqueItems": _any,
    "default": _any,
    "$ref": st.just("#/nowhere"),
    "frobnicate": _any,
}


def _schemas(depth: int) -> st.SearchStrategy[Any]:
    flat = st.dictionaries(
        st.sampled_from(sorted(_keyword_values)), st.just(None), max_size=4
    ).flatmap(lambda keys: st.fixed_dictionaries({k: _keyword_values[k] for k in keys}))
    if depth == 0:
        return flat | st.booleans()
    inner = _schemas(depth - 1)
    nested = st.fixed_dictionaries(
        {},
        optional={
            "properties": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
            "items": inner | _any,
            "oneOf": st.lists(inner, max_size=2),
            "not": inner,
            "additionalProperties": inner,
            "propertyNames": inner,
        },
    )
    return st.builds(lambda a, b: {**a, **b}, flat, nested) | _any


@settings(max_examples=400, deadline=None)
@given(_schemas(2))
def test_the_meta_schema_check_without_jsonschema_never_accepts_an_invalid_schema(
    schema: Any,
) -> None:
    """What ringfence decides without jsonschema, jsonschema's check_schema also accepts."""
    from ringfence.runtime._schema import _schema_ok

    if _schema_ok(schema):
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "strnig"},
        {"type": ["string", "string"]},
        {"type": "string", "minLength": -1},
        {"type": "string", "pattern": "(["},
        {"type": "string", "description": 3},
        {"oneOf": []},
        {"type": "number", "multipleOf": 0},
    ],
)
def test_a_tool_with_an_invalid_schema_is_refused_when_it_is_made(prop: dict[str, Any]) -> None:
    """The meta-schema check still runs at construction, however the schema is decided."""

    async def run(args: dict[str, Any], ctx: CallContext) -> str:
        return "ran"

    schema = {"type": "object", "properties": {"x": prop}, "required": ["x"]}
    with pytest.raises(InvalidArguments) as info:
        ToolSpec("t", "d", schema, run)
    assert info.value.field == "input_schema" and "'t'" in info.value.message
