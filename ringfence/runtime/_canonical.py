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


def unrecordable(arguments: Any, limit: int = MAX_NESTING) -> tuple[str, str] | None:
    """Why ``arguments`` cannot be a call's arguments as JSON holds them, as (field, message),
    or None: nested deeper than ``limit``, or holding a number JSON has no spelling for
    (NaN, ±Infinity: every bound compares false with NaN, and the event log would record
    ``null`` for what the tool was given)."""
    problem = _first_problem(arguments, limit, numbers=True)
    if problem is None:
        return None
    if problem == "deep":
        return "arguments", f"the arguments nest deeper than {limit} levels"
    where, number = _non_finite(arguments)
    return where, f"{where} is {number!r}, which is not a JSON number"


def _first_problem(value: Any, limit: int, *, numbers: bool) -> str | None:
    """``"deep"`` (nested past ``limit``), ``"number"`` (a non-finite float, when
    ``numbers``) or None: one walk, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, float):
            if numbers and not math.isfinite(node):
                return "number"
            continue
        if isinstance(node, Mapping):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= limit:
            return "deep"
        stack.extend((child, depth + 1) for child in children)
    return None


def _non_finite(arguments: Any) -> tuple[str, float]:
    """The dotted path (``a.b[2]``) and value of a non-finite float in ``arguments`` (which
    holds one, and nests within the bound)."""
    stack: list[tuple[Any, str]] = [(arguments, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return where or "arguments", node
        if isinstance(node, Mapping):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return "arguments", math.nan
