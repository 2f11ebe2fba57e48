"""The chart: overhead ratios per scenario, and the scaling sweep when present."""

from __future__ import annotations

from pathlib import Path

from ringfence.runtime import Unavailable

from ._suite import SuiteResult


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise Unavailable(
            "--plot needs matplotlib: pip install 'ringfence[plot]' (or .venv/bin/pip install matplotlib)"
        ) from None


def plot(result: SuiteResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [r for r in result.rows if r.ratio is not None and not r.notes.get("sweep")]
    sweep = [r for r in result.rows if r.notes.get("sweep")]
    panels = 2 if sweep else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, max(3.5, 0.45 * len(ratios) + 1.5)))
    axes = axes if panels > 1 else [axes]
    ax = axes[0]
    labels = [f"{r.scenario}: {r.label}" for r in ratios]
    values = [r.ratio for r in ratios]
    colors = [
        "tab:green" if r.goal_met else "tab:red" if r.goal_met is False else "tab:gray"
        for r in ratios
    ]
    ax.barh(labels, values, color=colors)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("median time / baseline median (log scale; green = goal met)")
    ax.set_title("ringfence overhead vs baseline, same run")
    ax.invert_yaxis()
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f}x", va="center", fontsize=8)
    if sweep:
        ax2 = axes[1]
        series: dict[str, list[tuple[float, float]]] = {}
        for r in sweep:
            series.setdefault(r.notes["series"], []).append((r.notes["x"], r.subject.median))
        for name, points in series.items():
            points.sort()
            ax2.plot([p[0] for p in points], [p[1] * 1e3 for p in points], marker="o", label=name)
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xlabel("work per run (calls per script / concurrent scripts)")
        ax2.set_ylabel("wall time (ms)")
        ax2.set_title("scaling sweep")
        ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
