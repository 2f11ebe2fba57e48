"""``ringfence doctor``: which backends can run here, and why not, one line per check."""

from __future__ import annotations

import argparse
import sys

import trio

from ..backends import backend_names, select_backend
from ..runtime import Unavailable
from ._output import print_error, print_ok, print_table


def register(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check what can run here (Docker, images, namespaces, Landlock, seccomp, ripgrep)",
    )
    doctor.add_argument(
        "--backend",
        choices=backend_names(),
        default=None,
        help="exit 1 unless this backend can run (default $RINGFENCE_EXECUTION_BACKEND or local)",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from ..backends._doctor import backend_status, run_checks

    backend = select_backend(args.backend)
    checks = await trio.to_thread.run_sync(run_checks)
    usable = {name: backend_status(checks, name) for name in backend_names()}
    if args.json:
        report = {
            "checks": [c.to_dict() for c in checks],
            "backends": {n: ok for n, (ok, _) in usable.items()},
        }
        ok, failed = usable[backend]
        if ok:
            return print_ok(report, True)
        missing = "; ".join(c.name for c in failed)
        error = Unavailable(f"backend {backend} cannot run here ({missing})", **report)
        print_error(error, True)
        return 1
    rows = [
        (
            "ok " if c.ok else "no ",
            c.name,
            c.detail + (f"  → {c.fix}" if c.fix and not c.ok else ""),
        )
        for c in checks
    ]
    print_table(None, rows)
    for name, (ok, failed) in usable.items():
        why = "" if ok else " (" + "; ".join(c.name for c in failed) + ")"
        mark = " [selected]" if name == backend else ""
        sys.stdout.write(f"backend {name}: {'can run' if ok else 'cannot run'}{why}{mark}\n")
    return 0 if usable[backend][0] else 1
