"""``ringfence events verify FILE``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runtime import NotFound, verify_file
from ._output import EXIT_TOOL_ERROR, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("events", help="work with event streams")
    esub = p.add_subparsers(dest="events_verb", required=True, metavar="ACTION")
    v = esub.add_parser("verify", help="check an event file's hash chain and seals")
    v.add_argument("file")
    v.add_argument(
        "--public-key", metavar="PEM_FILE", help="pin the session key to check seals with"
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=run_verify)


async def run_verify(args: argparse.Namespace) -> int:
    if not Path(args.file).is_file():
        raise NotFound(f"no event file at {args.file}", field="file")
    pem = Path(args.public_key).read_text() if args.public_key else None
    report = verify_file(args.file, pem)
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "records": report.records,
                "sealed_sessions": report.sealed_sessions,
                "unsealed_sessions": report.unsealed_sessions,
                "problems": list(report.problems),
            }
        )
    else:
        for problem in report.problems:
            sys.stdout.write(f"{problem}\n")
        verdict = "intact" if report.ok else "TAMPERED"
        sys.stdout.write(
            f"{args.file}: {verdict}: {report.records} records, "
            f"{report.sealed_sessions} sealed session(s), {report.unsealed_sessions} unsealed\n"
        )
    return 0 if report.ok else EXIT_TOOL_ERROR
