"""Input schemas: the meta-schema check, the flat fast path, RE2-matched validation.

What :class:`~._tools.ToolSpec` promises about its schema lives here:

* ``check_schema``: a tool's schema is valid under its meta-schema, checked when
  the tool is made. For the keywords ringfence's own tools use that is decided
  without jsonschema (``_schema_ok``, conservative); anything else goes to
  jsonschema's ``check_schema``.
* ``compile_simple``: a flat object schema compiled into a closure that says
  "valid" in about a microsecond, and is never more lenient than jsonschema.
* ``linear_validator``: jsonschema's validator with ``pattern`` and
  ``patternProperties`` matched by RE2 (linear time), for every other case.

jsonschema (with the referencing machinery under it, tens of milliseconds to
import) is imported only by the last two steps' slow paths: a session whose
schemas are all in the known subset and whose calls all pass the flat check
(``ringfence call read_file``) never loads it. The checks are the same either way.
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import re2

from ._canonical import MAX_NESTING, nests_deeper
from ._errors import InvalidArguments

if TYPE_CHECKING:
    import jsonschema

__all__ = ["Uncheckable", "best_error", "check_schema", "compile_simple", "linear_validator"]


# -- schema patterns in linear time -------------------------------------------------------
#
# jsonschema matches "pattern" and "patternProperties" with Python's backtracking ``re``: a
# schema from an MCP server could hold a pattern that takes minutes on a short argument.
# ToolSpec validators match them with RE2 instead (linear in the text). A pattern RE2 cannot
# compile (lookaround, backreferences, ...) is not matched some other way: the call is refused.


class Uncheckable(Exception):
    """A schema keyword ringfence will not evaluate (see ToolSpec.validate)."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern.encode("utf-8"), _RE2_OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise Uncheckable(
            f"the pattern {pattern!r} is not RE2 syntax ({reason}); ringfence matches schema "
            "patterns with RE2, which runs in linear time and has no lookaround, "
            "backreferences, conditionals or atomic groups"
        ) from None


def _search(pattern: Any, text: str) -> bool:
    if not isinstance(pattern, str):
        raise Uncheckable(f"the pattern {pattern!r} is not a string")
    # surrogatepass: a lone surrogate in JSON text must not crash validation; it matches
    # nothing a valid pattern names as a character.
    return _compiled(pattern).search(text.encode("utf-8", "surrogatepass")) is not None


def _validator_class(schema: Mapping[str, Any]) -> Any:
    """The jsonschema validator class ``schema`` names (default: draft 2020-12)."""
    import jsonschema
    from jsonschema.validators import validator_for

    return validator_for(schema, default=jsonschema.Draft202012Validator)


