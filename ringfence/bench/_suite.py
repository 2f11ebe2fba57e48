"""The benchmark suite: scenarios, their goals, and the result table.

A scenario measures ringfence against a baseline in the same run,
interleaved, and returns one or more :class:`Row` values. A scenario whose
prerequisite is missing raises :class:`Skip` with the reason; the suite
reports it as skipped, never drops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..runtime._files import use_places
from ._harness import Samples, format_seconds

__all__ = ["Row", "Scenario", "Skip", "SuiteResult", "render_table", "run_suite"]


class Skip(Exception):
    """A prerequisite is missing; the message says which and how to get it."""


@dataclass(frozen=True)
class Row:
    """One line of the table: a subject measured against a baseline.

    ``goal_met`` is None for an informational row (no goal of its own).
    ``notes`` are written to the JSON as they are; ``notes["note"]`` (a short
    sentence: what was scaled down in quick mode, where the time goes) is also
    printed under the table as a footnote. Rows of a scaling sweep carry
    ``notes["sweep"] = True``, ``notes["series"]``, ``notes["x"]`` and
    ``notes["panel"]`` (the x axis they share) for the chart.
    """

    scenario: str
    label: str
    subject: Samples
    baseline: Samples | None
    goal: str
    goal_met: bool | None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline is None:
            return None
        return self.subject.median / self.baseline.median

    def to_json(self) -> dict[str, Any]:
        def stats(s: Samples | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"name": s.name, "median_s": s.median, "p99_s": s.p99, "samples": len(s.per_op)}

        return {
            "scenario": self.scenario,
            "label": self.label,
            "subject": stats(self.subject),
            "baseline": stats(self.baseline),
            "ratio": self.ratio,
            "goal": self.goal,
            "goal_met": self.goal_met,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    goal: str
    run: Callable[[bool], Awaitable[list[Row]]]


@dataclass
class SuiteResult:
    quick: bool = False
    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    seconds: float = 0.0
    scratch: str = field(default_factory=lambda: scratch_file_system())

    def to_json(self) -> dict[str, Any]:
        return {
            "ringfence_bench": 1,
            "started_at": self.started_at,
            "seconds": self.seconds,
            "quick": self.quick,
            "machine": {
                "python": platform.python_version(),
                "system": platform.platform(),
                "cpus": os.cpu_count(),
                "scratch": self.scratch,
            },
            "rows": [r.to_json() for r in self.rows],
            "skipped": self.skipped,
            "failed": self.failed,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


async def run_suite(
    scenarios: Sequence[Scenario],
    *,
    quick: bool,
    progress: Callable[[str], None] = lambda _m: None,
) -> SuiteResult:
    result = SuiteResult(quick=quick)
    start = time.perf_counter()
    with _scratch_home():
        await _run_each(scenarios, quick, progress, result)
    result.seconds = time.perf_counter() - start
    return result


@contextlib.contextmanager
def _scratch_home() -> Iterator[None]:
    """A throwaway home for the run: no benchmark kernel touches the operator's (in this
    process ``use_places``; in the command-line children it starts, ``RINGFENCE_HOME``)."""
    saved = os.environ.get("RINGFENCE_HOME")
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-home-") as home:
        os.environ["RINGFENCE_HOME"] = home
        try:
            with use_places(home=home):
                yield
        finally:
            if saved is None:
                os.environ.pop("RINGFENCE_HOME", None)
            else:
                os.environ["RINGFENCE_HOME"] = saved


async def _run_each(
    scenarios: Sequence[Scenario],
    quick: bool,
    progress: Callable[[str], None],
    result: SuiteResult,
) -> None:
    for i, scenario in enumerate(scenarios, 1):
        progress(f"[{i}/{len(scenarios)}] {scenario.name}: {scenario.title} …")
        t0 = time.perf_counter()
        try:
            rows = await scenario.run(quick)
        except Skip as skip:
            result.skipped[scenario.name] = str(skip)
            progress(f"    skipped: {skip}")
            continue
        except Exception as exc:  # one broken scenario must not hide the others' numbers
            result.failed[scenario.name] = f"{type(exc).__name__}: {exc}"
            progress(f"    FAILED: {type(exc).__name__}: {exc}")
            continue
        result.rows.extend(rows)
        progress(f"    done in {time.perf_counter() - t0:.1f} s")


def render_table(result: SuiteResult) -> str:
    header = ("scenario", "measurement", "median", "p99", "baseline", "ratio", "goal", "met")
    lines = [header]
    footnotes: list[str] = []
    for r in result.rows:
        label = r.label
        if r.notes.get("note"):
            footnotes.append(f"[{len(footnotes) + 1}] {r.notes['note']}")
            label = f"{label} [{len(footnotes)}]"
        lines.append(
            (
                r.scenario,
                label,
                format_seconds(r.subject.median),
                format_seconds(r.subject.p99),
                format_seconds(r.baseline.median) if r.baseline else "-",
                f"{r.ratio:.2f}x" if r.ratio is not None else "-",
                r.goal,
                {True: "yes", False: "NO", None: "-"}[r.goal_met],
            )
        )
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(header))]
    out: list[str] = []
    for n, row in enumerate(lines if result.rows else []):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    if result.rows:
        out.append("median and p99 are per operation; ratio = median / baseline median")
        out.append(f"scratch files (TMPDIR): {result.scratch}")
    out.extend(footnotes)
    for name, reason in result.skipped.items():
        out.append(f"{name}: skipped ({reason})")
    for name, reason in result.failed.items():
        out.append(f"{name}: FAILED ({reason})")
    return "\n".join(out)


def scratch_file_system() -> str:
    """What the run's scratch directory (``TMPDIR``: workspaces, overlays, the scratch home)
    is on, e.g. ``"/tmp: ext4 on /dev/vda, no journal"``.

    The change-set rows create and delete tens of thousands of files, and
    their ratios depend on the file system: on ext4 *without* a journal,
    inode allocation passes over every inode deleted in the last minute
    (six while the inode table's blocks are not yet written back), so creating
    files after a mass delete can be ten times slower, in both arms alike
    (benchmarks/README.md). Linux only; elsewhere the path alone.
    """
    from ..backends._mounts import mount_of

    path = os.path.realpath(tempfile.gettempdir())
    mount = mount_of(path)
    if mount is None:
        return path
    described = f"{path}: {mount.fstype} on {mount.source}"
    if mount.fstype == "ext4":
        try:
            name = os.path.basename(mount.source)
            with open(f"/proc/fs/ext4/{name}/options", encoding="utf-8") as f:
                journaled = any(o.startswith("data=") for o in f.read().split())
            described += "" if journaled else ", no journal"
        except OSError:
            pass
    return described
