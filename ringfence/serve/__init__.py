"""ringfence.serve (see ARCHITECTURE.md)."""
