"""Canonical JSON: the one byte form that digests, intents, grants, plans and events agree on."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = [
    "MAX_NESTING",
    "arguments_digest",
    "canonical_json",
    "digest",
    "nests_deeper",
    "orjson_digest",
]

# Arguments nest at most this deep (JSON objects and arrays); deeper is refused before the
# Gate, whose validation, redaction and records walk them recursively.
MAX_NESTING = 100

# One encoder for the process: building a JSONEncoder per call costs more than encoding.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


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
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
