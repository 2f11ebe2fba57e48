"""Runtime test helpers: the shared tools (``kernel_helpers``), the ledger fixture, a forger."""

from __future__ import annotations

from typing import Any

import pytest
from kernel_helpers import SCHEMA, Ledger, make_tool, register_standard_tools

__all__ = ["SCHEMA", "Ledger", "ledger", "make_tool", "rechain", "register_standard_tools"]


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def rechain(records: list[dict[str, Any]]) -> bytes:
    """What a forger who knows the chain algorithm writes: records re-hashed and re-linked.

    Each line is the canonical form with ``prev`` set to the line before and the
    hash appended, byte for byte as the kernel's writer lays it out, so only
    the signatures (intents, seals) and pinned keys can tell.
    """
    import hashlib

    from ringfence.runtime._canonical import canonical_json
    from ringfence.runtime._events import GENESIS

    prev = GENESIS
    out = b""
    for record in records:
        body = canonical_json({**{k: v for k, v in record.items() if k != "hash"}, "prev": prev})
        prev = hashlib.sha256(body).hexdigest()
        out += body[:-1] + f',"hash":"{prev}"}}\n'.encode()
    return out
