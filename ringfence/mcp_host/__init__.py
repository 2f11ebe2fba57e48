"""ringfence.mcp_host: the MCP client side.

Configured MCP servers (``mcp.toml``) become :class:`Connector` objects whose
approved tools, prompts and resources join a kernel's registry as
``mcp.<server>.<tool>``, so every call passes the same Gate as a native tool.
See the README's "MCP servers" section for the operator's view and the Python API.

A host uses :func:`connect_servers` (or :func:`attach_connectors`) with the
manifests (:func:`load_manifests`, :func:`load_manifest`, :func:`parse_manifest`
and their values), :func:`inspect_server`, and what it may offer servers:
a :class:`SamplingProvider` and an :class:`Elicitor`. Editing ``mcp.toml``,
the transports and the adapters stay private.

The manifest rules load eagerly (the ``ringfence mcp`` verbs need only them);
everything that imports the MCP SDK loads on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .manifest._load import (
    Manifest as Manifest,
    Policy as Policy,
    Sandbox as Sandbox,
    ServerConfig as ServerConfig,
    Transport as Transport,
    Trust as Trust,
    load_manifest as load_manifest,
    load_manifests as load_manifests,
    parse_manifest as parse_manifest,
)

_LAZY = {
    "Connector": "._connector",
    "Connectors": "._connect",
    "attach_connectors": "._connect",
    "connect_servers": "._connect",
    "ElicitationAnswer": "._elicitation",
    "ElicitationPrompt": "._elicitation",
    "Elicitor": "._elicitation",
    "inspect_server": "._inspect",
    "ListLimits": "._inventory",
    "SamplingProvider": "._sampling",
    "SamplingRequest": "._sampling",
    "SamplingResponse": "._sampling",
}


__all__ = [
    "Manifest",
    "Policy",
    "Sandbox",
    "ServerConfig",
    "Transport",
    "Trust",
    "load_manifest",
    "load_manifests",
    "parse_manifest",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static names for type checkers and IDEs
    from ._connect import (
        Connectors as Connectors,
        attach_connectors as attach_connectors,
        connect_servers as connect_servers,
    )
    from ._connector import Connector as Connector
    from ._elicitation import (
        ElicitationAnswer as ElicitationAnswer,
        ElicitationPrompt as ElicitationPrompt,
        Elicitor as Elicitor,
    )
    from ._inspect import inspect_server as inspect_server
    from ._inventory import ListLimits as ListLimits
    from ._sampling import (
        SamplingProvider as SamplingProvider,
        SamplingRequest as SamplingRequest,
        SamplingResponse as SamplingResponse,
    )
