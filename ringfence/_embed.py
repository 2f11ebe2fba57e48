"""Assemble a Kernel with ringfence's own tools: the embedding entry point.

``runtime`` stays free of its clients; this module, outside it, is where the
workspace, backends, bridge and MCP connectors are plugged into a Kernel.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .runtime import Approver, FileSink, Kernel, Posture, Rules, default_approver

__all__ = ["create_kernel", "workspace_roots_from_env"]


def workspace_roots_from_env(explicit: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
    """``--workspace`` values, else ``RINGFENCE_WORKSPACE_ROOTS``, else the current directory."""
    if explicit:
        return [Path(p) for p in explicit]
    env = os.environ.get("RINGFENCE_WORKSPACE_ROOTS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path.cwd()]


def create_kernel(
    *,
    roots: Iterable[str | os.PathLike[str]] = (),
    posture: Posture | str = Posture.ASK,
    approver: Approver | None = None,
    backend: str | None = None,
    rules: Rules | None = None,
    dry_run: bool = False,
    plan_path: str | os.PathLike[str] | None = None,
    events_path: str | os.PathLike[str] | None = None,
    mcp_manifest: Any = None,
    mcp_options: dict[str, Any] | None = None,
    **kernel_options: Any,
) -> Kernel:
    """A Kernel with the native tools registered for ``roots``.

    ``backend`` is ``"local"`` (default, or ``RINGFENCE_EXECUTION_BACKEND``) or
    ``"docker"``; backend sessions start on first use and close with the
    kernel. Use the result as ``async with create_kernel(...) as kernel:``.

    ``mcp_manifest`` (opt-in, because connecting starts server processes): a
    ``ringfence.mcp_host.Manifest``, a path to an ``mcp.toml``, or ``True`` for
    the user manifest plus the first root's ``.ringfence/mcp.toml``. The
    servers connect when the kernel is entered and stop when it closes;
    ``mcp_options`` go to ``ringfence.mcp_host.connect_servers``.
    """
    roots = list(roots)
    kernel_cls: type[Kernel] = Kernel
    if mcp_manifest is not None:
        from .mcp_host import McpKernel

        kernel_cls = McpKernel
        kernel_options.update(
            mcp_manifest=mcp_manifest,
            mcp_workspace=Path(roots[0]) if roots else None,
            mcp_options=mcp_options or {},
        )
    kernel = kernel_cls(
        posture=Posture.parse(posture),
        approver=approver if approver is not None else default_approver(),
        rules=rules or Rules(),
        events_sink=FileSink(events_path) if events_path else None,
        dry_run=dry_run,
        plan_path=Path(plan_path) if plan_path else None,
        **kernel_options,
    )
    del roots, backend  # wired in by the workspace and backends packages
    return kernel
