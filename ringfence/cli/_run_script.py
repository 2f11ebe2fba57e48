"""``ringfence run-script FILE``: run a tool script under the session's Gate."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..bridge._tool import MAX_SCRIPT_CHARS, MAX_TIMEOUT_SECONDS, SCRIPT_TOOL
from ..runtime._errors import RingfenceError
from ..runtime._render import json_text, visible_line
from ._mcp_session import session_warnings
from ._output import (
    envelope,
    error_line,
    exit_code_for,
    print_json,
    print_table,
    print_warnings,
    read_input_text,
)
from ._session import add_session_options, kernel_from_args
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(
        sub,
        "run-script",
        description=(
            "Run FILE as a run_tool_script script. The script itself asks first (it is in the "
            "residual), and so does each call it makes that the posture does not allow. "
            "Put FILE before --dry-run (whose PLAN argument is optional)."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the script (UTF-8 Python source; - for stdin)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"hard timeout in seconds (default 120, at most {MAX_TIMEOUT_SECONDS})",
    )
    add_session_options(p)
    p.set_defaults(func=run)


# A script is at most MAX_SCRIPT_CHARS characters, each at most 4 bytes of UTF-8: a longer
# FILE is refused before it is read whole (`run-script /dev/zero` held 1.5 GB in 6 s and grew).
MAX_SCRIPT_FILE_BYTES = 4 * MAX_SCRIPT_CHARS


def read_script(name: str) -> str:
    """The script in FILE (``-``: stdin), read up to :data:`MAX_SCRIPT_FILE_BYTES`."""
    return read_input_text(
        name,
        subject=f"the script {name} (a script is at most {MAX_SCRIPT_CHARS:,} characters)",
        field="FILE",
        max_bytes=MAX_SCRIPT_FILE_BYTES,
    )


async def run(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"script": read_script(args.file)}
    if args.timeout is not None:
        arguments["timeout_seconds"] = args.timeout
    async with kernel_from_args(args, interactive=True) as kernel:
        outcome = await kernel.invoke(SCRIPT_TOOL, arguments, origin="cli")
        staged = len(kernel.plan.calls)
        warnings = session_warnings(kernel)  # MCP servers that did not connect, and why
    if args.json:
        if outcome.error is not None:
            print_json(envelope(False, outcome.error.to_dict(), warnings))
        else:
            print_json(envelope(True, outcome.value, warnings))
        return exit_code_for(outcome.error) if outcome.error is not None else 0
    print_warnings(warnings)
    if outcome.error is not None:
        _print_human(outcome.error.details, error=outcome.error)
    else:
        _print_human(outcome.value)
    if args.dry_run is not None:
        sys.stderr.write(
            f"ringfence: dry run: {staged} call(s) staged in {args.dry_run}; "
            f"review with `ringfence plan show {args.dry_run}`\n"
            if staged
            else "ringfence: dry run: the script staged no calls\n"
        )
    return exit_code_for(outcome.error) if outcome.error is not None else 0


def _print_human(payload: dict[str, Any], error: RingfenceError | None = None) -> None:
    """The script's output on stdout; its result, calls and any error on stderr."""
    output = payload.get("output") or ""
    sys.stdout.write(output)
    sys.stdout.flush()
    if "result" in payload:
        sys.stdout.write(
            ("" if not output or output.endswith("\n") else "\n")
            + json_text(payload["result"], indent=2)
            + "\n"
        )
    sys.stdout.flush()
    calls = payload.get("calls") or []
    if calls:
        sys.stderr.write(f"ringfence: the script made {len(calls)} call(s):\n")
        rows = []
        for n, c in enumerate(calls, 1):
            decision = c.get("decision") or {}
            did = "staged" if c.get("staged") else (c.get("error") or "ok")
            rows.append(
                (
                    f"{n}.",
                    str(c.get("tool", "")),
                    str(decision.get("verdict", "-")),
                    f"by {decision.get('rule', '-')}",
                    f"-> {did}",
                )
            )
        print_table(None, rows, sys.stderr)
    if error is not None:
        trace = (payload.get("error") or {}).get("traceback")
        if trace:
            # The script's traceback (its messages are the script's text) behind a gutter,
            # so none of its lines can pose as one of ringfence's.
            lines = str(trace).rstrip("\n").split("\n")
            sys.stderr.write("".join(f"  │ {visible_line(line)}\n" for line in lines))
        sys.stderr.write(f"ringfence: {error.code}: {error_line(error.message)}\n")
