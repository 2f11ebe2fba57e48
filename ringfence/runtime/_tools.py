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

from . import _schema
from ._errors import InvalidArguments, NotFound

if TYPE_CHECKING:
    from ._calls import CallContext

__all__ = ["Consequence", "Executor", "Registry", "ToolSpec"]

Executor = Callable[[dict[str, Any], "CallContext"], Awaitable[Any]]
# (arguments, is_credential_name) -> credential literals the arguments carry in a form
# register_named_values cannot see (a script's source); see ToolSpec.credential_literals.
LiteralFinder = Callable[[Mapping[str, Any], Callable[[str], bool]], Iterable[str]]
# What executing a call would refuse, raised without effect: (arguments, unrestricted posture).
StageCheck = Callable[[dict[str, Any], bool], Awaitable[None]]

# MCP's rule for tool names; ringfence's own names are a subset of it.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}\Z")


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
    ``exec_checked`` tools enforce the policy's deny rules where programs start
    (every ``execve`` of the call's processes is checked against them): a
    command line the policy cannot read whole need not be asked about for the
    deny rules' sake. ``stage_check``: a dry run awaits it before staging the call, so a
    call its execution would refuse (git metadata, a path outside the roots) is refused
    then, not staged into a plan that cannot be applied; the Gate awaits it before asking
    a person too, so nobody is asked to approve a call that would be refused.
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
    exec_checked: bool = False
    stage_check: StageCheck | None = None
    # The full (RE2-patched) jsonschema validator, built on first use by _full_validator.
    _validator: Any = field(init=False, repr=False, default=None)
    _fast: Callable[[dict[str, Any]], bool] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """Refuse a bad name or an invalid input schema (``invalid_arguments``), here.

        The schema is checked against its meta-schema here, always
        (:func:`._schema.check_schema`); only building jsonschema's validator
        waits for the first call that needs it.
        """
        if not _TOOL_NAME.match(self.name):
            raise InvalidArguments(
                f"tool name {self.name!r} must be 1-128 characters of [A-Za-z0-9_.-]",
                field="name",
            )
        schema = dict(self.input_schema)
        _schema.check_schema(self.name, schema)
        object.__setattr__(self, "input_schema", MappingProxyType(schema))
        object.__setattr__(self, "consequence", Consequence(self.consequence))
        object.__setattr__(self, "_fast", _schema.compile_simple(schema))

    def _full_validator(self) -> Any:
        """jsonschema's validator for the schema, with RE2 patterns; built once, on first use."""
        validator = self._validator
        if validator is None:
            validator = _schema.linear_validator(dict(self.input_schema))
            object.__setattr__(self, "_validator", validator)  # a cache: same for every caller
        return validator

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
            return arguments  # a flat schema, checked by its compiled form (see compile_simple)
        validator = self._full_validator()
        try:
            if validator.is_valid(arguments):  # the common case, without error bookkeeping
                return arguments
            name, message = _schema.best_error(validator, arguments)
        except _schema.Uncheckable as exc:
            raise InvalidArguments(
                f"the input schema of {self.name!r} cannot be checked safely, so the call is "
                f"refused: {exc}",
                field="input_schema",
            ) from None
        raise InvalidArguments(f"invalid argument {name!r} for {self.name}: {message}", field=name)


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
