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


Check = Callable[[Any, "str | None"], None]


def _ok(value: Any, where: str | None) -> None:
    return None


def _is_number(value: Any) -> bool:
    return type(value) is not bool and isinstance(value, int | float)


def _is_integer(value: Any) -> bool:  # 1.0 is an integer to JSON Schema, and to the Gate
    if type(value) is bool:
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_KINDS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list | tuple),
    "number": _is_number,
    "integer": _is_integer,
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _limit(schema: dict[str, Any], key: str) -> int | None:
    bound = schema.get(key)
    return bound if isinstance(bound, int) and not isinstance(bound, bool) else None


def _compile(schema: Any, depth: int = 0) -> Check:
    """A check of ``schema``, compiled once: it raises ArgumentError where the schema surely refuses.

    Every lookup in the schema happens here, not per call.
    """
    if not isinstance(schema, dict) or depth > 32:
        return _ok
    checks: list[Check] = []
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if isinstance(kinds, list) and kinds and all(k in _KINDS for k in kinds):
        tests = tuple(_KINDS[k] for k in kinds)
        expected = " or ".join(_ARTICLES[k] for k in kinds)

        def type_check(value: Any, where: str | None) -> None:
            for test in tests:
                if test(value):
                    return
            raise ArgumentError(
                where, f"must be {expected}, not {_type_name(value)} {_shown(value)}"
            )

        checks.append(type_check)
    if isinstance(schema.get("enum"), list):
        choices = list(schema["enum"])
        shown = ", ".join(_shown(c) for c in choices[:20])

        def enum_check(value: Any, where: str | None) -> None:
            if value not in choices:
                raise ArgumentError(where, f"{_shown(value)} is not one of {shown}")

        checks.append(enum_check)
    if "const" in schema:
        const = schema["const"]

        def const_check(value: Any, where: str | None) -> None:
            if value != const:
                raise ArgumentError(where, f"must be {_shown(const)}, not {_shown(value)}")

        checks.append(const_check)
    checks += _sized(schema, depth)
    checks += _numeric(schema)
    if (
        isinstance(schema.get("properties"), dict)
        or schema.get("required")
        or ("additionalProperties" in schema)
    ):
        checks.append(_object(schema, depth))
    for group in ("anyOf", "oneOf"):  # oneOf as anyOf: more lenient, never stricter
        options = schema.get(group)
        if isinstance(options, list) and options:
            checks.append(_any_of([_compile(o, depth + 1) for o in options]))
    for option in schema.get("allOf") or ():
        checks.append(_compile(option, depth + 1))
    checks = [c for c in checks if c is not _ok]
    if not checks:
        return _ok
    if len(checks) == 1:
        return checks[0]

    def all_checks(value: Any, where: str | None) -> None:
        for check in checks:
            check(value, where)

    return all_checks


def _any_of(options: list[Check]) -> Check:
    def any_check(value: Any, where: str | None) -> None:
        first = None
        for option in options:
            try:
                option(value, where)
                return
            except ArgumentError as exc:
                first = first or exc.message
        raise ArgumentError(where, f"matches none of the allowed forms ({first})")

    return any_check


def _sized(schema: dict[str, Any], depth: int) -> list[Check]:
    out: list[Check] = []
    for kinds, low, high, unit in (
        (str, "minLength", "maxLength", "characters"),
        (list | tuple, "minItems", "maxItems", "items"),
    ):
        lo, hi = _limit(schema, low), _limit(schema, high)
        if lo is None and hi is None:
            continue

        def size_check(
            value: Any, where: str | None, kinds: Any = kinds, lo: Any = lo, hi: Any = hi,
            unit: str = unit,
        ) -> None:  # fmt: skip
            if isinstance(value, kinds):
                n = len(value)
                if lo is not None and n < lo:
                    raise ArgumentError(where, f"has {n} {unit}, at least {lo} needed")
                if hi is not None and n > hi:
                    raise ArgumentError(where, f"has {n} {unit}, at most {hi} allowed")

        out.append(size_check)
    items = schema.get("items")
    if isinstance(items, dict):
        item_check = _compile(items, depth + 1)
        if item_check is not _ok:

            def items_check(value: Any, where: str | None) -> None:
                if isinstance(value, list | tuple):
                    for i, item in enumerate(value):
                        item_check(item, f"{where}[{i}]" if where else f"[{i}]")

            out.append(items_check)
    return out


