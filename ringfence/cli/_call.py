"""``ringfence call TOOL --args JSON``."""

from __future__ import annotations

import argparse
import json

from ..runtime import InvalidArguments
from ._output import print_error, print_ok
from ._session import add_session_options, kernel_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("call", help="make one governed tool call")
    p.add_argument("tool", help="the tool's name (see `ringfence tools list`)")
    p.add_argument("--args", default="{}", metavar="JSON", help="the arguments as a JSON object")
    add_session_options(p)
    p.set_defaults(func=run)


def parse_arguments(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidArguments(f"--args is not valid JSON: {exc}", field="--args") from None
    if not isinstance(value, dict):
        raise InvalidArguments("--args must be a JSON object", field="--args")
    return value


async def run(args: argparse.Namespace) -> int:
    arguments = parse_arguments(args.args)
    async with kernel_from_args(args) as kernel:
        outcome = await kernel.invoke(args.tool, arguments, origin="cli")
    if outcome.error is not None:
        return print_error(outcome.error, args.json)
    return print_ok(outcome.value, args.json)
