"""``ringfence tools list`` and ``ringfence tools stubs``."""

from __future__ import annotations

import argparse
import re

from ._mcp_session import failed_servers, session_warnings
from ._output import print_ok, print_table, print_warnings
from ._session import add_session_options, kernel_from_args
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    tools = add_verb_parser(sub, "tools")
    tsub = tools.add_subparsers(dest="tools_verb", required=True, metavar="ACTION")
    lst = tsub.add_parser("list", help="list tools with their consequence")
    add_session_options(lst, dry_run=False)
    lst.set_defaults(func=run_list)
    stubs = tsub.add_parser(
        "stubs",
        help="print the tools as a run_tool_script script calls them: Python stubs with "
        "docstrings, for a model's prompt",
    )
    add_session_options(stubs, dry_run=False)
    stubs.set_defaults(func=run_stubs)


# A summary longer than this is cut at a word and marked with "…".
SUMMARY_CHARS = 100


def first_sentence(description: str, limit: int = SUMMARY_CHARS) -> str:
    """The description's first sentence (up to its full stop), or its first words up to ``limit``."""
    text = " ".join(description.split())
    match = re.search(r"[.!?](?=\s|$)", text)
    sentence = text[: match.end()] if match else text
    if len(sentence) <= limit:
        return sentence
    # Too long: end at the last clause boundary that fits, else at a word, marked "…".
    head = sentence[:limit]
    for marks in ((": ", "; ", " — "), (" (",), (", ",)):
        clause = max(head.rfind(mark) for mark in marks)
        if clause > limit // 3:
            return head[:clause].rstrip() + "."
    return head.rsplit(" ", 1)[0].rstrip(",;:") + "…"


async def run_list(args: argparse.Namespace) -> int:
    async with kernel_from_args(args) as kernel:
        specs = kernel.tools()
        warnings = session_warnings(kernel)
        failed = failed_servers(kernel)
        if args.json:
            return print_ok(
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
                ],
                True,
                warnings,
            )
        rows = [
            (
                s.name,
                s.consequence.value,
                first_sentence(s.description) + (" (asks first)" if s.residual else ""),
            )
            for s in specs
        ]
        # A server that did not connect is listed, with why, where its tools would be.
        if failed:
            from ..mcp_host.manifest._load import sanitize_part

            rows += [
                (f"mcp.{sanitize_part(name, 'server')}.*", "failed", f"{e.code}: {e.message}")
                for name, e in failed.items()
            ]
        print_table(None, rows)
        print_warnings(warnings)
        return 0


async def run_stubs(args: argparse.Namespace) -> int:
    """The session's ``tools`` namespace as Python stubs (``ringfence.bridge.describe_tools``)."""
    from ..bridge._stubs import describe_tools

    async with kernel_from_args(args) as kernel:
        text = describe_tools(kernel)
        warnings = session_warnings(kernel)
        return print_ok({"stubs": text} if args.json else text, args.json, warnings)
