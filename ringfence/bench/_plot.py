"""The chart: overhead ratios per scenario on top, one panel per scaling sweep below."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from ringfence.runtime._errors import Unavailable

from ._harness import format_seconds
from ._suite import Row, SuiteResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise Unavailable(
            "--plot needs matplotlib: pip install 'ringfence[plot]' (or .venv/bin/pip install matplotlib)"
        ) from None


def plot(result: SuiteResult, path: Path) -> None:
    """Write the chart to ``path`` (PNG). Needs matplotlib (:func:`require_matplotlib`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [r for r in result.rows if r.ratio is not None and not r.notes.get("sweep")]
    panels: dict[str, list[Row]] = {}
    for r in result.rows:
        if r.notes.get("sweep"):
            panels.setdefault(str(r.notes.get("panel", "work per run")), []).append(r)
    top_height = max(2.5, 0.32 * len(ratios) + 1.2)
    fig = plt.figure(figsize=(13, top_height + (4.2 if panels else 0)))
    grid = fig.add_gridspec(
        2 if panels else 1,
        max(1, len(panels)),
        height_ratios=[top_height, 4.2] if panels else [1],
    )
    ax = fig.add_subplot(grid[0, :])
    _ratios(ax, ratios, result.quick)
    for i, (panel, rows) in enumerate(panels.items()):
        _sweep(fig.add_subplot(grid[1, i]), panel, rows)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    # A flat chart needs few colours: a palette PNG is a quarter of the size (it is committed).
    from PIL import Image  # matplotlib's own dependency

    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=64).save(path, format="PNG", optimize=True)


def _ratios(ax: Axes, rows: list[Row], quick: bool) -> None:
    labels = [f"{r.scenario}: {r.label}" for r in rows]
    values = [r.ratio for r in rows]
    colors = [
        "tab:green" if r.goal_met else "tab:red" if r.goal_met is False else "tab:gray"
        for r in rows
    ]
    ax.barh(labels, values, color=colors)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel(
        "median / baseline median, same run (log scale)"
        "   green: goal met · red: goal missed · grey: informational"
    )
    title = "ringfence vs its baseline"
    ax.set_title(title + (" (--quick)" if quick else ""))
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    right = max(values, default=1.0)
    ax.set_xlim(right=right * 80)  # room for the annotations
    for y, r in enumerate(rows):
        ax.text(
            r.ratio,
            y,
            f" {r.ratio:.2f}x  {format_seconds(r.subject.median)}  (goal: {r.goal})",
            va="center",
            fontsize=7,
        )


def _sweep(ax: Axes, panel: str, rows: list[Row]) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    series: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for r in rows:
        x = float(r.notes["x"])
        series.setdefault((str(r.notes["series"]), False), []).append((x, r.subject.median))
        if r.baseline is not None:
            series.setdefault((r.baseline.name, True), []).append((x, r.baseline.median))
    for (name, is_baseline), points in series.items():
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [p[1] * 1e3 for p in points],
            marker="o",
            linestyle="--" if is_baseline else "-",
            label=name,
        )
    xs = sorted({float(r.notes["x"]) for r in rows})
    ys = [p[1] * 1e3 for points in series.values() for p in points]
    # Log axes only where the values span more than a decade or so; 1-8 reads better linear.
    if xs[-1] / xs[0] > 20:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    if max(ys) / min(ys) > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_ylim(bottom=0)
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xlabel(panel)
    ax.set_ylabel("wall time per run (ms)")
    ax.set_title(f"scaling: {panel}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
