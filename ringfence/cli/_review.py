"""``ringfence review``, and the review page of ``--approve review`` and ``serve --review``.

``ringfence review`` opens a session (the session options: roots, posture,
policy, ``--events``) whose approver is the page, and serves the page until
SIGINT/SIGTERM: the workspace's change sets (Undo), plans given with
``--plan`` (Apply), and the event stream of ``--watch FILE`` (read-only; a
file another process writes) or else the session's own. Every action is a
call through that session's Gate, recorded in its stream.

``--approve review`` on any session verb, and ``serve --review``, serve the
same page inside that verb's session for as long as it runs (:class:`ReviewSetup`).
The URL, with its token, goes to stderr (and, for ``ringfence review --json``,
in the one JSON object on stdout): it is the password of the page.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

import trio

from ..runtime._errors import InvalidArguments, RingfenceError
from ..runtime._groups import raise_single
from ._output import envelope, naming_file
from ._review_setup import ReviewSetup, add_approval_timeout, announcer
from ._session import add_session_options, kernel_from_args
from ._verbs import UsageError, add_verb_parser, port_number


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(
        sub,
        "review",
        description="Serve a local page (loopback, a token in its URL) where a person sees the "
        "calls, answers the Gate's questions, undoes change sets and applies plans; every "
        "action is a call through this session's Gate.",
    )
    p.add_argument("--port", type=port_number, default=0, help="the port (default 0: a free one)")
    p.add_argument(
        "--watch",
        metavar="FILE",
        help="show this event file (read-only, followed as another process writes it) instead "
        "of the session's own stream",
    )
    p.add_argument(
        "--plan",
        action="append",
        default=[],
        metavar="FILE",
        help="a dry run's plan to show and offer to apply (repeatable)",
    )
    add_approval_timeout(p)
    add_session_options(p, dry_run=False)
    p.set_defaults(func=run)


def _last_session_sealed(path: str) -> None:
    """Refuse to append the page's session to a stream whose last session is still open."""
    file = Path(path)
    if not file.exists() or file.stat().st_size == 0:
        return
    with naming_file(path), open(file, "rb") as f:
        f.seek(max(0, file.stat().st_size - (1 << 20)))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        kind = json.loads(tail).get("kind")
    except (ValueError, AttributeError):
        kind = None
    if kind != "session_sealed":
        raise InvalidArguments(
            f"--events {path}: its last session is not sealed (another process may still be "
            "writing it, or it crashed); appending this page's session would fork the chain. "
            f"Show it read-only with --watch {path} and record the page's own session "
            "elsewhere (--events OTHER_FILE)",
            field="--events",
        )


async def run(args: argparse.Namespace) -> int:
    try:
        return await _run(args)
    except BaseExceptionGroup as group:
        raise_single(group, RingfenceError)


async def _run(args: argparse.Namespace) -> int:
    if args.approve is not None and args.approve != "review":
        raise UsageError("--approve: the review page answers its own questions; drop --approve")
    if args.events and not args.watch:
        _last_session_sealed(args.events)
    args.approve = "review"

    def say(url: str) -> None:
        if args.json:
            sys.stdout.write(json.dumps(envelope(True, {"url": url})) + "\n")
            sys.stdout.flush()
        announcer("ringfence review")(url)

    setup = ReviewSetup.from_args(args, say=say, port=args.port)
    kernel = kernel_from_args(args, setup.approver, review=setup)
    async with kernel:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
    return 0
