"""``ringfence bench --peers``: ringfence side by side with the tools a user would pick instead.

Each peer scenario measures the peer and ringfence in the same run and, where
the peer has a security boundary, runs the same attacks against both and
records what happened (refused or not, and any effect on disk), not only how
long it took. A peer that cannot run here raises :class:`~ringfence.bench.Skip`
with the reason (not installed, no daemon), so the table lists it as skipped.

Peers: the reference MCP filesystem server (``tests/npm``, ``make npm-servers``)
runs here; llm-sandbox and smolagents need the ``peers`` extra
(``pip install -e '.[peers]'``); Anthropic's ``srt`` is pinned in ``tests/npm`` and
needs ``bubblewrap`` and ``socat``.
"""

from __future__ import annotations

from .._suite import Scenario
from . import filesystem, llm_sandbox, smolagents, srt

SCENARIOS: list[Scenario] = [
    filesystem.SCENARIO,
    srt.SCENARIO,
    llm_sandbox.SCENARIO,
    smolagents.SCENARIO,
    smolagents.DOCKER_SCENARIO,
]


def by_name(names: list[str]) -> list[Scenario]:
    known = {s.name: s for s in SCENARIOS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [known[n] for n in names] if names else list(SCENARIOS)
