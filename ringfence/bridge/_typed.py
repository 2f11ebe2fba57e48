"""The typed tool API a script sees: ``tools.read_file(path="a.txt")``, checked before any hop.

Imported by the runner as a top-level module from its own directory (like
``_wire`` and ``_restricted``, standard library only) *and* by the host (the
stubs in ``_stubs`` use the same names), so both sides agree on which
attribute path reaches which tool.

**Names.** A registered name is split on ``.`` and each part made an
attribute name (:func:`python_path`): ``read_file`` → ``tools.read_file``,
``mcp.files.read_text_file`` → ``tools.mcp.files.read_text_file``. A ``-``
becomes ``_``; a part that is a Python keyword, starts with a digit or with
``_`` (which a script cannot spell) gets a trailing ``_`` (``__read_resource``
→ ``read_resource_``). :func:`assign_paths` keeps a name only when its path is
its own: two names on one path, or a tool where another name needs a
namespace, are left out of ``tools`` (``call_tool`` still calls them, and the
stubs say so). Nothing is guessed: a path either belongs to exactly one tool
or to none.

**Checks before the hop.** :func:`check_arguments` checks keyword arguments
against the tool's input schema in the script, for the keywords it knows
(``type``, ``enum``, ``const``, ``required``, ``properties``,
``additionalProperties``, ``items``, lengths, bounds, ``anyOf``/``oneOf``/
``allOf``) and only where it can be sure: where it is not (``pattern``,
``$ref``, ``format``, ``patternProperties``, ``not``, …) it lets the value
through. It is a fast first filter with a clear message, never the
guarantee: every call is validated again by the Gate on the host, whatever
the script did to this module's objects.
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "ArgumentError",
    "Namespace",
    "TypedTool",
    "assign_paths",
    "build_namespace",
    "check_arguments",
    "drop_unset",
    "python_path",
]

_ARTICLES = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "object": "an object (dict)",
    "array": "an array (list)",
    "null": "None",
}


class ArgumentError(Exception):
    """An argument the schema refuses: ``field`` names it (dotted for nested ones)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def python_path(name: str) -> tuple[str, ...]:
    """The attribute path of a registered tool name under ``tools`` (see the module doc)."""
    path = []
    for part in name.split("."):
        attr = part.replace("-", "_")
        stripped = attr.lstrip("_")
        if not stripped or stripped != attr or stripped[0].isdigit() or keyword.iskeyword(stripped):
            stripped = (stripped or "tool") + "_"
            if stripped[0].isdigit():
                stripped = "t" + stripped
        path.append(stripped)
    return tuple(path)


def assign_paths(names: Iterable[str]) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """``(paths, left_out)``: each name's attribute path, and why a name has none.

    A path is kept only if exactly one name maps to it and no other path runs
    through it (a tool ``mcp`` beside ``mcp.files.x``): by construction, no
    attribute reaches two tools and no tool hides a namespace.
    """
    wanted: dict[tuple[str, ...], list[str]] = {}
    for name in sorted(set(names)):
        path = python_path(name)
        if all(part.isidentifier() and part.isascii() for part in path):
            wanted.setdefault(path, []).append(name)
    prefixes = {path[:i] for path in wanted for i in range(1, len(path))}
    paths: dict[str, tuple[str, ...]] = {}
    left_out: dict[str, str] = {}
    for path, owners in wanted.items():
        dotted = ".".join(path)
        if len(owners) > 1:
            for name in owners:
                left_out[name] = f"tools.{dotted} would name {' and '.join(owners)}"
        elif path in prefixes:
            left_out[owners[0]] = f"tools.{dotted} is also a namespace of other tools"
        else:
            paths[owners[0]] = path
    for name in names:
        if name not in paths and name not in left_out:
            left_out[name] = "its name cannot be spelled as Python attributes"
    return paths, left_out


# -- the schema check ----------------------------------------------------------------


