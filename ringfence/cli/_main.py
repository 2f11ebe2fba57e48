"""Argument parsing and dispatch. Each verb lives in its own module with ``register(sub)``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

import trio

from .. import __version__
from . import (
    _bench,
    _call,
    _checkpoints,
    _doctor,
    _events,
    _images,
    _mcp,
    _plan,
    _policy,
    _run_script,
    _serve,
    _tools,
    _worktree,
)
from ._output import (
    EXIT_CODES_HELP,
    UsageError,
    debug_enabled,
    error_from_exception,
    print_error,
    print_usage_error,
)
from ._session import SHUTDOWN_HOOKS

# Each module adds its verbs to the parser; the order here is the order in --help.
VERB_MODULES = [
    _tools,
    _call,
    _run_script,
    _serve,
    _events,
    _plan,
    _checkpoints,
    _worktree,
    _policy,
    _mcp,
    _images,
    _doctor,
    _bench,
]


class Parser(argparse.ArgumentParser):
    """Parse errors raise UsageError (one line, JSON too with --json) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ringfence",
        description="A governed, sandboxed tool-execution runtime for AI agents.",
        epilog=EXIT_CODES_HELP + ". RINGFENCE_DEBUG=1 shows the traceback of an unexpected error.",
    )
    parser.add_argument(
        "--version", action="version", version=f"ringfence {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for module in VERB_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verb; the only place that turns exceptions into exit codes and error lines.

    Every exception a verb raises ends here: ringfence errors print as
    themselves, anything else as a one-line ``tool_error`` (exit 1) unless
    ``RINGFENCE_DEBUG=1``, which re-raises it with its traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # Before parsing succeeds there is no namespace to ask: a parse error honours --json too.
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return print_usage_error(str(exc), as_json)
    as_json = getattr(args, "json", False) is True
    try:
        try:
            code = trio.run(args.func, args)
        finally:
            _run_shutdown_hooks()
    except UsageError as exc:
        return print_usage_error(str(exc), as_json)
    except KeyboardInterrupt:
        sys.stderr.write("ringfence: interrupted\n")
        return 130
    except Exception as exc:  # the CLI's one boundary for every verb
        if debug_enabled():
            raise
        return print_error(error_from_exception(exc), as_json)
    return int(code or 0)


def _run_shutdown_hooks() -> None:
    """Flush what a verb set up to outlive its kernel (OTLP export), once."""
    while SHUTDOWN_HOOKS:
        SHUTDOWN_HOOKS.pop()()


if __name__ == "__main__":
    sys.exit(main())
