"""ringfence.backends.engines."""
