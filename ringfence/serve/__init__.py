"""ringfence.serve: a Kernel's governed tools as an MCP server (``ringfence serve``).

Every ``tools/call`` enters the Gate through ``kernel.invoke(..., origin="mcp")``;
the Gate's questions go back to the calling client as form elicitations
(:class:`ClientApprover`); Streamable HTTP is guarded by Host, Origin and a
bearer token (:class:`RequestGuard`).

Names load on first use (PEP 562) so the ``ringfence`` command does not import
the MCP SDK, Starlette and hypercorn for verbs that never serve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._defaults import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS as DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    DEFAULT_PORT as DEFAULT_PORT,
    DEFAULT_SESSION_IDLE_SECONDS as DEFAULT_SESSION_IDLE_SECONDS,
    EXPOSE_CHOICES as EXPOSE_CHOICES,
    TOKEN_ENV as TOKEN_ENV,
)

_LAZY = {
    **dict.fromkeys(
        ("ClientApprover", "ClientChannel", "approval_form", "current_channel"), "._approver"
    ),
    **dict.fromkeys(
        (
            "HttpOptions",
            "RequestGuard",
            "check_bind",
            "is_loopback",
            "serve_http",
            "token_from_env",
        ),
        "._http",
    ),
    "LogForwarder": "._logging",
    **dict.fromkeys(("SessionEventStore", "close_sse_stream"), "._resume"),
    **dict.fromkeys(
        (
            "META_CONSEQUENCE",
            "META_RESIDUAL",
            "build_server",
            "exposed_tools",
            "parse_expose",
            "result_from_outcome",
            "serve_stdio",
            "tool_annotations",
            "tool_to_mcp",
        ),
        "._server",
    ),
}

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT_SECONDS",
    "DEFAULT_PORT",
    "DEFAULT_SESSION_IDLE_SECONDS",
    "EXPOSE_CHOICES",
    "TOKEN_ENV",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static names for type checkers and IDEs
    from ._approver import (
        ClientApprover as ClientApprover,
        ClientChannel as ClientChannel,
        approval_form as approval_form,
        current_channel as current_channel,
    )
    from ._http import (
        HttpOptions as HttpOptions,
        RequestGuard as RequestGuard,
        check_bind as check_bind,
        is_loopback as is_loopback,
        serve_http as serve_http,
        token_from_env as token_from_env,
    )
    from ._logging import LogForwarder as LogForwarder
    from ._resume import (
        SessionEventStore as SessionEventStore,
        close_sse_stream as close_sse_stream,
    )
    from ._server import (
        META_CONSEQUENCE as META_CONSEQUENCE,
        META_RESIDUAL as META_RESIDUAL,
        build_server as build_server,
        exposed_tools as exposed_tools,
        parse_expose as parse_expose,
        result_from_outcome as result_from_outcome,
        serve_stdio as serve_stdio,
        tool_annotations as tool_annotations,
        tool_to_mcp as tool_to_mcp,
    )
