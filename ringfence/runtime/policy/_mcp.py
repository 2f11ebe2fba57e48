"""Per-server MCP policy: which of a server's tools are ``read``, and whether the server is trusted.

Written in the policy files as one table per server (the manifest keeps how to
connect)::

    [mcp.files]                      # the server's name in mcp.toml
    read_only_tools = ["read_*", "list_directory"]   # globs over the server's own tool names
    trusted = true                   # believe its readOnlyHint annotations, frame nothing

Each layer's table is one :class:`McpStatement` per key. The layers combine
the way rules do, so a lower layer can only tighten:

- a tool is ``read`` only if **every** ``read_only_tools`` list said about the
  server (from any layer, active or not) has a glob matching it, and at least
  one *active* list does;
- a server is trusted only if no layer says ``trusted = false`` and at least
  one *active* statement says ``trusted = true``.

A statement is inactive (it cannot loosen, it still tightens) when it comes
from a project file the user has not trusted, or from any layer but managed
while the managed file sets ``lock_allow``. So a project can remove ``read``
or trust (an empty list, ``trusted = false``) but never grant them.

The manifest's old keys (``read_only_tools``, ``trust = "trusted"``) join as
statements of layer ``manifest`` for one more release (``mcp_host`` adds them).

Promise: with no statement at all about a server, nothing is ``read`` by this
module and the server is untrusted. Not promised: that a server named here
exists (a table for an unknown server is kept, and shown, but matches nothing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

__all__ = ["McpPolicy", "McpServerPolicy", "McpStatement", "mcp_statements_from_table"]

MCP_KEYS = ("read_only_tools", "trusted")
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")


@dataclass(frozen=True)
class McpStatement:
    """One layer's word on one server: ``read_only_tools = [...]`` or ``trusted = true|false``."""

    server: str
    key: str  # "read_only_tools" | "trusted"
    value: tuple[str, ...] | bool
    layer: str
    source: str  # "file:line"
    inactive: str = ""  # why it cannot loosen (it still tightens)

    @property
    def loosens(self) -> bool:
        return self.key == "read_only_tools" or self.value is True

    def to_dict(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        out = {
            "server": self.server,
            "key": self.key,
            "value": value,
            "layer": self.layer,
            "source": self.source,
        }
        if self.inactive:
            out["inactive"] = self.inactive
        return out


@dataclass(frozen=True)
class McpServerPolicy:
    """Everything said about one server, judged per the module docstring."""

    server: str
    statements: tuple[McpStatement, ...] = ()

    def read_only(self, tool: str) -> tuple[bool, str]:
        """Whether the server's ``tool`` (its own name) is ``read``, and why (or why not)."""
        lists = [s for s in self.statements if s.key == "read_only_tools"]
        if not lists:
            return False, "no read_only_tools names it"
        granted = ""
        for s in lists:
            glob = next((g for g in s.value if fnmatchcase(tool, g)), None)  # type: ignore[union-attr]
            if glob is None:
                return False, f"read_only_tools at {s.source} ({s.layer}) does not name it"
            if not s.inactive and not granted:
                granted = f"read_only_tools {glob!r} at {s.source} ({s.layer})"
        if not granted:
            return False, f"only inactive read_only_tools name it ({lists[0].inactive})"
        return True, granted

    def trusted(self) -> tuple[bool, str]:
        """Whether the server is trusted, and the statement that decided it."""
        said = [s for s in self.statements if s.key == "trusted"]
        denied = next((s for s in said if s.value is False), None)
        if denied is not None:
            return False, f"trusted = false at {denied.source} ({denied.layer})"
        granted = next((s for s in said if not s.inactive), None)
        if granted is None:
            return False, "no active trusted = true"
        return True, f"trusted = true at {granted.source} ({granted.layer})"


@dataclass(frozen=True)
class McpPolicy:
    """The MCP statements of every policy layer, in layer order."""

    statements: tuple[McpStatement, ...] = ()

    def for_server(self, name: str, extra: Iterable[McpStatement] = ()) -> McpServerPolicy:
        """What is said about ``name``, plus ``extra`` (the manifest's old keys)."""
        own = tuple(s for s in self.statements if s.server == name)
        return McpServerPolicy(name, own + tuple(extra))

    def __add__(self, other: McpPolicy) -> McpPolicy:
        return McpPolicy(self.statements + other.statements)


def mcp_statements_from_table(
    table: Any, *, layer: str, line_of: Any, source_file: str
) -> list[McpStatement]:
    """``[mcp.<server>]`` tables as statements; raises ValueError(path, message) on a bad one.

    ``line_of(path)`` gives the line of a key path such as ``("mcp", "files", "trusted")``.
    """
    if not isinstance(table, dict):
        raise ValueError(("mcp",), "must be tables: [mcp.<server>] read_only_tools, trusted")
    out: list[McpStatement] = []
    for server, settings in table.items():
        if not SERVER_NAME.match(server):
            raise ValueError(("mcp", server), "is not a server name (as in mcp.toml)")
        if not isinstance(settings, dict):
            raise ValueError(("mcp", server), "must be a table: read_only_tools = [...], trusted")
        for key, value in settings.items():
            path = ("mcp", server, key)
            if key == "read_only_tools":
                if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                    raise ValueError(path, "must be a list of tool-name globs")
                value = tuple(value)
            elif key == "trusted":
                if not isinstance(value, bool):
                    raise ValueError(path, "must be true or false")
            else:
                raise ValueError(
                    path, f"unknown key (an [mcp.<server>] table has {', '.join(MCP_KEYS)})"
                )
            out.append(
                McpStatement(server, key, value, layer, f"{source_file}:{line_of(path) or '?'}")
            )
    return out
