"""ringfence.mcp_host.transport."""
