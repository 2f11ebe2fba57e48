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
