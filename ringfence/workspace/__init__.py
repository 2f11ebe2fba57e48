"""ringfence.workspace (see ARCHITECTURE.md)."""
