"""ringfence: a governed, sandboxed tool-execution runtime for AI agents.

Embed it::

    import ringfence

    async with ringfence.create_kernel(roots=["./project"], posture="ask") as kernel:
        text = await kernel.call("read_file", {"path": "README.md"})

Names are loaded on first use (PEP 562), so a process that needs one small
module — the script runner inside its sandbox, say — does not pay for
importing the kernel, the Docker SDK and the MCP SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

_RUNTIME_NAMES = (
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "Consequence",
    "Denied",
    "GitMetadata",
    "HeadlessDenyApprover",
    "InvalidArguments",
    "Kernel",
    "NotFound",
    "Outcome",
    "OutsideWorkspace",
    "Places",
    "Posture",
    "ProviderTools",
    "RingfenceError",
    "Rules",
    "ScriptedApprover",
    "TerminalApprover",
    "ToolError",
    "ToolFormat",
    "ToolSpec",
    "ToolTimeout",
    "Unavailable",
    "Unwritable",
    "use_places",
)
_LAZY = {name: "ringfence.runtime" for name in _RUNTIME_NAMES}
_LAZY["create_kernel"] = "ringfence._embed"

__all__ = [*_LAZY, "__version__"]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


if TYPE_CHECKING:  # static names for type checkers and IDEs
    from ._embed import create_kernel as create_kernel
    from .runtime import (
        ApprovalAnswer as ApprovalAnswer,
        ApprovalRequest as ApprovalRequest,
        Approver as Approver,
        Consequence as Consequence,
        Denied as Denied,
        GitMetadata as GitMetadata,
        HeadlessDenyApprover as HeadlessDenyApprover,
        InvalidArguments as InvalidArguments,
        Kernel as Kernel,
        NotFound as NotFound,
        Outcome as Outcome,
        OutsideWorkspace as OutsideWorkspace,
        Places as Places,
        Posture as Posture,
        ProviderTools as ProviderTools,
        RingfenceError as RingfenceError,
        Rules as Rules,
        ScriptedApprover as ScriptedApprover,
        TerminalApprover as TerminalApprover,
        ToolError as ToolError,
        ToolFormat as ToolFormat,
        ToolSpec as ToolSpec,
        ToolTimeout as ToolTimeout,
        Unavailable as Unavailable,
        Unwritable as Unwritable,
        use_places as use_places,
    )
