"""Peers not measured yet: each is listed, and skipped with the reason it cannot run here.

A scenario here checks its prerequisite first, so the reason names what is
missing (the extra, the npm package); once present, the scenario says that
its measurement is still to be written (issue 20, item 4) rather than
pretending to a result.
"""

from __future__ import annotations

import importlib.util

from .._suite import Row, Scenario, Skip


def _needs_module(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise Skip(
            f"{package} is not installed: pip install 'ringfence[peers]' "
            "(in a checkout: pip install -e '.[peers]')"
        )


async def run_llm_sandbox(quick: bool) -> list[Row]:
    _needs_module("llm_sandbox", "llm-sandbox")
    raise Skip(
        "llm-sandbox is installed, but its scenario (warm command, 100 commands, cold "
        "session, close, on ringfence/busybox) is not written yet (issue 20, item 4)"
    )


async def run_smolagents(quick: bool) -> list[Row]:
    _needs_module("smolagents", "smolagents")
    raise Skip(
        "smolagents is installed, but its scenario (LocalPythonExecutor and the Docker "
        "executor, 1/100/1000 tool calls, the escape table) is not written yet "
        "(issue 20, item 4)"
    )


SCENARIOS = [
    Scenario(
        "peer-llm-sandbox", "llm-sandbox vs the docker backend", "informational", run_llm_sandbox
    ),
    Scenario(
        "peer-smolagents",
        "smolagents executors vs run_tool_script",
        "informational",
        run_smolagents,
    ),
]
