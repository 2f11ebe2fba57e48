"""ringfence.runtime.policy."""
