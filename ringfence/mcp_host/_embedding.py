"""A Kernel that connects its MCP servers when entered (what ``create_kernel(mcp_manifest=…)`` builds).

Connecting starts server processes, so it happens only on request and only
in ``async with``: ``__aenter__`` connects (opening the connections' nursery
in the entering task), ``__aexit__`` stops the servers and closes that nursery
before the kernel seals its event stream. Use it only as ``async with``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..runtime import Kernel
from ._connector import Connectors, connect_servers
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
    _mcp_cm: Any = field(init=False, default=None, repr=False)

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
        cm = connect_servers(
            self, self._manifest(), workspace=self.mcp_workspace, **dict(self.mcp_options)
        )
        try:
            self.connectors = await cm.__aenter__()
        except BaseException:
            await self.aclose()
            raise
        self._mcp_cm = cm
        return self

    async def __aexit__(self, *exc: Any) -> None:
        # The connections' nursery was opened in __aenter__, in this task; close it here,
        # before Kernel.aclose (whose shielded scope must not contain a nursery exit).
        cm, self._mcp_cm = self._mcp_cm, None
        try:
            if cm is not None:
                await cm.__aexit__(*exc)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop the MCP servers, then close the kernel. Idempotent."""
        if self.connectors is not None:
            await self.connectors.aclose()
        await super().aclose()
