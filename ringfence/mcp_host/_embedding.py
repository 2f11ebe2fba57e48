"""A Kernel that connects its MCP servers when entered (what ``create_kernel(mcp_manifest=…)`` builds).

Connecting starts server processes, so it happens only on request and only
in ``async with``: ``__aenter__`` connects (in the entering task, which is the
task that will close the kernel), ``__aexit__`` stops the servers before the
event stream is sealed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..runtime import Kernel
from ._connector import Connectors, attach_connectors
from ._manifest import Manifest, load_manifest, load_manifests

__all__ = ["McpKernel"]


@dataclass(eq=False)
class McpKernel(Kernel):
    """A :class:`~ringfence.runtime.Kernel` plus MCP connectors.

    ``mcp_manifest``: a :class:`Manifest`, a path to an ``mcp.toml``, or
    ``True`` for the user manifest plus ``<mcp_workspace>/.ringfence/mcp.toml``.
    ``mcp_options`` go to :func:`connect_servers` (``sampling_provider``,
    ``elicitor``, ``strict``, ``tool_discovery``, ``names``).
    """

    mcp_manifest: Manifest | str | os.PathLike[str] | bool | None = None
    mcp_workspace: str | os.PathLike[str] | None = None
    mcp_options: Mapping[str, Any] = field(default_factory=dict)
    connectors: Connectors | None = field(init=False, default=None)

    def _manifest(self) -> Manifest:
        m = self.mcp_manifest
        if isinstance(m, Manifest):
            return m
        if m is True:
            return load_manifests(self.mcp_workspace)
        if m is None or m is False:
            return Manifest()
        return load_manifest(m)

    async def __aenter__(self) -> McpKernel:
        try:
            self.connectors = await attach_connectors(
                self, self._manifest(), workspace=self.mcp_workspace, **dict(self.mcp_options)
            )
        except BaseException:
            await self.aclose()
            raise
        return self
