"""Fixtures for tests/mcp_host (defined in mcp_host_helpers, imported here so pytest finds them)."""

from mcp_host_helpers import *  # noqa: F403
