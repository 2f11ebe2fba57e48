"""ringfence.workspace.git."""
