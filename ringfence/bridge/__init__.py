"""ringfence.bridge (see ARCHITECTURE.md)."""
