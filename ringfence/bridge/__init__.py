"""ringfence.bridge: ``run_tool_script`` — model-written pipelines, every call gated.

A script runs in a sandboxed child process (``_runner``, with ``_restricted``,
``_allowlist`` and ``_sandbox``) and reaches the kernel only over an
authenticated bridge (``_wire``, ``_channel``);
``_launch`` starts the runner, ``_host`` runs one script's session;
each call inside it (``tools.<name>(...)``, ``call_tool``, each call of a
``parallel`` batch) is one ``Kernel.invoke``, the same Gate as a direct
call; ``describe_tools`` renders a script's ``tools`` namespace as Python
stubs for a model's prompt.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._allowlist import ALLOWED_MODULES as ALLOWED_MODULES
from ._config import (
    SANDBOX_LEVELS as SANDBOX_LEVELS,
    ScriptConfig as ScriptConfig,
    ScriptLimits as ScriptLimits,
    ScriptResult as ScriptResult,
)
from ._tool import register_script_tool as register_script_tool

if TYPE_CHECKING:
    from ._stubs import describe_tools as describe_tools

# ``describe_tools`` loads on first use (PEP 562). The rest (the listener, the launchers,
# the wire, the docker transport) stays in its private module: registering
# run_tool_script into a session that never runs a script costs none of it.
_LAZY = {"describe_tools": "._stubs"}

__all__ = [
    "ALLOWED_MODULES",
    "SANDBOX_LEVELS",
    "ScriptConfig",
    "ScriptLimits",
    "ScriptResult",
    "register_script_tool",
    *_LAZY,
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
