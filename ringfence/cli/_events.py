"""``ringfence events verify FILE``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runtime import InvalidArguments, NotFound, verify_file
from ._output import EXIT_TOOL_ERROR, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("events", help="work with event streams")
    esub = p.add_subparsers(dest="events_verb", required=True, metavar="ACTION")
    v = esub.add_parser(
        "verify",
        help="check an event file's hash chain, signed intents and seals",
        description="Exit 0 only when every line, call and session checks out. "
        "An unsealed session fails unless --allow-open.",
    )
    v.add_argument("file")
    v.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="PEM_FILE",
        help="pin session keys: every session in FILE must use one of the keys in PEM_FILE "
        "(repeatable; a file may hold several PEM keys, e.g. one per run appended to FILE)",
    )
    v.add_argument(
        "--allow-open",
        action="store_true",
        help="accept an unsealed last session (a log still being written)",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=run_verify)


def _read_keys(paths: list[str]) -> list[str] | None:
    if not paths:
        return None
    texts = []
    for path in paths:
        try:
            texts.append(Path(path).read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArguments(
                f"cannot read the public key file {path}: {exc}", field="--public-key"
            ) from None
    return texts


async def run_verify(args: argparse.Namespace) -> int:
    if not Path(args.file).is_file():
        raise NotFound(f"no event file at {args.file}", field="file")
    keys = _read_keys(args.public_key)
    try:
        report = verify_file(args.file, keys, allow_open=args.allow_open)
    except ValueError as exc:
        raise InvalidArguments(f"--public-key: {exc}", field="--public-key") from None
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "records": report.records,
                "sealed_sessions": report.sealed_sessions,
                "unsealed_sessions": report.unsealed_sessions,
                "session_keys": list(report.session_keys),
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
