"""``ringfence tools list``."""

from __future__ import annotations

import argparse
import sys

from ._output import print_json
from ._session import add_session_options, kernel_from_args


def register(sub: argparse._SubParsersAction) -> None:
    tools = sub.add_parser("tools", help="list the tools a session would have")
    tsub = tools.add_subparsers(dest="tools_verb", required=True, metavar="ACTION")
    lst = tsub.add_parser("list", help="list tools with their consequence")
    add_session_options(lst, dry_run=False)
    lst.set_defaults(func=run_list)


async def run_list(args: argparse.Namespace) -> int:
    async with kernel_from_args(args) as kernel:
        specs = kernel.tools()
        if args.json:
            print_json(
                [
                    {
                        "name": s.name,
                        "description": s.description,
                        "consequence": s.consequence.value,
                        "residual": s.residual,
                        "source": s.source,
                        "input_schema": dict(s.input_schema),
                    }
                    for s in specs
                ]
            )
            return 0
        width = max((len(s.name) for s in specs), default=4)
        for s in specs:
            flag = " (asks first)" if s.residual else ""
            first = s.description.strip().splitlines()[0] if s.description.strip() else ""
            sys.stdout.write(f"{s.name:<{width}}  {s.consequence.value:<12} {first}{flag}\n")
        return 0
