"""Fixtures for tests/backends (defined in backends_helpers, imported here so pytest finds them)."""

from backends_helpers import *  # noqa: F403
