"""ringfence.mcp_host: the MCP client side.

Configured MCP servers (``mcp.toml``) become :class:`Connector` objects whose
approved tools, prompts and resources join a kernel's registry as
``mcp.<server>.<tool>``, so every call passes the same Gate as a native tool.
See ``docs/mcp_host.md`` for the operator's view and the Python API.
"""

from ._adapter import RemoteTool as RemoteTool, consequence_for as consequence_for
from ._authority import (
    CapabilityLedger as CapabilityLedger,
    advertised_capabilities as advertised_capabilities,
)
from ._connection import (
    ConnectionPool as ConnectionPool,
    Diagnostics as Diagnostics,
    translate_error as translate_error,
)
from ._connector import (
    Connector as Connector,
    Connectors as Connectors,
    attach_connectors as attach_connectors,
    connect_servers as connect_servers,
    start_connectors as start_connectors,
)
from ._discovery import Discovery as Discovery
from ._elicitation import (
    ElicitationAnswer as ElicitationAnswer,
    ElicitationPrompt as ElicitationPrompt,
    Elicitor as Elicitor,
    credential_fields as credential_fields,
)
from ._embedding import connect_when_entered as connect_when_entered
from ._inspect import inspect_server as inspect_server
from ._inventory import (
    ListLimits as ListLimits,
    assign_names as assign_names,
    list_paginated as list_paginated,
)
from ._manifest import (
    Manifest as Manifest,
    Policy as Policy,
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
from ._sampling import (
    SamplingProvider as SamplingProvider,
    SamplingRequest as SamplingRequest,
    SamplingResponse as SamplingResponse,
)
from ._urls import check_url as check_url, display_url as display_url
