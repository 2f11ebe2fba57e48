"""``ringfence bench engine-remote`` without an engine is skipped with how to get one."""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_bench_smoke import bench


def test_engine_remote_without_an_engine_is_skipped_with_the_reason(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RINGFENCE_BENCH_ENGINE"}
    out = tmp_path / "bench.json"
    proc = bench("engine-remote", "--quick", "--output", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["rows"] == []
    assert "RINGFENCE_BENCH_ENGINE" in data["skipped"]["engine-remote"]
    assert "engine-remote: skipped" in proc.stdout


def test_engine_remote_is_listed_with_its_goals() -> None:
    proc = bench("--list")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("engine-remote"))
    assert "2x local docker" in line and "2x docker cp" in line
