"""ringfence.backends (see ARCHITECTURE.md)."""
