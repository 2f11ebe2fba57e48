"""ToolSpec, the registry, and argument validation.

A tool is a name, a description, a JSON input schema, a declared
:class:`Consequence` and an async executor. Anything that does not declare a
consequence is ``irreversible``: a tool must argue its way *down* to ``read``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import jsonschema
from jsonschema.validators import validator_for

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
        object.__setattr__(self, "_validator", cls(schema))

    def literal_secrets(self, arguments: Any, is_key: Callable[[str], bool]) -> list[str]:
        """What ``credential_literals`` finds in ``arguments`` (nothing without one)."""
        if self.credential_literals is None or not isinstance(arguments, Mapping):
            return []
        return list(self.credential_literals(arguments, is_key))

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the schema; raise InvalidArguments naming the field."""
        if not isinstance(arguments, dict):
            raise InvalidArguments(
                f"arguments for {self.name!r} must be a JSON object, "
                f"not {type(arguments).__name__}",
                field="arguments",
            )
        if self._validator.is_valid(arguments):  # the common case, without error bookkeeping
            return arguments
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        assert error is not None
        name = _field_of(error, arguments)
        raise InvalidArguments(
            f"invalid argument {name!r} for {self.name}: {error.message}", field=name
        )


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

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(sorted(self._tools.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._tools)
