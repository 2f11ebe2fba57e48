"""ringfence.mcp_host.manifest."""
