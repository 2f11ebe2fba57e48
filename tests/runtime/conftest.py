"""Fixtures for tests/runtime (defined in runtime_helpers, imported here so pytest finds them)."""

from runtime_helpers import *  # noqa: F403
