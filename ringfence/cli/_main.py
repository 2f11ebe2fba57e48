"""Argument parsing and dispatch. Each verb lives in its own module with ``register(sub)``."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ._settings import Settings
from ._verbs import EXIT_CODES_HELP, VERBS, UsageError, chosen_verb

# The order of VERBS is the order in --help. Only the chosen verb's module is imported
# (with trio, the kernel and what else it needs): `ringfence --help` and `--version` stay
# near the interpreter's own start, and `ringfence call` loads no serve, MCP or bench code.


class Parser(argparse.ArgumentParser):
    """Parse errors raise UsageError (one line, JSON too with --json) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        # The error line already starts "ringfence: "; a subcommand's words follow it.
        where = self.prog.removeprefix("ringfence").strip()
        raise UsageError(f"{where + ': ' if where else ''}{message} (see `{self.prog} --help`)")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser; complete for the verb ``argv`` names, stubs for the others.

    Without ``argv`` every verb's module is loaded and registered (the whole parser,
    for tests and documentation).
    """
    verb = chosen_verb(list(argv)) if argv is not None else None
    parser = Parser(
        prog="ringfence",
        description="A governed, sandboxed tool-execution runtime for AI agents.",
        epilog=EXIT_CODES_HELP + ". RINGFENCE_DEBUG=1 shows the traceback of an unexpected error.",
    )
    parser.add_argument(
        "--version", action="version", version=f"ringfence {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    # A module may register several verbs (checkpoints and undo): load it once, and give
    # none of its verbs a stub.
    wanted = VERBS[verb].module if verb is not None else None
    loaded: set[str] = set()
    for name, spec in VERBS.items():
        if argv is None or spec.module == wanted:
            if spec.module not in loaded:
                importlib.import_module(f"{__package__}.{spec.module}").register(sub)
                loaded.add(spec.module)
        else:
            sub.add_parser(name, help=spec.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verb; the only place that turns exceptions into exit codes and error lines.

    Every exception a verb raises ends here: ringfence errors print as
    themselves, anything else as a one-line ``tool_error`` (exit 1) unless
    ``RINGFENCE_DEBUG=1``, which re-raises it with its traceback.

    Without ``argv`` (the command line: this process ends with the verb) the
    cyclic garbage collector is tuned for a short life, see :func:`_short_lived`,
    and held off while a shell command's change set is captured
    (``create_kernel(pause_collector=True)``); with ``argv`` (a caller's process,
    e.g. tests) it is left alone.

    Everything written to stdout and stderr meanwhile passes the renderer's floor
    (:func:`._guard.guarded_output`): no control, bidi or separator character
    reaches the terminal raw, whichever print path wrote it.
    """
    from ._guard import guarded_output  # light: the standard library until text needs escaping

    with guarded_output():  # nothing a verb prints reaches the terminal raw
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    short_lived = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if short_lived:
        gc.disable()  # until the imports are done (see _short_lived)
    # `serve` over stdio: the client's initialize is answered before the rest loads.
    early = None
    if short_lived and argv[:1] == ["serve"]:
        from ._serve_early import answer_serve_initialize

        early = answer_serve_initialize(argv)
    # Before parsing succeeds there is no namespace to ask: a parse error honours --json too.
    as_json = "--json" in argv
    try:
        args = build_parser(argv).parse_args(argv)
    except UsageError as exc:
        from ._output import print_usage_error

        return print_usage_error(str(exc), as_json)
    if early is not None:
        args.early_initialize = early
    as_json = getattr(args, "json", False) is True
    import trio  # here, not at the top: --help and --version never start a loop

    from ._output import error_from_exception, print_error, print_usage_error

    if short_lived:
        _short_lived()
    # The command's own process: its verb may lend the collector to change-set captures.
    args.owns_process = short_lived
    settings = None
    try:
        try:
            # The one read of the environment's settings; verbs get them as arguments.
            settings = args.settings = Settings.from_env(os.environ)
            settings.apply_defaults(args)
            with settings.places():
                code = trio.run(args.func, args)
            sys.stdout.flush()  # here, so a reader gone (`| head`) is seen below, not at exit
        finally:
            _run_shutdown_hooks()
            if short_lived:
                gc.freeze()  # see _short_lived
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        return _after_closed_stdout()
    except UsageError as exc:
        return print_usage_error(str(exc), as_json)
    except KeyboardInterrupt:
        sys.stderr.write("ringfence: interrupted\n")
        return 130
    except Exception as exc:  # the CLI's one boundary for every verb
        if isinstance(exc, BrokenPipeError) and _stdout_reader_gone():
            return _after_closed_stdout()
        if settings is not None and settings.debug:
            raise
        return print_error(error_from_exception(exc), as_json)
    return int(code or 0)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``ringfence … | head -3``).

    Asked of the descriptor itself (poll reports POLLERR on a pipe without readers), so a
    broken pipe to anything else a verb wrote to is still an error.
    """
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _after_closed_stdout() -> int:
    """The reader took what it wanted: not an error. What is still buffered goes nowhere
    (stdout is pointed at /dev/null, so the interpreter's last flush cannot fail)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 0


def _short_lived() -> None:
    """The collector's settings for a process that runs one verb and exits.

    Everything imported so far (a few hundred modules, ~40 000 objects) lives
    until the process ends: :func:`main` keeps the collector off while the
    imports run (tens of collections that would find nothing), and here moves
    what they made to the permanent generation, so the collections the verb
    still triggers (it runs with the collector on, as any process does) look
    at the verb's own objects only. After the verb, :func:`main` freezes again:
    the interpreter's final collection then skips what would be freed by the
    exit anyway (tens of milliseconds on a command that takes a few hundred).
    Nothing is lost by that: atexit handlers, module teardown and the flushing
    of open files still run; ringfence's files (the event log's descriptor, a
    plan) are closed by the verb itself, not by the collector.
    """
    gc.freeze()
    gc.enable()


def _run_shutdown_hooks() -> None:
    """Flush what a verb set up to outlive its kernel (OTLP export), once."""
    from ._session import SHUTDOWN_HOOKS

    while SHUTDOWN_HOOKS:
        SHUTDOWN_HOOKS.pop()()


if __name__ == "__main__":
    sys.exit(main())
