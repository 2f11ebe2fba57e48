"""ringfence.mcp_host: the MCP client side.

Configured MCP servers (``mcp.toml``) become :class:`Connector` objects whose
approved tools, prompts and resources join a kernel's registry as
``mcp.<server>.<tool>``, so every call passes the same Gate as a native tool.
See the README's "MCP servers" section for the operator's view and the Python API.

The manifest and URL rules load eagerly (the ``ringfence mcp`` verbs need only
them); everything that imports the MCP SDK loads on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._manifest import (
    Manifest as Manifest,
    Policy as Policy,
    Sandbox as Sandbox,
    ServerConfig as ServerConfig,
    Transport as Transport,
    Trust as Trust,
    load_manifest as load_manifest,
    load_manifests as load_manifests,
    manifest_path as manifest_path,
    parse_manifest as parse_manifest,
    remove_server as remove_server,
    sanitize_part as sanitize_part,
    save_server as save_server,
)
from ._urls import check_url as check_url, display_url as display_url

_LAZY = {
    "RemoteTool": "._adapter",
    "consequence_for": "._adapter",
    "CapabilityLedger": "._authority",
    "advertised_capabilities": "._authority",
    "ConnectionPool": "._connection",
    "Diagnostics": "._diagnostics",
    "translate_error": "._errors",
    "Connector": "._connector",
    "Connectors": "._connect",
    "attach_connectors": "._connect",
    "connect_servers": "._connect",
    "start_connectors": "._connect",
    "Discovery": "._discovery",
    "ElicitationAnswer": "._elicitation",
    "ElicitationPrompt": "._elicitation",
    "Elicitor": "._elicitation",
    "credential_fields": "._elicitation",
    "credential_request": "._elicitation",
    "connect_when_entered": "._embedding",
    "inspect_server": "._inspect",
    "ListLimits": "._inventory",
    "assign_names": "._inventory",
    "list_paginated": "._inventory",
    "SamplingProvider": "._sampling",
    "SamplingRequest": "._sampling",
    "SamplingResponse": "._sampling",
    "ConfinedCommand": "._stdio",
    "StdioCommand": "._stdio",
    "StdioConfiner": "._stdio",
}


__all__ = [
    "Manifest",
    "Policy",
    "Sandbox",
    "ServerConfig",
    "Transport",
    "Trust",
    "check_url",
    "display_url",
    "load_manifest",
    "load_manifests",
    "manifest_path",
    "parse_manifest",
    "remove_server",
    "sanitize_part",
    "save_server",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static names for type checkers and IDEs
    from ._adapter import RemoteTool as RemoteTool, consequence_for as consequence_for
    from ._authority import (
        CapabilityLedger as CapabilityLedger,
        advertised_capabilities as advertised_capabilities,
    )
    from ._connect import (
        Connectors as Connectors,
        attach_connectors as attach_connectors,
        connect_servers as connect_servers,
        start_connectors as start_connectors,
    )
    from ._connection import ConnectionPool as ConnectionPool
    from ._connector import Connector as Connector
    from ._diagnostics import Diagnostics as Diagnostics
    from ._discovery import Discovery as Discovery
    from ._elicitation import (
        ElicitationAnswer as ElicitationAnswer,
        ElicitationPrompt as ElicitationPrompt,
        Elicitor as Elicitor,
        credential_fields as credential_fields,
        credential_request as credential_request,
    )
    from ._embedding import connect_when_entered as connect_when_entered
    from ._errors import translate_error as translate_error
    from ._inspect import inspect_server as inspect_server
    from ._inventory import (
        ListLimits as ListLimits,
        assign_names as assign_names,
        list_paginated as list_paginated,
    )
    from ._sampling import (
        SamplingProvider as SamplingProvider,
        SamplingRequest as SamplingRequest,
        SamplingResponse as SamplingResponse,
    )
    from ._stdio import (
        ConfinedCommand as ConfinedCommand,
        StdioCommand as StdioCommand,
        StdioConfiner as StdioConfiner,
    )
