"""ringfence.mcp_host.oauth."""
