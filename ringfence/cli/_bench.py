"""``ringfence bench``: the sandbox-overhead suite (from a source checkout)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from ..runtime import InvalidArguments, ToolError, Unavailable, atomic_write
from ._output import print_error, print_ok, progress_lines


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure ringfence's overhead against baselines")
    p.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", help="scenarios to run (default all)"
    )
    p.add_argument(
        "--quick", action="store_true", help="fewer rounds: the whole suite in under 2 minutes"
    )
    p.add_argument(
        "--output", metavar="FILE", help="write the machine-readable results to FILE (JSON)"
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (the results) on stdout"
    )
    p.add_argument(
        "--plot", metavar="FILE.png", help="draw a chart (needs the 'plot' extra: matplotlib)"
    )
    p.add_argument("--list", action="store_true", help="list scenarios and their goals")
    p.set_defaults(func=run)


def _benchmarks_package() -> ModuleType:
    """The suite lives in the source tree's ``benchmarks/``, next to the ringfence package."""
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "benchmarks" / "scenarios.py").is_file():
        raise Unavailable(
            "ringfence bench runs from a source checkout: no benchmarks/ next to the "
            f"ringfence package in {checkout}; clone the repository and run `make demo` first"
        )
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    return importlib.import_module("benchmarks.scenarios")


async def run(args: argparse.Namespace) -> int:
    scenarios_mod = _benchmarks_package()
    suite = importlib.import_module("benchmarks._suite")
    if args.list:
        if args.json:
            listing = [
                {"name": s.name, "title": s.title, "goal": s.goal} for s in scenarios_mod.SCENARIOS
            ]
            return print_ok(listing, True)
        width = max(len(s.name) for s in scenarios_mod.SCENARIOS)
        for s in scenarios_mod.SCENARIOS:
            sys.stdout.write(f"{s.name:<{width}}  {s.title}  (goal: {s.goal})\n")
        return 0
    try:
        chosen = scenarios_mod.by_name(args.scenarios)
    except KeyError as exc:
        raise InvalidArguments(f"unknown scenario(s): {exc.args[0]}", field="SCENARIO") from None
    plotter = None
    if args.plot:
        plotter = importlib.import_module("benchmarks._plot")
        plotter.require_matplotlib()

    with progress_lines(f"bench: {len(chosen)} scenario(s)") as progress:
        result = await suite.run_suite(chosen, quick=args.quick, progress=progress)
    # With --json the table goes to stderr: stdout holds the one JSON object.
    table = sys.stderr if args.json else sys.stdout
    table.write(suite.render_table(result) + "\n")
    table.write(f"({result.seconds:.1f} s)\n")
    if args.output:
        atomic_write(Path(args.output), result.dumps().encode() + b"\n", mode=0o644)
    if plotter is not None:
        plotter.plot(result, Path(args.plot))
        table.write(f"chart written to {args.plot}\n")
    if args.json:
        data = result.to_json()
        if result.failed:
            failed = ", ".join(sorted(result.failed))
            return print_error(ToolError(f"scenario(s) failed: {failed}", results=data), True)
        return print_ok(data, True)
    return 1 if result.failed else 0