def check_schema(tool: str, schema: Mapping[str, Any]) -> None:
    """Refuse a schema the 2020-12 meta-schema (or the one ``$schema`` names) rejects.

    Decided by :func:`_schema_ok` when it can (no jsonschema import), else by
    jsonschema's ``check_schema``; InvalidArguments (``input_schema``) naming
    ``tool`` and the fault.
    """
    if nests_deeper(schema, 2 * MAX_NESTING):
        # jsonschema checks and validates recursively: a deeper schema raised RecursionError.
        # Each level of arguments is two of the schema's (``properties``, the subschema).
        raise InvalidArguments(
            f"tool {tool!r} has an input schema nested deeper than {2 * MAX_NESTING} levels",
            field="input_schema",
        )
    if _schema_ok(schema):
        return
    import jsonschema

    try:
        _validator_class(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidArguments(
            f"tool {tool!r} has an invalid input schema: {exc.message}",
            field="input_schema",
        ) from None


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    import jsonschema

    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's uniqueItems in linear time: each item's canonical key in a set.

    jsonschema compares items pairwise when they cannot be sorted (objects): one
    keyword evaluation, so the step budget never saw it, and 2,000 objects under a
    ``uniqueItems`` array took 21 s of the kernel's thread, 50,000 (a 500 KB argument,
    one call of a script) hours. Equality is jsonschema's: ``true`` is not ``1``, ``1``
    is ``1.0``, arrays and objects by their contents.
    """
    import jsonschema

    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    try:
        for i, item in enumerate(instance):
            first = seen.setdefault(_unique_key(item), i)
            if first != i:
                yield jsonschema.ValidationError(
                    f"the array has non-unique elements (items {first} and {i} are equal)"
                )
                return
    except RecursionError:
        raise Uncheckable("it nests too deeply to be checked") from None


def _unique_key(value: Any) -> Any:
    """A hashable key equal for two JSON values exactly when jsonschema's ``equal`` is."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 == 1.0, and their hashes agree
    if isinstance(value, Mapping):
        return ("m", frozenset((k, _unique_key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("l", tuple(_unique_key(v) for v in value))
    if value is None:
        return ("z",)
    return ("o", id(value))  # not a JSON value (refused before the Gate): never equal


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's additionalProperties, with patternProperties matched by RE2."""
    import jsonschema

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = {
        key
        for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    }
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        ordered = sorted(extras, key=str)
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in ordered)
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield jsonschema.ValidationError(
                f"{joined} {verb} not match any of the regexes: {listed}"
            )
        else:
            verb = "was" if len(extras) == 1 else "were"
            joined = ", ".join(repr(each) for each in ordered)
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


def _unevaluated_with_patterns(
    validator: Any, value: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    # jsonschema finds the evaluated keys through every subschema with Python's re; that
    # walk is not reimplemented here, so the combination is refused rather than risked.
    if validator.is_type(instance, "object") and instance:
        raise Uncheckable(
            "it combines unevaluatedProperties with patternProperties, which jsonschema "
            "evaluates with a backtracking regex engine"
        )
    yield from ()


def _mentions_pattern_properties(schema: Any) -> bool:
    """Whether ``patternProperties`` occurs as a key anywhere in ``schema`` (over-approximated)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "patternProperties" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


# -- a bounded number of steps per check -------------------------------------------------
#
# RE2 makes each match linear, but jsonschema's combinators are not: ``anyOf`` of two
# ``$ref``s to the level below, 16 levels deep (a 1.5 KB schema), explores 2^16 paths on a
# 16-level argument that fails at the bottom (~12 s of the kernel's thread). Every keyword
# evaluation of a linear validator is counted against a budget set for the one check
# (``is_valid``/``iter_errors``); past it the check stops with Uncheckable, so whoever wrote
# the schema, a check costs at most ``steps`` keyword evaluations (~6.5 µs each here, up to
# ~40 µs for a ``$ref`` under load).

DEFAULT_STEPS = 50_000  # a model's arguments take a few hundred; ~7,000 objects of 5 fields fit
_BUDGET: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "ringfence_schema_budget", default=None
)


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget[0] -= 1
            if budget[0] < 0:
                raise Uncheckable(
                    f"checking it takes more than {budget[1]:,} steps (its anyOf/oneOf/allOf "
                    "and $ref multiply the work)"
                )
        return keyword(validator, value, instance, schema)

    return counted


# A reference short and plain enough to name in a refusal (``#/$defs/x``, a URL, a URN).
_PLAIN_REF = re.compile(r"[A-Za-z0-9#/$_.:~%-]{1,80}\Z")


class _Budgeted:
    """A linear validator whose every check stops after ``steps`` keyword evaluations."""

    def __init__(self, inner: Any, steps: int) -> None:
        self._inner = inner
        self._steps = steps

    def _run(self, check: Callable[[], Any]) -> Any:
        from referencing.exceptions import Unresolvable

        token = _BUDGET.set([self._steps, self._steps])
        try:
            return check()
        except RecursionError:  # a $ref cycle, or nesting past Python's stack
            raise Uncheckable("it refers to itself or nests too deeply to be checked") from None
        except Unresolvable as exc:
            # A $ref to nothing in the schema, or to a document elsewhere (never fetched): every
            # call of such a tool ended in "failed inside ringfence: _WrappedReferencingError".
            # The reference is named only when it is short and plain: it is the schema's
            # writer's text (an MCP server's), which may be 64 KB of instructions.
            ref = getattr(exc, "ref", None)
            named = f" ({ref!r})" if isinstance(ref, str) and _PLAIN_REF.match(ref) else ""
            raise Uncheckable(
                f"a $ref it holds{named} cannot be resolved within the schema itself "
                "(ringfence fetches no schema from elsewhere)"
            ) from None
        finally:
            _BUDGET.reset(token)

    def is_valid(self, instance: Any) -> bool:
        return bool(self._run(lambda: self._inner.is_valid(instance)))

    def iter_errors(self, instance: Any) -> Iterator[Any]:
        return iter(self._run(lambda: list(self._inner.iter_errors(instance))))

    def evolve(self, **changes: Any) -> _Budgeted:
        return _Budgeted(self._inner.evolve(**changes), self._steps)


@functools.cache
def _linear_validator(cls: Any, pattern_properties: bool) -> Any:
    """``cls`` with every regex keyword matched by RE2 and every keyword counted."""
    from jsonschema.validators import extend

    keywords: dict[str, Any] = {
        **cls.VALIDATORS,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
    }
    if pattern_properties and "unevaluatedProperties" in cls.VALIDATORS:
        keywords["unevaluatedProperties"] = _unevaluated_with_patterns
    return extend(cls, validators={k: _counted(f) for k, f in keywords.items()})


def linear_validator(schema: dict[str, Any], steps: int = DEFAULT_STEPS) -> Any:
    """jsonschema's validator for ``schema`` with every regex keyword matched by RE2, each
    check (``is_valid``, ``iter_errors``) stopped with Uncheckable past ``steps`` keyword
    evaluations or on a reference cycle."""
    cls = _validator_class(schema)
    return _Budgeted(_linear_validator(cls, _mentions_pattern_properties(schema))(schema), steps)


def best_error(validator: Any, arguments: dict[str, Any]) -> tuple[str, str]:
    """(field, message) of the error jsonschema ranks first, for arguments it refuses."""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    assert error is not None
    return _field_of(error, arguments), error.message


def _field_of(error: jsonschema.ValidationError, arguments: dict[str, Any]) -> str:
    """The dotted path of the offending field, or the missing/extra property."""
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and not path:
        missing = [k for k in error.validator_value if k not in arguments]
        return missing[0] if missing else "arguments"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        if extra:
            return ".".join([path, extra[0]]) if path else extra[0]
    return path or "arguments"


# -- flat schemas compiled once -----------------------------------------------------------
#
# Most tool schemas are a flat object of typed properties. For those, a closure built once
# answers "valid" in about a microsecond; jsonschema then runs only for a call it would refuse
# (to name the error) and for every schema outside this subset. The subset is chosen so the
# closure is never more lenient than jsonschema: a keyword it does not know makes the whole
# schema uncompiled.

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "format", "$comment"})
_TOP_KEYS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "$schema"}
# Keywords that hold a pattern or subschemas (see _compile_nested): run_shell's schema.
_NESTED_KEYS = frozenset(
    {"pattern", "not", "oneOf", "items", "minItems", "maxItems", "propertyNames",
     "additionalProperties"}
)  # fmt: skip
_PROP_KEYS = _ANNOTATIONS | _NESTED_KEYS | {
    "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "enum",
}  # fmt: skip


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):
        return False  # JSON Schema: true is not a number
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    return False


def _compile_property(schema: Any) -> Callable[[Any], bool] | None:
    if not isinstance(schema, Mapping) or not set(schema) <= _PROP_KEYS:
        return None
    kind = schema.get("type")
    types = [kind] if isinstance(kind, str) else kind
    if types is not None and (
        not isinstance(types, list) or not all(isinstance(t, str) for t in types)
    ):
        return None
    enum = schema.get("enum")
    if enum is not None and not (isinstance(enum, list) and all(isinstance(e, str) for e in enum)):
        return None  # JSON equality (1 == 1.0, true != 1) is jsonschema's to judge
    bounds = {
        k: schema[k]
        for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        if k in schema
    }
    lengths = {k: schema[k] for k in ("minLength", "maxLength") if k in schema}
    for v in bounds.values():
        if isinstance(v, bool) or not isinstance(v, int | float):
            return None
    for v in lengths.values():
        if isinstance(v, bool) or not isinstance(v, int):
            return None
    allowed = frozenset(enum) if enum is not None else None
    nested = _compile_nested(schema)
    if nested is None:
        return None

    def check(value: Any) -> bool:
        if types is not None and not any(_is_type(value, t) for t in types):
            return False
        if allowed is not None and not (isinstance(value, str) and value in allowed):
            return False
        if bounds and isinstance(value, int | float) and not isinstance(value, bool):
            if "minimum" in bounds and value < bounds["minimum"]:
                return False
            if "maximum" in bounds and value > bounds["maximum"]:
                return False
            if "exclusiveMinimum" in bounds and value <= bounds["exclusiveMinimum"]:
                return False
            if "exclusiveMaximum" in bounds and value >= bounds["exclusiveMaximum"]:
                return False
        if lengths and isinstance(value, str):
            if "minLength" in lengths and len(value) < lengths["minLength"]:
                return False
            if "maxLength" in lengths and len(value) > lengths["maxLength"]:
                return False
        return nested(value)

    return check


def _compile_nested(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """The :data:`_NESTED_KEYS` of ``schema`` as one check, or None when one is outside the
    subset (a pattern RE2 cannot compile: jsonschema's path then refuses the call).

    Each sub-check is *exact* (it says True exactly when jsonschema, with RE2 for
    ``pattern`` as :func:`linear_validator` has it, would), not merely never more lenient:
    ``not`` and ``oneOf`` turn a sub-check's False into a True. Like jsonschema, each
    keyword applies only to values of its type (``pattern`` to strings, ``items`` to
    arrays, ``propertyNames`` to objects, ...).
    """
    checks: list[Callable[[Any], bool]] = []
    if "pattern" in schema:
        pattern = schema["pattern"]
        try:
            _compiled(pattern)
        except (Uncheckable, TypeError):
            return None
        checks.append(lambda v: not isinstance(v, str) or _search(pattern, v))
    subs: dict[str, Callable[[Any], bool]] = {}
    for key in ("not", "items", "propertyNames", "additionalProperties"):
        if key in schema and not (key == "additionalProperties" and schema[key] is True):
            sub = _compile_property(schema[key]) if schema[key] is not False else _never
            if sub is None:
                return None
            subs[key] = sub
    if "not" in subs:
        checks.append(lambda v, sub=subs["not"]: not sub(v))
    if "items" in subs:
        checks.append(lambda v, sub=subs["items"]: not isinstance(v, list) or all(map(sub, v)))
    if "propertyNames" in subs:
        checks.append(
            lambda v, sub=subs["propertyNames"]: not isinstance(v, dict) or all(map(sub, v))
        )
    if "additionalProperties" in subs:  # no "properties" here: every key is additional
        checks.append(
            lambda v, sub=subs["additionalProperties"]: (
                not isinstance(v, dict) or all(map(sub, v.values()))
            )
        )
    if "oneOf" in schema:
        branches = schema["oneOf"]
        compiled = [_compile_property(b) for b in branches] if isinstance(branches, list) else []
        if not compiled or any(c is None for c in compiled):
            return None
        checks.append(lambda v: sum(1 for c in compiled if c(v)) == 1)
    counts = {k: schema[k] for k in ("minItems", "maxItems") if k in schema}
    if any(isinstance(n, bool) or not isinstance(n, int) for n in counts.values()):
        return None
    if counts:
        low, high = counts.get("minItems", 0), counts.get("maxItems")
        checks.append(
            lambda v: (
                not isinstance(v, list) or (low <= len(v) and (high is None or len(v) <= high))
            )
        )
    return lambda v: all(check(v) for check in checks)


def _never(_value: Any) -> bool:
    return False


# -- meta-schema check without jsonschema -----------------------------------------------
#
# Every input schema is checked against the 2020-12 meta-schema when its tool is made.
# For the keywords ringfence's own tools use, _schema_ok decides that here, so a session
# that registers only those never imports jsonschema. It is conservative: it says True
# only for what the meta-schema accepts; any other schema (an unknown keyword, a $ref, a
# value of an unexpected shape) goes to jsonschema's check_schema, which also names the
# fault. tests/runtime/test_runtime_schema_compiled.py holds it against check_schema.

_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_STRING_KEYWORDS = frozenset({"description", "title", "format", "$comment"})
_BOOL_KEYWORDS = frozenset({"deprecated", "readOnly", "writeOnly", "uniqueItems"})
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNT_KEYWORDS = frozenset(
    {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
)
_SCHEMA_KEYWORDS = frozenset({"additionalProperties", "items", "not", "propertyNames", "contains"})
_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf"})
_ANY_KEYWORDS = frozenset({"default", "const"})
_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def _unique_strings(value: Any) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(v, str) for v in value)
        and len(set(value)) == len(value)
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _keyword_ok(key: Any, value: Any) -> bool:
    if key in _STRING_KEYWORDS:
        return isinstance(value, str)
    if key in _BOOL_KEYWORDS:
        return isinstance(value, bool)
    if key in _NUMBER_KEYWORDS:
        return _is_number(value)
    if key in _COUNT_KEYWORDS:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if key in _SCHEMA_KEYWORDS:
        return _schema_ok(value, root=False)
    if key in _LIST_KEYWORDS:
        return isinstance(value, list) and bool(value) and all(_schema_ok(v, False) for v in value)
    if key in _ANY_KEYWORDS:
        return True
    if key == "type":
        kinds = [value] if isinstance(value, str) else value
        return bool(kinds) and _unique_strings(kinds) and set(kinds) <= _SIMPLE_TYPES
    if key in ("enum", "examples"):
        return isinstance(value, list)
    if key == "required":
        return _unique_strings(value)
    if key == "multipleOf":
        return _is_number(value) and value > 0
    if key == "properties":
        return isinstance(value, dict) and all(
            isinstance(k, str) and _schema_ok(v, root=False) for k, v in value.items()
        )
    if key == "pattern":  # the meta-schema's "regex" format, as check_schema judges it
        try:
            re.compile(value)
        except Exception:  # re.error, TypeError, ...: jsonschema decides and names it
            return False
        return True
    return False  # a keyword outside this subset: jsonschema decides


def _schema_ok(schema: Any, root: bool = True) -> bool:
    """True only if ``schema`` is valid under the 2020-12 meta-schema (see above)."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    if root and schema.get("$schema", _DRAFT_2020_12) != _DRAFT_2020_12:
        return False  # another draft: its own meta-schema, jsonschema's to apply
    return all((k == "$schema" and root) or _keyword_ok(k, v) for k, v in schema.items())


# The drafts whose meaning of every keyword in the flat subset is the same as 2020-12's (type,
# integer as a whole float too, numeric exclusive bounds, lengths, enum, pattern, items as one
# schema, not, oneOf, propertyNames, additionalProperties, annotations). Draft-07 is what
# MCP servers built on zod write (server-everything's tools); without this every call of
# theirs went through jsonschema (~20 µs). A tuple ``items`` (draft-07's other form) is not
# a schema, so it stays outside the subset.
_FLAT_DRAFTS = (
    None,
    _DRAFT_2020_12,
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
)


def compile_simple(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A closure that says True only for arguments jsonschema would accept, or None when
    the schema is outside the flat subset (see above)."""
    if not set(schema) <= _TOP_KEYS or schema.get("type", "object") != "object":
        return None
    if schema.get("$schema") not in _FLAT_DRAFTS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(extra, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, prop in properties.items():
        check = _compile_property(prop)
        if check is None:
            return None
        checks[name] = check
    needed = tuple(required)

    def valid(arguments: dict[str, Any]) -> bool:
        for name in needed:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            check = checks.get(name)
            if check is None:
                if not extra:
                    return False
            elif not check(value):
                return False
        return True

    return valid
