"""ringfence's overhead benchmarks, behind ``ringfence bench``.

Each scenario measures ringfence against a baseline in the same run,
interleaved (``_harness``), and returns rows with their goals (``_suite``).
The suite ships in the package, so an installed ringfence runs it; the few
scenarios that need servers from the source tree (``tests/npm``,
``tests/mcp_host/servers``) skip with the reason when there is none
(``_source``). The scenario modules are named after what they measure
(``gate``, ``workspace``, ``latency``, …); ``scenarios`` lists them in table
order, ``peers`` holds ``ringfence bench --peers``.

Promised: importing this package loads the harness and the result types
only (trio, ``ringfence.runtime``); the scenario modules, with the MCP SDK
and the clients they measure, load in :func:`all_scenarios` and
:func:`select_scenarios`. This package imports no ``ringfence.cli`` (the CLI
imports it). Results and charts are documented in the repository's
``benchmarks/README.md``.
"""

from __future__ import annotations

from ._plot import plot as plot, require_matplotlib as require_matplotlib
from ._source import SOURCE_TREE as SOURCE_TREE
from ._suite import (
    Row as Row,
    Scenario as Scenario,
    Skip as Skip,
    SuiteResult as SuiteResult,
    render_table as render_table,
    run_suite as run_suite,
)

__all__ = [
    "SOURCE_TREE",
    "Row",
    "Scenario",
    "Skip",
    "SuiteResult",
    "all_scenarios",
    "plot",
    "render_table",
    "require_matplotlib",
    "run_suite",
    "select_scenarios",
]


def all_scenarios(*, peers: bool = False) -> list[Scenario]:
    """Every scenario of the suite (or of the peer suite), in the order the table shows them."""
    if peers:
        from .peers import SCENARIOS
    else:
        from .scenarios import SCENARIOS
    return list(SCENARIOS)


def select_scenarios(
    names: list[str], *, peers: bool = False, engine: str | None = None
) -> list[Scenario]:
    """The scenarios called ``names``, in that order (all of them for no names).

    ``engine``: the remote-engine scenario's JSON engine table (the command line's
    ``RINGFENCE_BENCH_ENGINE``); without it that scenario is skipped.

    Raises ``KeyError`` whose one argument lists the unknown names, comma-separated.
    """
    if peers:
        from .peers import by_name

        return by_name(names)
    from .scenarios import by_name as suite_by_name

    return suite_by_name(names, engine)
