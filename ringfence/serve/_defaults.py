"""Defaults the CLI needs for its help text, in a module that imports nothing heavy."""

from __future__ import annotations

TOKEN_ENV = "RINGFENCE_SERVE_TOKEN"
DEFAULT_PORT = 8765
MIN_TOKEN_LENGTH = 16
# Which ``--expose`` words exist; each selects tools by ToolSpec.source.
EXPOSE_CHOICES = ("native", "connectors")
# How long one approval question to a client may wait before it counts as a deny.
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 600.0
# The largest JSON-RPC message a client may send (a stdio line, an HTTP body): what the host
# side allows a server by default (mcp_host max_message_bytes). Larger ones are not parsed.
MAX_REQUEST_BYTES = 32 * 1024 * 1024
