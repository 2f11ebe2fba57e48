"""ringfence.runtime.shell."""
