"""``ringfence serve`` over stdio: the client's first ``initialize`` answered before the rest loads.

Called by :func:`._main._main` for the command's own process (never for an in-process
``main(argv)``), before the parser is built: building it imports the session options,
the kernel and trio, and serving imports the MCP SDK, together most of the half second
a client waited (issue 31, friction 6). The answer depends only on ``--transport`` and
``--expose`` (see :mod:`ringfence.serve._early`), read here from the words as given;
anything this reading is not sure of (``--help``, an abbreviated option, an ``--expose``
word serve does not know, HTTP) leaves the first line to the ordinary path. A command
line the full parse then refuses ends with its usual error on stderr, after the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..serve._defaults import EXPOSE_CHOICES
from ..serve._early import EarlyInitialize, answer_initialize_early

__all__ = ["answer_serve_initialize"]

_VALUED = ("--transport", "--expose")


def answer_serve_initialize(argv: Sequence[str]) -> EarlyInitialize | None:
    """Answer stdin's first ``initialize`` for ``ringfence serve`` ``argv``, or None."""
    if list(argv[:1]) != ["serve"]:
        return None
    values = {"--transport": "stdio", "--expose": "native"}
    words = iter(argv[1:])
    for word in words:
        name, eq, value = word.partition("=")
        if word in ("-h", "--help") or word == "--":
            return None
        if name in _VALUED:
            values[name] = value if eq else next(words, "")
        elif name.startswith("--") and any(o.startswith(name) for o in _VALUED):
            return None  # an abbreviation argparse would take: let it
    if values["--transport"] != "stdio":
        return None
    expose = [w.strip() for w in values["--expose"].split(",") if w.strip()]
    if not expose or not set(expose) <= set(EXPOSE_CHOICES):
        return None
    # logging: the command always serves its events as log notifications (LogForwarder)
    return answer_initialize_early(expose, logging=True)
