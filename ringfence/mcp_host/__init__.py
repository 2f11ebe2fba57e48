"""ringfence.mcp_host: the MCP client side.

Configured MCP servers (``mcp.toml``) become :class:`Connector` objects whose
approved tools, prompts and resources join a kernel's registry as
``mcp.<server>.<tool>``, so every call passes the same Gate as a native tool.
See ``docs/mcp_host.md`` for the operator's view and the Python API.
"""

from ._adapter import RemoteTool as RemoteTool
from ._adapter import consequence_for as consequence_for
from ._authority import CapabilityLedger as CapabilityLedger
from ._authority import advertised_capabilities as advertised_capabilities
from ._connection import ConnectionPool as ConnectionPool
from ._connection import Diagnostics as Diagnostics
from ._connection import translate_error as translate_error
from ._connector import Connector as Connector
from ._connector import Connectors as Connectors
from ._connector import attach_connectors as attach_connectors
from ._connector import connect_servers as connect_servers
from ._connector import start_connectors as start_connectors
from ._discovery import Discovery as Discovery
from ._elicitation import ElicitationAnswer as ElicitationAnswer
from ._elicitation import ElicitationPrompt as ElicitationPrompt
from ._elicitation import Elicitor as Elicitor
from ._elicitation import credential_fields as credential_fields
from ._embedding import McpKernel as McpKernel
from ._inspect import inspect_server as inspect_server
from ._inventory import ListLimits as ListLimits
from ._inventory import assign_names as assign_names
from ._inventory import list_paginated as list_paginated
from ._manifest import Manifest as Manifest
from ._manifest import Policy as Policy
from ._manifest import ServerConfig as ServerConfig
from ._manifest import Transport as Transport
from ._manifest import Trust as Trust
from ._manifest import load_manifest as load_manifest
from ._manifest import load_manifests as load_manifests
from ._manifest import manifest_path as manifest_path
from ._manifest import parse_manifest as parse_manifest
from ._manifest import remove_server as remove_server
from ._manifest import sanitize_part as sanitize_part
from ._manifest import save_server as save_server
from ._sampling import SamplingProvider as SamplingProvider
from ._sampling import SamplingRequest as SamplingRequest
from ._sampling import SamplingResponse as SamplingResponse
from ._urls import check_url as check_url
from ._urls import display_url as display_url
