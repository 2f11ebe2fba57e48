"""What the gates for server-initiated requests (sampling, elicitation) share.

Each gate runs its requests through one kernel tool, ``mcp.<server>.<suffix>``,
so they are decided, asked, signed and recorded like every call; the server's
policy for the request becomes the rule the connector registers for that tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..runtime._tools import Consequence, Executor, ToolSpec
from ..runtime.policy._decide import Rules
from .manifest._load import Policy, ServerConfig

__all__ = ["request_rules", "request_spec"]


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
