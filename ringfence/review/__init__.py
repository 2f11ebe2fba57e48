"""ringfence.review: a local page where a person sees what the agent did, approves what it
asks, and undoes what it changed (``ringfence review``, ``serve --review``, ``--approve review``).

The page reads the stores the command reads (the event stream, the workspace's
change sets, plans) and acts only through the session's Gate: it answers the
questions the Gate asks (:class:`ReviewApprover`), undoes change sets with the
``undo`` tool and applies plans as ``plan apply`` does. It listens on loopback
only, behind ``serve``'s request guard with a token in its URL; its threat
model is in SECURITY.md ("The review page").

Names load on first use (PEP 562): the approver is light, the server pulls in
hypercorn and Starlette.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY = {
    **dict.fromkeys(("Question", "ReviewApprover", "answer_from_page"), "._approver"),
    **dict.fromkeys(("EventFeed", "Integrity"), "._feed"),
    **dict.fromkeys(("ReviewOptions", "attach_review", "serve_review"), "._server"),
    "ReviewSite": "._site",
    **dict.fromkeys(("CallFilter", "CallRow", "Timeline"), "ringfence.runtime._timeline"),
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

if TYPE_CHECKING:  # static names for type checkers and IDEs
    from ..runtime._timeline import (
        CallFilter as CallFilter,
        CallRow as CallRow,
        Timeline as Timeline,
    )
    from ._approver import (
        Question as Question,
        ReviewApprover as ReviewApprover,
        answer_from_page as answer_from_page,
    )
    from ._feed import EventFeed as EventFeed, Integrity as Integrity
    from ._server import (
        ReviewOptions as ReviewOptions,
        attach_review as attach_review,
        serve_review as serve_review,
    )
    from ._site import ReviewSite as ReviewSite
