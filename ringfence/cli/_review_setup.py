"""The review page of one session: its approver, the stream it shows, where it listens.

Shared by ``ringfence review``, ``--approve review`` (any session verb, through
``kernel_from_args``) and ``serve --review``; see :mod:`._review`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..review import EventFeed, ReviewApprover, ReviewOptions, attach_review
from ..runtime._errors import InvalidArguments
from ..runtime._kernel import Kernel
from ..serve._defaults import DEFAULT_APPROVAL_TIMEOUT_SECONDS
from ._output import naming_file
from ._verbs import positive_seconds


def add_approval_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--approval-timeout",
        type=positive_seconds,
        default=DEFAULT_APPROVAL_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"how long a question waits for an answer before it counts as deny "
        f"(default {DEFAULT_APPROVAL_TIMEOUT_SECONDS:g})",
    )


@dataclass
class ReviewSetup:
    """The page of one session: its approver, the stream it shows, where it listens."""

    approver: ReviewApprover
    feed: EventFeed
    options: ReviewOptions
    announce: Callable[[str], None]

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, *, say: Callable[[str], None], port: int = 0
    ) -> ReviewSetup:
        """Before the kernel exists: the lines already in ``--events`` are read now."""
        timeout = getattr(args, "approval_timeout", DEFAULT_APPROVAL_TIMEOUT_SECONDS)
        watch = getattr(args, "watch", None)
        if watch is not None:
            if not Path(watch).is_file():
                raise InvalidArguments(f"--watch: no event file at {watch}", field="--watch")
            feed = EventFeed(f"{watch} (watched, read-only)", live=False, path=Path(watch))
        elif args.events:
            feed = EventFeed(f"{args.events} (this session's)", live=True)
            with naming_file(args.events):
                feed.read_existing(args.events)
        else:
            feed = EventFeed("this session's (in memory)", live=True)
        options = ReviewOptions(port=port, plans=tuple(getattr(args, "plan", ()) or ()))
        return cls(ReviewApprover(timeout_seconds=timeout), feed, options, say)

    def observer(self, inner: Any) -> Any:
        """The event observer to hand the kernel: the page's feed, then ``inner`` (if any)."""
        if not self.feed.live:
            return inner
        self.feed.next_observer = inner
        return self.feed

    def attach(self, kernel: Kernel) -> None:
        attach_review(kernel, self.feed, self.approver, self.options, self.announce)


def announcer(prefix: str) -> Callable[[str], None]:
    def say(url: str) -> None:
        sys.stderr.write(
            f"{prefix}: review page at {url}\n"
            f"{prefix}: (the token in that URL is the page's password; it answers on this "
            "machine only)\n"
        )
        sys.stderr.flush()

    return say
