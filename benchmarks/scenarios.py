"""The registry of scenarios, in the order the table shows them."""

from __future__ import annotations

from . import gate
from ._suite import Scenario

SCENARIOS: list[Scenario] = [gate.SCENARIO]


def by_name(names: list[str]) -> list[Scenario]:
    known = {s.name: s for s in SCENARIOS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [known[n] for n in names] if names else list(SCENARIOS)
