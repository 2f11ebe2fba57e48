"""ringfence.serve: a Kernel's governed tools as an MCP server (``ringfence serve``).

Every ``tools/call`` enters the Gate through ``kernel.invoke(..., origin="mcp")``;
the Gate's questions go back to the calling client as form elicitations
(:class:`ClientApprover`); Streamable HTTP is guarded by Host, Origin and a
bearer token (``serve._http.RequestGuard``).

A host uses :func:`serve_stdio`, :func:`serve_http` with :class:`HttpOptions`,
:func:`build_server` and :class:`ClientApprover`. Names load on first use
(PEP 562) so the ``ringfence`` command does not import the MCP SDK, Starlette
and hypercorn for verbs that never serve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY = {
    "ClientApprover": "._approver",
    "HttpOptions": "._http",
    "serve_http": "._http",
    "build_server": "._server",
    "serve_stdio": "._server",
}

__all__ = [
    "ClientApprover",
    "HttpOptions",
    "build_server",
    "serve_http",
    "serve_stdio",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static names for type checkers and IDEs
    from ._approver import ClientApprover as ClientApprover
    from ._http import HttpOptions as HttpOptions, serve_http as serve_http
    from ._server import build_server as build_server, serve_stdio as serve_stdio
