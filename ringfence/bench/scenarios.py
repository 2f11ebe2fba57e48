"""The registry of scenarios, in the order the table shows them."""

from __future__ import annotations

from . import (
    backends,
    bridge,
    changesets,
    docker_scripts,
    engines,
    execchecks,
    gate,
    gitscan,
    hooks,
    journal,
    latency,
    mcp_host,
    mcp_oauth,
    policy,
    pool,
    providers,
    remote,
    serve_start,
    workspace,
)
from ._suite import Scenario


def build(engine: str | None = None) -> list[Scenario]:
    """Every scenario; ``engine``: the remote-engine scenario's JSON engine table."""
    return [
        gate.SCENARIO,
        providers.SCENARIO,
        *workspace.SCENARIOS,
        *changesets.SCENARIOS,
        *journal.SCENARIOS,
        *backends.SCENARIOS,
        *execchecks.SCENARIOS,
        *engines.SCENARIOS,
        *remote.scenarios(engine),
        *pool.SCENARIOS,
        policy.SCENARIO,
        hooks.SCENARIO,
        *gitscan.SCENARIOS,
        *mcp_host.SCENARIOS,
        *mcp_oauth.SCENARIOS,
        *bridge.SCENARIOS,
        *docker_scripts.SCENARIOS,
        *latency.SCENARIOS,
        serve_start.SCENARIO,
    ]


SCENARIOS: list[Scenario] = build()


def by_name(names: list[str], engine: str | None = None) -> list[Scenario]:
    scenarios = build(engine)
    known = {s.name: s for s in scenarios}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [known[n] for n in names] if names else scenarios
