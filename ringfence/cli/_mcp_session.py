"""The MCP part of a CLI session: which servers connect, who answers elicitations, what failed.

- ``--mcp`` connects every enabled server of the manifests. Without it,
  ``ringfence call mcp.<server>.<tool>`` connects only the server(s) whose name
  part is ``<server>`` (lazily: nothing else starts).
- Elicitations go to :class:`~ringfence.mcp_host._terminal.TerminalElicitor`
  on a terminal, else they are declined and the reason becomes a warning.
- :func:`session_warnings` is every server that did not connect, with its
  cause (the mcp_host's explained error), plus declined elicitations: verbs
  print them on stderr and under ``warnings`` in ``--json`` output.

Nothing here imports the MCP SDK unless a server is to be connected.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..runtime import Kernel, RingfenceError

__all__ = ["ELICITOR_KEY", "mcp_failure_for", "mcp_setup", "session_warnings"]

ELICITOR_KEY = "cli_elicitor"


def server_part(tool: str | None) -> str | None:
    """``github`` for ``mcp.github.create_issue``; None for a tool that is not an MCP tool."""
    if tool is None or not tool.startswith("mcp."):
        return None
    parts = tool.split(".")
    return parts[1] if len(parts) >= 3 and parts[1] else None


def mcp_setup(
    args: argparse.Namespace, roots: Sequence[Path], tool: str | None, *, interactive: bool
) -> tuple[Any, dict[str, Any] | None]:
    """``(mcp_manifest, mcp_options)`` for ``create_kernel``: what this session connects.

    ``interactive``: attach the CLI's elicitor (a terminal form, or a decline
    with a reason). Raises InvalidArguments for a malformed manifest when one
    has to be read.
    """
    options: dict[str, Any] = {}
    manifest: Any = True
    if not getattr(args, "mcp", False):
        part = server_part(tool)
        if part is None:
            return None, None  # nothing connects: not even the MCP SDK is imported
        from ..mcp_host import load_manifests

        manifest = load_manifests(str(roots[0]) if roots else None)
        names = [s.name for s in manifest.servers if s.enabled and s.part == part]
        if not names:
            return None, None  # the call's not_found names the tool; nothing is started
        options["names"] = names
    if interactive:
        from ..mcp_host._terminal import cli_elicitor

        options["elicitor"] = cli_elicitor()
    return manifest, options


def _connectors(kernel: Kernel) -> Any:
    return kernel.extensions.get("mcp")


def mcp_failure_for(kernel: Kernel, tool: str) -> RingfenceError | None:
    """The connection error of the server ``tool`` belongs to, if that server failed."""
    connectors, part = _connectors(kernel), server_part(tool)
    if connectors is None or part is None:
        return None
    from ..mcp_host import sanitize_part

    for name, error in connectors.failures.items():
        if sanitize_part(name, "server") == part:
            return error
    return None


def failed_servers(kernel: Kernel) -> dict[str, RingfenceError]:
    connectors = _connectors(kernel)
    return dict(connectors.failures) if connectors is not None else {}


def session_warnings(kernel: Kernel, *, leave_out: RingfenceError | None = None) -> list[str]:
    """Servers that did not connect (with their cause) and elicitations declined without a terminal."""
    out = [
        f"{error.message} ({error.code}; server {name!r} is not connected in this session)"
        for name, error in failed_servers(kernel).items()
        if error is not leave_out
    ]
    connectors = _connectors(kernel)
    for connector in connectors if connectors is not None else ():
        out += [
            f"MCP server {connector.name!r} asked for input: {f['message']}"
            for f in connector.diagnostics.failures
            if f["action"] == "elicitation"
        ]
    elicitor = kernel.extensions.get(ELICITOR_KEY)
    out += list(getattr(elicitor, "notes", ()))
    return out
