"""Fixtures for tests/plugins (defined in plugins_helpers, imported here so pytest finds them)."""

from plugins_helpers import witness  # noqa: F401
