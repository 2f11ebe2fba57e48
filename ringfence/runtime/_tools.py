"""ToolSpec, the registry, and argument validation.

A tool is a name, a description, a JSON input schema, a declared
:class:`Consequence` and an async executor. Anything that does not declare a
consequence is ``irreversible``: a tool must argue its way *down* to ``read``.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import jsonschema
import re2
from jsonschema.validators import extend, validator_for

from ._errors import InvalidArguments, NotFound

if TYPE_CHECKING:
    from ._kernel import CallContext

__all__ = ["Consequence", "Executor", "Registry", "ToolSpec"]

Executor = Callable[[dict[str, Any], "CallContext"], Awaitable[Any]]
# (arguments, is_credential_name) -> credential literals the arguments carry in a form
# register_named_values cannot see (a script's source); see ToolSpec.credential_literals.
LiteralFinder = Callable[[Mapping[str, Any], Callable[[str], bool]], Iterable[str]]

# MCP's rule for tool names; ringfence's own names are a subset of it.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


class Consequence(enum.StrEnum):
    """What running a tool can do to the world, declared by the tool."""

    READ = "read"
    REVERSIBLE = "reversible"
    IRREVERSIBLE = "irreversible"


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """One registered tool.

    ``residual`` tools (``run_shell``, ``run_tool_script``) ask first under every
    posture short of ``unrestricted``, whatever their consequence. ``source``
    says where the tool came from (``native``, ``mcp:<server>``) for display
    and audit; it never changes a decision. ``composes_dry_run`` tools have no
    effect of their own — every effect is a nested call that re-enters the
    Gate (``run_tool_script``) — so a dry run runs them and stages the nested
    calls instead. ``credential_literals`` finds secrets inside arguments
    that are not keyed by name (``run_tool_script``: literals in the script's
    source); the kernel registers them before the call is first recorded.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    executor: Executor
    consequence: Consequence = Consequence.IRREVERSIBLE
    residual: bool = False
    source: str = "native"
    meta: Mapping[str, Any] = field(default_factory=dict)
    composes_dry_run: bool = False
    credential_literals: LiteralFinder | None = None
    _validator: Any = field(init=False, repr=False)
    _fast: Callable[[dict[str, Any]], bool] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not _TOOL_NAME.match(self.name):
            raise InvalidArguments(
                f"tool name {self.name!r} must be 1-128 characters of [A-Za-z0-9_.-]",
                field="name",
            )
        schema = dict(self.input_schema)
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InvalidArguments(
                f"tool {self.name!r} has an invalid input schema: {exc.message}",
                field="input_schema",
            ) from None
        object.__setattr__(self, "input_schema", MappingProxyType(schema))
        object.__setattr__(self, "consequence", Consequence(self.consequence))
        linear = _linear_validator(cls, _mentions_pattern_properties(schema))
        object.__setattr__(self, "_validator", linear(schema))
        object.__setattr__(self, "_fast", _compile_simple(schema))

    def literal_secrets(self, arguments: Any, is_key: Callable[[str], bool]) -> list[str]:
        """What ``credential_literals`` finds in ``arguments`` (nothing without one)."""
        if self.credential_literals is None or not isinstance(arguments, Mapping):
            return []
        return list(self.credential_literals(arguments, is_key))

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the schema; raise InvalidArguments naming the field.

        ``pattern`` and ``patternProperties`` are matched with RE2, in time
        linear in the argument, whoever wrote the schema. A pattern RE2 cannot
        compile (lookaround, backreferences, ...) refuses the call with
        ``invalid_arguments`` (field ``input_schema``) whenever validation
        reaches it, as does ``unevaluatedProperties`` in a schema that also
        has ``patternProperties``; nothing is matched with Python's ``re``.
        """
        if not isinstance(arguments, dict):
            raise InvalidArguments(
                f"arguments for {self.name!r} must be a JSON object, "
                f"not {type(arguments).__name__}",
                field="arguments",
            )
        if self._fast is not None and self._fast(arguments):
            return arguments  # a flat schema, checked by its compiled form (see _compile_simple)
        try:
            if self._validator.is_valid(arguments):  # the common case, without error bookkeeping
                return arguments
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        except _Uncheckable as exc:
            raise InvalidArguments(
                f"the input schema of {self.name!r} cannot be checked safely, so the call is "
                f"refused: {exc}",
                field="input_schema",
            ) from None
        assert error is not None
        name = _field_of(error, arguments)
        raise InvalidArguments(
            f"invalid argument {name!r} for {self.name}: {error.message}", field=name
        )


# -- schema patterns in linear time -------------------------------------------------------
#
# jsonschema matches "pattern" and "patternProperties" with Python's backtracking ``re``: a
# schema from an MCP server could hold a pattern that takes minutes on a short argument.
# ToolSpec validators match them with RE2 instead (linear in the text). A pattern RE2 cannot
# compile (lookaround, backreferences, ...) is not matched some other way: the call is refused.


class _Uncheckable(Exception):
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
        raise _Uncheckable(
            f"the pattern {pattern!r} is not RE2 syntax ({reason}); ringfence matches schema "
            "patterns with RE2, which runs in linear time and has no lookaround, "
            "backreferences, conditionals or atomic groups"
        ) from None


def _search(pattern: Any, text: str) -> bool:
    if not isinstance(pattern, str):
        raise _Uncheckable(f"the pattern {pattern!r} is not a string")
    # surrogatepass: a lone surrogate in JSON text must not crash validation; it matches
    # nothing a valid pattern names as a character.
    return _compiled(pattern).search(text.encode("utf-8", "surrogatepass")) is not None


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's additionalProperties, with patternProperties matched by RE2."""
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
        raise _Uncheckable(
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


@functools.cache
def _linear_validator(cls: Any, pattern_properties: bool) -> Any:
    """``cls`` with every regex keyword matched by RE2."""
    keywords: dict[str, Any] = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    if pattern_properties and "unevaluatedProperties" in cls.VALIDATORS:
        keywords["unevaluatedProperties"] = _unevaluated_with_patterns
    return extend(cls, validators=keywords)


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
_PROP_KEYS = _ANNOTATIONS | {
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
        return True

    return check


def _compile_simple(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A closure that says True only for arguments jsonschema would accept, or None when
    the schema is outside the flat subset (see above)."""
    if not set(schema) <= _TOP_KEYS or schema.get("type", "object") != "object":
        return None
    if schema.get("$schema") not in (None, "https://json-schema.org/draft/2020-12/schema"):
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


class Registry:
    """The tools of one kernel, by name. Names are unique; re-registering is an error."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def add(self, spec: ToolSpec) -> None:
        if spec.name in self._tools:
            raise InvalidArguments(
                f"a tool named {spec.name!r} is already registered", field="name"
            )
        self._tools[spec.name] = spec

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> ToolSpec:
        try:
            return self._tools[name]
        except KeyError:
            raise NotFound(f"no tool named {name!r} is registered", field="tool") from None

    def find(self, name: str) -> ToolSpec | None:
        """The tool named ``name``, or None."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(sorted(self._tools.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._tools)
