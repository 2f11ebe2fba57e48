"""Argument parsing and dispatch. Each verb lives in its own module with ``register(sub)``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import trio

from ..runtime import RingfenceError
from . import (
    _bench,
    _call,
    _doctor,
    _events,
    _images,
    _mcp,
    _plan,
    _policy,
    _run_script,
    _serve,
    _tools,
)
from ._output import EXIT_USAGE, UsageError, print_error

# Each module adds its verbs to the parser; the order here is the order in --help.
VERB_MODULES = [
    _tools,
    _call,
    _run_script,
    _serve,
    _events,
    _plan,
    _policy,
    _mcp,
    _images,
    _doctor,
    _bench,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringfence",
        description="A governed, sandboxed tool-execution runtime for AI agents.",
    )
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for module in VERB_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = trio.run(args.func, args)
    except UsageError as exc:
        sys.stderr.write(f"ringfence: {exc}\n")
        return EXIT_USAGE
    except RingfenceError as exc:
        return print_error(exc, getattr(args, "json", False))
    except KeyboardInterrupt:
        sys.stderr.write("ringfence: interrupted\n")
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