def _type_ok(kind: str, value: Any) -> bool | None:
    """Whether ``value`` is of JSON Schema type ``kind``; None for a kind not known here."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list | tuple)
    if isinstance(value, bool):
        return False if kind in ("number", "integer") else None
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "integer":  # 1.0 is an integer to JSON Schema, and to the Gate
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    if value is None:
        return "None"
    return type(value).__name__


def _check(schema: Any, value: Any, where: str | None, depth: int = 0) -> None:
    """Raise ArgumentError where ``schema`` surely refuses ``value``; else return."""
    if not isinstance(schema, dict) or depth > 32:
        return
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if isinstance(kinds, list) and kinds and all(isinstance(k, str) for k in kinds):
        results = [_type_ok(k, value) for k in kinds]
        if None not in results and not any(results):
            expected = " or ".join(_ARTICLES.get(k, k) for k in kinds)
            raise ArgumentError(
                where, f"must be {expected}, not {_type_name(value)} {_shown(value)}"
            )
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        choices = ", ".join(_shown(c) for c in schema["enum"][:20])
        raise ArgumentError(where, f"{_shown(value)} is not one of {choices}")
    if "const" in schema and value != schema["const"]:
        raise ArgumentError(where, f"must be {_shown(schema['const'])}, not {_shown(value)}")
    if isinstance(value, str):
        _bounds(schema, len(value), where, "minLength", "maxLength", "characters")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _numeric(schema, value, where)
    elif isinstance(value, list | tuple):
        _bounds(schema, len(value), where, "minItems", "maxItems", "items")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _check(items, item, f"{where}[{i}]" if where else f"[{i}]", depth + 1)
    elif isinstance(value, dict):
        _object(schema, value, where, depth)
    for group in ("anyOf", "oneOf"):  # oneOf as anyOf: more lenient, never stricter
        options = schema.get(group)
        if isinstance(options, list) and options:
            errors = []
            for option in options:
                try:
                    _check(option, value, where, depth + 1)
                    break
                except ArgumentError as exc:
                    errors.append(exc.message)
            else:
                raise ArgumentError(where, f"matches none of the allowed forms ({errors[0]})")
    for option in schema.get("allOf") or ():
        _check(option, value, where, depth + 1)


def _bounds(schema: dict, n: int, where: str | None, low: str, high: str, unit: str) -> None:
    lo, hi = schema.get(low), schema.get(high)
    if isinstance(lo, int) and not isinstance(lo, bool) and n < lo:
        raise ArgumentError(where, f"has {n} {unit}, at least {lo} needed")
    if isinstance(hi, int) and not isinstance(hi, bool) and n > hi:
        raise ArgumentError(where, f"has {n} {unit}, at most {hi} allowed")


def _numeric(schema: dict, value: float, where: str | None) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        return  # the Gate says what it makes of it
    for key, ok, words in (
        ("minimum", lambda v, b: v >= b, "at least"),
        ("maximum", lambda v, b: v <= b, "at most"),
        ("exclusiveMinimum", lambda v, b: v > b, "more than"),
        ("exclusiveMaximum", lambda v, b: v < b, "less than"),
    ):
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and not ok(value, bound):
            raise ArgumentError(where, f"must be {words} {bound:g}, not {_shown(value)}")


def _object(schema: dict, value: dict, where: str | None, depth: int) -> None:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    extra = schema.get("additionalProperties", True)
    if extra is False and "patternProperties" not in schema:
        for key in value:
            if key not in props:
                inner = f"{where}.{key}" if where else str(key)
                known = ", ".join(map(str, props)) or "none"
                raise ArgumentError(inner, f"is unknown (it takes: {known})")
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                inner = f"{where}.{name}" if where else name
                raise ArgumentError(inner, "is required")
    for key, item in value.items():
        inner = f"{where}.{key}" if where else str(key)
        if key in props:
            _check(props[key], item, inner, depth + 1)
        elif "patternProperties" not in schema and isinstance(extra, dict):
            _check(extra, item, inner, depth + 1)


def drop_unset(schema: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` without the optional ones given as None where the schema has no null.

    So ``tools.read_file(path=p, limit=None)`` means "no limit", as the stubs'
    ``limit: int | None = None`` says, instead of a refusal.
    """
    if not isinstance(schema, dict) or None not in arguments.values():
        return arguments
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else ()
    out = {}
    for key, item in arguments.items():
        if item is None and key not in required and key in props and not _allows_null(props[key]):
            continue
        out[key] = item
    return out


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    kinds = schema.get("type")
    if kinds is None:
        return True  # no type: null may be a value it takes
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return not isinstance(kinds, list) or "null" in kinds


