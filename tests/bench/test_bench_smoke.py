"""``ringfence bench`` produces well-formed results (never asserts timings: those live in benchmarks/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ringfence", "bench", *args],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_quick_run_writes_well_formed_json(tmp_path: Path) -> None:
    # No ripgrep on PATH and no daemon at DOCKER_HOST: both scenarios must be reported as
    # skipped with the reason, not dropped.
    env = {
        **os.environ,
        "PATH": str(tmp_path / "empty-bin"),
        "DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}",
        "TMPDIR": str(tmp_path),
    }
    out = tmp_path / "bench.json"
    proc = bench(
        "gate",
        "workspace-open",
        "workspace-grep",
        "backends-docker",
        "--quick",
        "--output",
        str(out),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["ringfence_bench"] == 1
    assert data["quick"] is True
    assert data["failed"] == {}
    assert data["seconds"] > 0
    assert set(data["machine"]) == {"python", "system", "cpus", "scratch"}
    # where the scenarios' files were: the scratch directory and its file system's type
    scratch = data["machine"]["scratch"]
    assert scratch.startswith(f"{os.path.realpath(tmp_path)}: "), scratch
    assert f"scratch files (TMPDIR): {scratch}" in proc.stdout

    rows = data["rows"]
    assert {r["scenario"] for r in rows} == {"gate", "workspace-open"}
    for row in rows:
        assert row["label"] and isinstance(row["label"], str)
        assert isinstance(row["goal"], str) and row["goal"]
        assert row["goal_met"] in (True, False, None)
        assert row["subject"]["median_s"] > 0
        assert row["subject"]["p99_s"] >= row["subject"]["median_s"]
        assert row["subject"]["samples"] >= 3
        assert row["baseline"]["median_s"] > 0
        assert row["ratio"] == pytest.approx(
            row["subject"]["median_s"] / row["baseline"]["median_s"]
        )
    # every scenario that has a goal reports whether it met it
    assert any(r["goal_met"] is not None for r in rows if r["scenario"] == "gate")
    assert any(r["goal_met"] is not None for r in rows if r["scenario"] == "workspace-open")

    assert list(data["skipped"]) == ["workspace-grep", "backends-docker"]
    assert "rg" in data["skipped"]["workspace-grep"]
    assert "Docker daemon" in data["skipped"]["backends-docker"]
    assert "no-docker.sock" in data["skipped"]["backends-docker"]

    # the table on stdout carries each goal and names the skipped scenarios with their reasons
    assert "goal" in proc.stdout.splitlines()[0]
    assert "overhead <= 50 µs/call" in proc.stdout
    assert "workspace-grep: skipped (ripgrep (rg) is not on PATH" in proc.stdout
    # progress goes to stderr, one line per scenario
    assert "[1/4] gate" in proc.stderr and "[4/4] backends-docker" in proc.stderr


def test_list_names_every_scenario_with_its_goal() -> None:
    proc = bench("--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    for expected in (
        "gate",
        "workspace-open",
        "workspace-grep",
        "backends-local",
        "backends-docker",
        "mcp-everything",
        "mcp-peer",
        "mcp-oauth",
        "bridge-startup",
        "bridge-call-tool",
        "sweep-calls",
        "sweep-concurrency",
    ):
        assert expected in names
    assert all("(goal: " in line for line in lines)


def test_python_m_benchmarks_is_the_same_command() -> None:
    """The developers' shim in a checkout: ``python -m benchmarks …`` is ``ringfence bench …``."""
    shim = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--list"],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shim.returncode == 0, shim.stderr
    assert shim.stdout == bench("--list").stdout


def test_unknown_scenario_is_a_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = bench("gate", "no-such-scenario", "--output", str(out))
    assert proc.returncode == 2
    assert "no-such-scenario" in proc.stdout + proc.stderr
    assert not out.exists()  # nothing ran


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    chart = tmp_path / "chart.png"
    proc = bench("workspace-open", "--quick", "--plot", str(chart))
    assert proc.returncode == 0, proc.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_from_a_checkout_the_suite_finds_its_source_tree() -> None:
    """In a checkout the source-tree scenarios run (their files are found, not skipped)."""
    from ringfence.bench import SOURCE_TREE, Skip
    from ringfence.bench._source import source_file

    assert SOURCE_TREE == CHECKOUT
    peer = source_file("tests/mcp_host/servers/annotated.py", what="the SDK test peer")
    assert peer == CHECKOUT / "tests/mcp_host/servers/annotated.py"
    with pytest.raises(Skip, match=r"no-such-server\.py is missing \(make npm-servers\)"):
        source_file("tests/no-such-server.py", what="x", fix="make npm-servers")
