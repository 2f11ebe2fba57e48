"""Kernel test helpers: small real tools of each consequence that record what ran."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ringfence.runtime import CallContext, Consequence, Kernel, ToolSpec

SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


@dataclass
class Ledger:
    """Every executor run, in order: the proof that something did (or did not) run."""

    runs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.runs]


def make_tool(
    name: str,
    consequence: Consequence,
    ledger: Ledger,
    *,
    residual: bool = False,
    output: str | None = None,
) -> ToolSpec:
    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        ledger.runs.append((name, args))
        return output if output is not None else {"tool": name, "args": args}

    return ToolSpec(
        name, f"test tool {name}", SCHEMA, run, consequence=consequence, residual=residual
    )


def register_standard_tools(kernel: Kernel, ledger: Ledger) -> None:
    kernel.register(make_tool("peek", Consequence.READ, ledger))
    kernel.register(make_tool("touch", Consequence.REVERSIBLE, ledger))
    kernel.register(make_tool("launch", Consequence.IRREVERSIBLE, ledger))
    kernel.register(make_tool("run_shell", Consequence.IRREVERSIBLE, ledger, residual=True))


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

    from ringfence.runtime import GENESIS, canonical_json

    prev = GENESIS
    out = b""
    for record in records:
        body = canonical_json({**{k: v for k, v in record.items() if k != "hash"}, "prev": prev})
        prev = hashlib.sha256(body).hexdigest()
        out += body[:-1] + f',"hash":"{prev}"}}\n'.encode()
    return out
