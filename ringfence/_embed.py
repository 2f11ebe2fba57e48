"""Assemble a Kernel with ringfence's own tools: the embedding entry point.

``runtime`` stays free of its clients; this module, outside it, is where the
workspace, backends, bridge and MCP connectors are plugged into a Kernel.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .backends import register_shell_tool, select_backend
from .runtime import Approver, FileSink, Kernel, Posture, Rules, default_approver
from .workspace import Workspace, register_file_tools

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
    backend_options: Mapping[str, Any] | None = None,
    rules: Rules | None = None,
    dry_run: bool = False,
    plan_path: str | os.PathLike[str] | None = None,
    events_path: str | os.PathLike[str] | None = None,
    **kernel_options: Any,
) -> Kernel:
    """A Kernel with the native tools registered for ``roots``.

    ``backend`` is ``"local"`` (default, or ``RINGFENCE_EXECUTION_BACKEND``) or
    ``"docker"``; backend sessions start on first use and close with the
    kernel. ``backend_options`` go to the backend (docker: ``image``,
    ``memory``, ``cpus``, ``pids``, ``user``). Use the result as ``async with create_kernel(...) as kernel:``.
    """
    # backends: checked before anything opens, so an unknown name leaks nothing
    backend_name = select_backend(backend)
    # workspace: the roots file tools are confined to (opened first, so a bad root fails fast)
    workspace = Workspace(workspace_roots_from_env(list(roots)))
    try:
        kernel = Kernel(
            posture=Posture.parse(posture),
            approver=approver if approver is not None else default_approver(),
            rules=rules or Rules(),
            events_sink=FileSink(events_path) if events_path else None,
            dry_run=dry_run,
            plan_path=Path(plan_path) if plan_path else None,
            **kernel_options,
        )
    except BaseException:
        workspace.close()
        raise
    register_file_tools(kernel, workspace)

    async def close_workspace() -> None:
        workspace.close()

    kernel.push_async_callback(close_workspace)
    # backends: run_shell; its session starts on the first call and closes with the kernel
    register_shell_tool(kernel, backend=backend_name, workspace=workspace, options=backend_options)
    return kernel
