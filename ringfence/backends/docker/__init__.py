"""ringfence.backends.docker."""
