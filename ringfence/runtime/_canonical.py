"""Canonical JSON: the one byte form that digests, intents, grants, plans and events agree on."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "digest"]

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