def _numeric(schema: dict[str, Any]) -> list[Check]:
    bounds = []
    for key, ok, words in (
        ("minimum", lambda v, b: v >= b, "at least"),
        ("maximum", lambda v, b: v <= b, "at most"),
        ("exclusiveMinimum", lambda v, b: v > b, "more than"),
        ("exclusiveMaximum", lambda v, b: v < b, "less than"),
    ):
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            bounds.append((bound, ok, words))
    if not bounds:
        return []

    def number_check(value: Any, where: str | None) -> None:
        if not _is_number(value) or (isinstance(value, float) and not math.isfinite(value)):
            return  # not a number (the type check says so), or one the Gate decides about
        for bound, ok, words in bounds:
            if not ok(value, bound):
                raise ArgumentError(where, f"must be {words} {bound:g}, not {_shown(value)}")

    return [number_check]


def _object(schema: dict[str, Any], depth: int) -> Check:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    compiled = {key: _compile(sub, depth + 1) for key, sub in props.items()}
    compiled = {key: check for key, check in compiled.items() if check is not _ok}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    extra = schema.get("additionalProperties", True)
    patterned = "patternProperties" in schema  # a pattern may allow a key: the Gate decides
    closed = extra is False and not patterned
    known = frozenset(props)
    listed = ", ".join(map(str, props)) or "none"
    extra_check = _compile(extra, depth + 1) if isinstance(extra, dict) and not patterned else None

    def object_check(value: Any, where: str | None) -> None:
        if not isinstance(value, dict):
            return
        if closed and not known.issuperset(value):
            key = next(k for k in value if k not in known)
            inner = f"{where}.{key}" if where else str(key)
            raise ArgumentError(inner, f"is unknown (it takes: {listed})")
        for name in required:
            if name not in value:
                raise ArgumentError(f"{where}.{name}" if where else name, "is required")
        for key, item in value.items():
            check = compiled.get(key)
            if check is not None:
                check(item, f"{where}.{key}" if where else key)
            elif extra_check is not None and key not in known:
                extra_check(item, f"{where}.{key}" if where else str(key))

    return object_check


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
    _compile(schema)(arguments, None)


# -- what the script holds -----------------------------------------------------------

Dispatch = Callable[[str, dict[str, Any]], Any]
Refuse = Callable[[str, str, "str | None"], BaseException]


class TypedTool:
    """One tool as a script calls it: ``tools.read_file(path="a.txt")``.

    Keyword arguments only, checked against the schema, then handed to the
    runner's dispatch (the same road as ``call_tool``). Everything it holds
    is behind names starting with ``_``, which a script cannot reach.
    """

    __slots__ = ("_check", "_dispatch", "_dotted", "_name", "_refuse", "_schema")

    def __init__(
        self, name: str, dotted: str, schema: Any, dispatch: Dispatch, refuse: Refuse
    ) -> None:
        self._name = name
        self._dotted = dotted
        self._schema = schema
        self._dispatch = dispatch
        self._refuse = refuse
        self._check: Check | None = None  # compiled on the first call

    def __call__(self, *args: Any, **arguments: Any) -> Any:
        if args:
            props = self._schema.get("properties") if isinstance(self._schema, dict) else None
            names = ", ".join(f"{p}=..." for p in props or ()) or "no arguments"
            raise self._refuse(
                self._name,
                f"tools.{self._dotted} takes keyword arguments only ({names}); "
                f"got {len(args)} positional",
                None,
            )
        arguments = drop_unset(self._schema, arguments)
        check = self._check
        if check is None:
            check = self._check = _compile(self._schema)
        try:
            check(arguments, None)
        except ArgumentError as exc:
            field = f"argument {exc.field!r}" if exc.field else "its arguments"
            raise self._refuse(
                self._name,
                f"tools.{self._dotted}: {field} {exc.message}; the call was not sent",
                exc.field,
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
