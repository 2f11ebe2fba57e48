"""``ringfence call TOOL --args JSON|@FILE|-``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

import trio

from ..runtime._errors import InvalidArguments, NotFound, RingfenceError
from ..runtime._groups import raise_single
from ._mcp_session import (
    login_on_terminal,
    mcp_failure_for,
    session_warnings,
    with_login_advice,
)
from ._output import print_error, print_ok, read_input_text
from ._session import add_session_options, kernel_from_args
from ._verbs import add_verb_parser

ARGS_HELP = (
    "the arguments as a JSON object; @FILE reads them from FILE, - from stdin "
    "(for values beyond the OS's command-line limit)"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "call")
    p.add_argument("tool", help="the tool's name (see `ringfence tools list`)")
    p.add_argument("--args", default="{}", metavar="JSON", help=ARGS_HELP)
    add_session_options(p)
    p.set_defaults(func=run)


def read_arguments_text(spec: str) -> str:
    """``--args`` as given: literal JSON, ``@FILE`` (UTF-8) or ``-`` (stdin), read at most
    ``MAX_INPUT_BYTES`` (``@/dev/zero`` or an endless pipe filled memory)."""
    if spec != "-" and not spec.startswith("@"):
        return spec
    name = "-" if spec == "-" else spec[1:]
    subject = "stdin" if spec == "-" else name
    return read_input_text(name, subject=subject, field="--args", prefix="--args: ")


def parse_arguments(spec: str) -> dict:
    """The call's arguments from ``--args``; InvalidArguments (naming --args) when not an object."""
    text = read_arguments_text(spec)
    source = "--args" if text is spec else f"--args {spec}"
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidArguments(f"{source} is not valid JSON: {exc}", field="--args") from None
    if not isinstance(value, dict):
        raise InvalidArguments(f"{source} must be a JSON object", field="--args")
    return value


def with_suggestions(error: RingfenceError, tool: str, names: Iterable[str]) -> RingfenceError:
    """An unknown tool's not_found, extended by the closest registered names (if any)."""
    import difflib  # only for a misspelt name: not on every call's start

    close = difflib.get_close_matches(tool, list(names), n=3, cutoff=0.6)
    if not isinstance(error, NotFound) or not close:
        return error
    hint = " or ".join(close)
    return NotFound(
        f"{error.message}; did you mean {hint}?", field=error.field or "tool", suggestions=close
    )


def _spawns_here(args: argparse.Namespace) -> bool:
    """Whether this call's tool starts a process of this machine through the process
    supervisor: run_shell on the local (confined) or host backend."""
    if args.tool != "run_shell":
        return False
    from ..backends._registry import select_backend
    from ._environ import backend_choice

    try:
        return select_backend(backend_choice(args.backend, args.settings).value) in (
            "local",
            "host",
        )
    except RingfenceError:
        return False  # the kernel refuses the name, with the same error, below


async def _probe_tracking(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """The process supervisor's one-time probe of how it tracks process trees, in a worker
    thread: ~10-15 ms of waiting (a cgroup created, a real child moved into it and killed),
    here while the kernel is built and the call is authorized rather than after. The
    command's start uses the same cached result (or waits for this probe); it never raises.

    Reports started once its thread runs (``to_thread.run_sync`` starts it before its first
    checkpoint), so :func:`run` goes on building the kernel with the probe under way.
    """
    from .. import _proc

    task_status.started()
    await trio.to_thread.run_sync(_proc.tracking)


async def run(args: argparse.Namespace) -> int:
    arguments = parse_arguments(args.args)
    try:
        async with trio.open_nursery() as nursery:
            if _spawns_here(args):
                await nursery.start(_probe_tracking)
            roots = [Path(r) for r in args.settings.roots(args.workspace)]
            async with (
                # a server's login demand, offered
                login_on_terminal(roots, args.tool, args.settings.secret_names),
                kernel_from_args(args, mcp_tool=args.tool, interactive=True) as kernel,
            ):
                outcome = await kernel.invoke(args.tool, arguments, origin="cli")
                names = [s.name for s in kernel.tools()]
                # An mcp.<server>.… tool whose server did not connect: its cause is the error.
                failed = mcp_failure_for(kernel, args.tool) if args.tool not in names else None
                warnings = session_warnings(kernel, leave_out=failed)
    except BaseExceptionGroup as group:
        raise_single(group)  # what the verb raised (Ctrl-C's KeyboardInterrupt too), unwrapped
    if outcome.error is not None:
        error = with_login_advice(outcome.error, args.tool)
        if failed is not None:
            error = failed.with_(message=f"{args.tool} is not available: {failed.message}")
        elif args.tool not in names:
            # A disabled server's tool is not unknown: say which server and how to enable it.
            disabled = None
            if isinstance(error, NotFound):
                from ._mcp_inspect import disabled_server_for

                disabled = disabled_server_for(
                    args.tool, str(roots[0]) if roots else None, args.settings.secret_names
                )
            error = disabled or with_suggestions(error, args.tool, names)
        return print_error(error, args.json, warnings)
    # What the backend knows explains a failure inside the result (a root its uid cannot
    # write): said on stderr too, not only inside the JSON.
    notes = outcome.value.get("notes") if isinstance(outcome.value, dict) else None
    if isinstance(notes, list):
        warnings = [*warnings, *(str(n) for n in notes)]
    return print_ok(outcome.value, args.json, warnings)
