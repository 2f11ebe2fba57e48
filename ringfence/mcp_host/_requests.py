"""What the gates for server-initiated requests (sampling, elicitation) share.

Each gate runs its requests through one kernel tool, ``mcp.<server>.<suffix>``,
so they are decided, asked, signed and recorded like every call; the server's
policy for the request becomes the rule the connector registers for that tool.

Each costs event records, so a server's requests are handled only within its
budget (:func:`admit_request`: 20 per 60 s, sampling and elicitation together);
past it a request is refused at once, unrecorded, and counted into one
``mcp_requests_summary`` per window: a server looping requests cannot grow the
event log without bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..runtime._tools import Consequence, Executor, ToolSpec
from ..runtime.policy._decide import Rules
from .manifest._load import Policy, ServerConfig

if TYPE_CHECKING:
    from ..runtime._kernel import Kernel
    from ._diagnostics import Diagnostics

__all__ = ["REQUESTS_SUMMARY", "TOO_MANY", "admit_request", "request_rules", "request_spec"]

REQUESTS_SUMMARY = "mcp_requests_summary"
TOO_MANY = (
    "too many requests from this server: ringfence handles at most 20 sampling and "
    "elicitation requests per 60 s from one server; try again later"
)


def request_spec(
    config: ServerConfig,
    suffix: str,
    description: str,
    schema: Mapping[str, Any],
    executor: Executor,
    *,
    consequence: Consequence,
    policy: Policy,
) -> ToolSpec:
    """The kernel tool ``mcp.<config.part>.<suffix>`` a request of ``config``'s server runs as.

    With ``policy`` "ask" the tool is residual: it asks under every posture short
    of unrestricted even before the connector's ask rule (which covers
    unrestricted too) is registered.
    """
    return ToolSpec(
        f"mcp.{config.part}.{suffix}",
        description,
        schema,
        executor,
        consequence=consequence,
        residual=policy is Policy.ASK,
        source=f"mcp:{config.name}",
    )


def request_rules(policy: Policy, name: str) -> Rules:
    """The rules ``policy`` means for the request tool ``name``: ask, else autonomous.

    Under "deny" the client does not offer the capability at all, so no request
    reaches the tool.
    """
    if policy is Policy.ASK:
        return Rules(ask=(name,))
    return Rules(autonomous=(name,))


def admit_request(
    kernel: Kernel, config: ServerConfig, diagnostics: Diagnostics, kind: str
) -> bool:
    """Whether a request of ``kind`` from ``config``'s server is within its budget (handled).

    A request past the budget is not recorded: it is counted, and the count goes to the
    event stream as one summary record when the next window starts (or the server closes).
    """
    admitted, summary = diagnostics.requests.admit(kind)
    if summary is not None:
        kernel.events.emit(REQUESTS_SUMMARY, kernel.session_id, server=config.name, **summary)
    return admitted
