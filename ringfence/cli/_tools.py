"""``ringfence tools list``."""

from __future__ import annotations

import argparse
import re

from ._output import print_ok, print_table
from ._session import add_session_options, kernel_from_args


def register(sub: argparse._SubParsersAction) -> None:
    tools = sub.add_parser("tools", help="list the tools a session would have")
    tsub = tools.add_subparsers(dest="tools_verb", required=True, metavar="ACTION")
    lst = tsub.add_parser("list", help="list tools with their consequence")
    add_session_options(lst, dry_run=False)
    lst.set_defaults(func=run_list)


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
            )
        rows = [
            (
                s.name,
                s.consequence.value,
                first_sentence(s.description) + (" (asks first)" if s.residual else ""),
            )
            for s in specs
        ]
        print_table(None, rows)
        return 0
