"""ringfence.backends.confined."""
