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

import sys as _sys


def _main_module(argv: list[str]) -> str | None:
    """The module ``python -m`` was asked to run, from the interpreter's own argv, or None."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--check-hash-based-pycs":
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        if not arg.startswith("-") or arg == "-":
            return None  # a script, or stdin: no -m
        for j in range(1, len(arg)):
            if arg[j] in "cmWX":  # options whose value follows, in the word or as the next
                value = arg[j + 1 :] or (argv[i + 1] if i + 1 < len(argv) else "")
                if arg[j] == "m":
                    return value
                if arg[j] == "c":
                    return None
                i += 0 if arg[j + 1 :] else 1
                break
        i += 1
    return None


def _drop_working_directory() -> None:
    """``python -m ringfence`` runs with the working directory first on the import path,
    where the agent writes (the workspace is the default root): every module ringfence
    imports after that (``typing`` at once, RestrictedPython's optional ``DateTime`` at the
    first script, a backend's modules on first use) was looked up there first, and a
    ``DateTime.py`` a script wrote with ``write_file`` ran in the kernel, unconfined, at the
    next session's first script (until 2026-12-07). Dropped here, before any import:
    ringfence's own modules load through its package path, the rest from the environment.
    """
    argv = getattr(_sys, "argv", None)  # an embedding interpreter may have none
    if not isinstance(argv, list) or argv[:1] != ["-m"] or not _sys.path:
        return  # not while python -m looks for its module
    if getattr(_sys.flags, "safe_path", False):
        return  # python -P: the working directory is not on the path
    target = _main_module(list(getattr(_sys, "orig_argv", ())))
    if target is None or not (target == "ringfence" or target.startswith("ringfence.")):
        return
    import os

    try:
        here = os.getcwd()
    except OSError:
        return
    if _sys.path[0] in ("", ".", here):
        del _sys.path[0]


_drop_working_directory()

from typing import TYPE_CHECKING  # noqa: E402

from ._lazy import lazy_exports  # noqa: E402

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
