"""Canonical JSON: the one byte form that digests, intents, grants, plans and events agree on."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = [
    "MAX_NESTING",
    "arguments_digest",
    "canonical_json",
    "digest",
    "loads",
    "nests_deeper",
    "orjson_digest",
    "unrecordable",
]

# Arguments nest at most this deep (JSON objects and arrays); deeper is refused before the
# Gate, whose validation, redaction and records walk them recursively.
MAX_NESTING = 100

# One encoder for the process: building a JSONEncoder per call costs more than encoding.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def loads(data: str | bytes, **kwargs: Any) -> Any:
    """``json.loads`` for a file someone else wrote (an event stream, a plan, a ledger entry).

    A line nested past the parser's depth (``[[[[…]]]]``, 100,000 deep) raised RecursionError,
    which no caller's ``except ValueError`` caught: ``events verify``, ``events show``,
    ``plan show`` and a session appending to such a file ended in an unexpected error.
    Here it is a ValueError like any other text that is not JSON.
    """
    try:
        return json.loads(data, **kwargs)
    except RecursionError:
        raise ValueError("JSON nested past the parser's depth") from None


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: equal values give equal bytes."""
    return _ENCODER.encode(value).encode("utf-8")


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical form of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


_SORTED = orjson.OPT_SORT_KEYS


def arguments_digest(arguments: Any) -> str:
    """SHA-256 hex digest of a call's arguments as the event log encodes them.

    The digest a call's ``decided`` record and intent carry: orjson with sorted
    keys (about 4x faster than :func:`canonical_json`, computed twice a call),
    which is the canonical form except that floats are written shortest
    (``0.00001``) and NaN/infinities as ``null``; what orjson refuses (a
    non-string key, an integer beyond 64 bits) falls back to
    :func:`canonical_json`. Re-encoding the arguments as parsed back from a
    ``proposed`` record gives the same bytes, so a verifier recomputes it.
    """
    fast = orjson_digest(arguments)
    return fast if fast is not None else hashlib.sha256(canonical_json(arguments)).hexdigest()


def orjson_digest(value: Any) -> str | None:
    """:func:`arguments_digest` when orjson encodes ``value``, else None.

    None also means "maybe not Unicode": orjson refuses a lone surrogate in any
    string or key, so a value it encodes needs no surrogate walk.
    """
    try:
        return hashlib.sha256(orjson.dumps(value, option=_SORTED)).hexdigest()
    except (orjson.JSONEncodeError, TypeError):
        return None


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether ``value``'s lists and objects nest deeper than ``limit`` (walked without recursion)."""
    return _first_problem(value, limit, numbers=False) == "deep"


# An integer JSON text may hold and Python prints back: past this many bits (about 4,000
# digits) ``str()`` refuses it (``sys.set_int_max_str_digits``), and the records could not
# be written.
_MAX_INT_BITS = 13_000


def unrecordable(arguments: Any, limit: int = MAX_NESTING) -> tuple[str, str] | None:
    """Why ``arguments`` cannot be a call's arguments as JSON holds them, as (field, message),
    or None: nested deeper than ``limit``, holding a number JSON has no spelling for
    (NaN, ±Infinity: every bound compares false with NaN, and the event log would record
    ``null`` for what the tool was given), an integer too long to print, a key that is not a
    string (recorded as one: the record named another key than the tool got) or a value
    JSON has no type for (``bytes``, a ``Path``, a set: a host's own values, which raised
    ``TypeError`` out of ``invoke`` unrecorded)."""
    problem = _first_problem(arguments, limit, numbers=True)
    if problem is None:
        return None
    if problem == "deep":
        return "arguments", f"the arguments nest deeper than {limit} levels"
    return _not_json(arguments)


def _first_problem(value: Any, limit: int, *, numbers: bool) -> str | None:
    """``"deep"`` (nested past ``limit``), ``"value"`` (with ``numbers``: a non-finite
    float, an integer past :data:`_MAX_INT_BITS`, a key that is not a string, a value of a
    type JSON lacks) or None: one walk, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if node is None or isinstance(node, str | bool):
            continue
        if isinstance(node, float):
            if numbers and not math.isfinite(node):
                return "value"
            continue
        if isinstance(node, int):
            if numbers and node.bit_length() > _MAX_INT_BITS:
                return "value"
            continue
        if isinstance(node, Mapping):
            if numbers and not all(isinstance(k, str) for k in node):
                return "value"
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            if numbers:
                return "value"
            continue
        if depth >= limit:
            return "deep"
        stack.extend((child, depth + 1) for child in children)
    return None


def _not_json(arguments: Any) -> tuple[str, str]:
    """The dotted path (``a.b[2]``) of the first value in ``arguments`` JSON cannot hold
    (which holds one, and nests within the bound), and why."""
    stack: list[tuple[Any, str]] = [(arguments, "")]
    while stack:
        node, where = stack.pop()
        here = where or "arguments"
        if node is None or isinstance(node, str | bool):
            continue
        if isinstance(node, float):
            if not math.isfinite(node):
                return here, f"{here} is {node!r}, which is not a JSON number"
        elif isinstance(node, int):
            if node.bit_length() > _MAX_INT_BITS:
                return here, f"{here} is an integer of more than 3,900 digits"
        elif isinstance(node, Mapping):
            for k in node:
                if not isinstance(k, str):
                    return here, f"{here} has the key {k!r}, which is not a string (JSON's are)"
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
        else:
            return here, f"{here} is a {type(node).__name__}, which JSON cannot hold"
    return "arguments", "the arguments hold a value JSON cannot hold"
