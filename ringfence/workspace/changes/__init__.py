"""ringfence.workspace.changes."""
