"""Connect a kernel's MCP servers when it is entered (what ``create_kernel(mcp_manifest=…)`` does).

Connecting starts server processes, so it happens only on request and only
inside ``async with kernel``: a kernel startup opens :func:`connect_servers`
with :meth:`Kernel.enter_async_context`, so the connections' nursery opens
and closes in the task that entered the kernel, before the event stream is
sealed. The :class:`Connectors` are at ``kernel.extensions["mcp"]``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..runtime._errors import InvalidArguments
from ..runtime._kernel import Kernel
from ..runtime.policy._mcp import McpPolicy
from ._connect import connect_servers
from .manifest._config import ServerConfig, sanitize_part
from .manifest._load import Manifest, load_manifest, load_manifests

__all__ = ["connect_when_entered"]

ManifestSource = Manifest | str | os.PathLike[str] | bool


def _load(
    source: ManifestSource, workspace: str | os.PathLike[str] | None, secret_names: Sequence[str]
) -> Manifest:
    if isinstance(source, Manifest):
        return source
    if source is True:
        return load_manifests(workspace, secret_names=secret_names)
    if source is False:
        return Manifest()
    return load_manifest(source, secret_names=secret_names)


def connect_when_entered(
    kernel: Kernel,
    manifest: ManifestSource,
    *,
    workspace: str | os.PathLike[str] | None = None,
    options: Mapping[str, Any] | None = None,
    policy: McpPolicy | None = None,
    extra_servers: Sequence[ServerConfig] = (),
) -> None:
    """Arrange for ``kernel`` to connect the servers of ``manifest`` on ``async with``.

    ``manifest``: a :class:`Manifest`, a path to an ``mcp.toml``, or ``True``
    for the user manifest plus ``<workspace>/.ringfence/mcp.toml``. The
    manifest is read at entry, so a malformed file raises from ``async with``.
    ``options`` go to :func:`connect_servers`. ``policy`` (the policy layers'
    ``[mcp.<server>]`` statements) decides each server's trust and read tools
    (:meth:`ServerConfig.with_policy`). The manifest's warnings (deprecated
    keys) become ``mcp_manifest_warning`` events. ``extra_servers`` (a
    trusted plugin's) join the manifest's; one whose registered name
    (``mcp.<server>.``) another server has already refuses the session.
    """

    async def startup(k: Kernel) -> None:
        # The kernel's secret names (create_kernel(secret_names=...)) hold for the manifest too.
        loaded = _with_servers(_load(manifest, workspace, k.redactor.names), extra_servers)
        if policy is not None:
            loaded = replace(loaded, servers=tuple(s.with_policy(policy) for s in loaded.servers))
        for warning in loaded.warnings:
            k.events.emit("mcp_manifest_warning", k.session_id, message=warning)
        cm = connect_servers(k, loaded, workspace=workspace, **dict(options or {}))
        k.extensions["mcp"] = await k.enter_async_context(cm)

    kernel.add_startup(startup)


def _with_servers(loaded: Manifest, extra: Sequence[ServerConfig]) -> Manifest:
    if not extra:
        return loaded
    parts = {sanitize_part(s.name, "server"): s for s in loaded.servers}
    for server in extra:
        part = sanitize_part(server.name, "server")
        if part in parts:
            raise InvalidArguments(
                f"{server.origin}: server {server.name!r} would register as mcp.{part}.*, "
                f"as {parts[part].name!r} ({parts[part].origin}) does; rename one of them",
                field="name",
            )
        parts[part] = server
    return replace(loaded, servers=loaded.servers + tuple(extra))