def check_arguments(schema: Any, arguments: dict[str, Any]) -> None:
    """Raise :class:`ArgumentError` if ``schema`` surely refuses ``arguments`` (see module doc)."""
    _check(schema, arguments, None)


# -- what the script holds -----------------------------------------------------------

Dispatch = Callable[[str, dict[str, Any]], Any]
Refuse = Callable[[str, str], BaseException]


class TypedTool:
    """One tool as a script calls it: ``tools.read_file(path="a.txt")``.

    Keyword arguments only, checked against the schema, then handed to the
    runner's dispatch (the same road as ``call_tool``). Everything it holds
    is behind names starting with ``_``, which a script cannot reach.
    """

    __slots__ = ("_dispatch", "_dotted", "_name", "_refuse", "_schema")

    def __init__(
        self, name: str, dotted: str, schema: Any, dispatch: Dispatch, refuse: Refuse
    ) -> None:
        self._name = name
        self._dotted = dotted
        self._schema = schema
        self._dispatch = dispatch
        self._refuse = refuse

    def __call__(self, *args: Any, **arguments: Any) -> Any:
        if args:
            props = self._schema.get("properties") if isinstance(self._schema, dict) else None
            names = ", ".join(f"{p}=..." for p in props or ()) or "no arguments"
            raise self._refuse(
                self._name,
                f"tools.{self._dotted} takes keyword arguments only ({names}); "
                f"got {len(args)} positional",
            )
        arguments = drop_unset(self._schema, arguments)
        try:
            check_arguments(self._schema, arguments)
        except ArgumentError as exc:
            field = f"argument {exc.field!r}" if exc.field else "its arguments"
            raise self._refuse(
                self._name, f"tools.{self._dotted}: {field} {exc.message}; the call was not sent"
            ) from None
        return self._dispatch(self._name, arguments)

    def __repr__(self) -> str:
        props = self._schema.get("properties") if isinstance(self._schema, dict) else None
        return f"<tool tools.{self._dotted}({', '.join(props or ())})>"


class Namespace:
    """``tools`` and its sub-namespaces (``tools.mcp.files``): attributes only, read-only.

    An unknown attribute raises AttributeError naming what is there.
    """

    __slots__ = ("_entries", "_where")

    def __init__(self, where: str) -> None:
        self._where = where
        self._entries: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._entries[name]
        except KeyError:
            pass
        known = ", ".join(sorted(self._entries)) or "nothing"
        raise AttributeError(f"{self._where} has no tool or namespace {name!r}; it has: {known}")

    def __dir__(self) -> list[str]:
        return sorted(self._entries)

    def __repr__(self) -> str:
        return f"<{self._where}: {', '.join(sorted(self._entries))}>"


def build_namespace(
    manifest: Iterable[dict[str, Any]], dispatch: Dispatch, refuse: Refuse
) -> Namespace:
    """``tools`` for the script: each manifest entry (``name``, ``schema``) at its path."""
    entries = {e["name"]: e for e in manifest if isinstance(e, dict) and "name" in e}
    paths, _left_out = assign_paths(entries)
    root = Namespace("tools")
    for name, path in sorted(paths.items()):
        node = root
        for i, part in enumerate(path[:-1]):
            child = node._entries.get(part)
            if child is None:
                child = node._entries[part] = Namespace("tools." + ".".join(path[: i + 1]))
            node = child
        node._entries[path[-1]] = TypedTool(
            name, ".".join(path), entries[name].get("schema"), dispatch, refuse
        )
    return root
