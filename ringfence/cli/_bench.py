"""``ringfence bench``: the sandbox-overhead suite (``ringfence.bench``), installed or from source.

The suite ships in the package, so an installed ringfence runs it; scenarios
that need servers from the source tree skip with the reason when there is
none. This module only parses options and prints: selection, the run and the
table belong to :mod:`ringfence.bench`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runtime._errors import InvalidArguments, ToolError
from ..runtime._files import atomic_write
from ._output import check_output_file, print_error, print_ok, progress_lines
from ._verbs import add_verb_parser

_DESCRIPTION = (
    "Measure ringfence against the plainest way to do the same thing, in the same run, "
    "interleaved; every row prints its goal. A scenario whose prerequisite is missing "
    "(Docker, ripgrep, Node, or a server from ringfence's source tree when it runs "
    "installed) is listed as skipped with the reason. Exit 1 if a scenario crashed; "
    "missing a goal is a result, not an error. The suite is the package ringfence.bench; "
    "from a checkout, `python -m benchmarks` runs the same command."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "bench", description=_DESCRIPTION)
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="scenarios to run, by name (default all; --list names them)",
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
    p.add_argument(
        "--list", action="store_true", help="list the scenarios and their goals, run nothing"
    )
    p.add_argument(
        "--peers",
        action="store_true",
        help="run the peer scenarios instead: ringfence beside the reference MCP filesystem "
        "server, llm-sandbox, smolagents and srt (those not installed are listed as skipped; "
        "the 'peers' extra installs the Python ones)",
    )
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from .. import bench  # the suite: loaded only when this verb runs

    # Before a run of minutes, not after it: where the results go must be writable.
    check_output_file(args.output, "--output")
    check_output_file(args.plot, "--plot")

    if args.list:
        scenarios = bench.all_scenarios(peers=args.peers)
        if args.json:
            listing = [{"name": s.name, "title": s.title, "goal": s.goal} for s in scenarios]
            return print_ok(listing, True)
        width = max(len(s.name) for s in scenarios)
        for s in scenarios:
            sys.stdout.write(f"{s.name:<{width}}  {s.title}  (goal: {s.goal})\n")
        return 0
    try:
        chosen = bench.select_scenarios(
            args.scenarios, peers=args.peers, engine=args.settings.bench_engine
        )
    except KeyError as exc:
        raise InvalidArguments(f"unknown scenario(s): {exc.args[0]}", field="SCENARIO") from None
    if args.plot:
        bench.require_matplotlib()

    with progress_lines(f"bench: {len(chosen)} scenario(s)") as progress:
        result = await bench.run_suite(chosen, quick=args.quick, progress=progress)
    # With --json the table goes to stderr: stdout holds the one JSON object.
    table = sys.stderr if args.json else sys.stdout
    table.write(bench.render_table(result) + "\n")
    table.write(f"({result.seconds:.1f} s)\n")
    if args.output:
        atomic_write(Path(args.output), result.dumps().encode() + b"\n", mode=0o644)
    if args.plot:
        bench.plot(result, Path(args.plot))
        table.write(f"chart written to {args.plot}\n")
    if args.json:
        data = result.to_json()
        if result.failed:
            failed = ", ".join(sorted(result.failed))
            return print_error(ToolError(f"scenario(s) failed: {failed}", results=data), True)
        return print_ok(data, True)
    return 1 if result.failed else 0
