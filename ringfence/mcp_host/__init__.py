"""ringfence.mcp_host (see ARCHITECTURE.md)."""
