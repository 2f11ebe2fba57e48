"""``ringfence plan show|apply FILE``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..runtime import Plan
from ._output import exit_code_for, print_error, print_ok
from ._session import add_session_options, kernel_from_args
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "plan")
    psub = p.add_subparsers(dest="plan_verb", required=True, metavar="ACTION")
    show = psub.add_parser("show", help="print the staged calls")
    show.add_argument("file", metavar="FILE", help="the plan a --dry-run wrote")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=run_show)
    apply = psub.add_parser("apply", help="re-enter every staged call into the Gate")
    apply.add_argument("file", metavar="FILE", help="the plan a --dry-run wrote")
    add_session_options(apply, dry_run=False)
    apply.set_defaults(func=run_apply)


async def run_show(args: argparse.Namespace) -> int:
    plan = Plan.load(Path(args.file))
    if args.json:
        return print_ok(plan.to_json()["calls"], True)
    sys.stdout.write(f"{args.file}: {len(plan.calls)} staged call(s)\n")
    for i, c in enumerate(plan.calls, 1):
        arguments = json.dumps(c.arguments, ensure_ascii=False, sort_keys=True)
        sys.stdout.write(f"{i:3}. {c.tool} [{c.consequence}, via {c.origin}] {arguments}\n")
    return 0


async def run_apply(args: argparse.Namespace) -> int:
    plan = Plan.load(Path(args.file))
    async with kernel_from_args(args) as kernel:
        outcomes = await kernel.apply_plan(plan)
    failed = next((o.error for o in outcomes if o.error is not None), None)
    if args.json:
        report = {
            "applied": [o.to_dict() for o in outcomes],
            "not_attempted": len(plan.calls) - len(outcomes),
        }
        if failed is None:
            return print_ok(report, True)
        failed.details = {**failed.details, **report}  # what ran before the failure
        return print_error(failed, True)
    else:
        for o in outcomes:
            status = "ok" if o.ok else f"{o.error.code}: {o.error.message}"
            sys.stdout.write(f"{o.tool}: {status}\n")
        if len(outcomes) < len(plan.calls):
            sys.stdout.write(f"stopped: {len(plan.calls) - len(outcomes)} call(s) not attempted\n")
    return exit_code_for(failed) if failed else 0
