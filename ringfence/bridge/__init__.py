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
from ._sandbox import landlock_abi as landlock_abi
from ._tool import (
    DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS as MAX_TIMEOUT_SECONDS,
    SCRIPT_TOOL as SCRIPT_TOOL,
    register_script_tool as register_script_tool,
    unavailable_backend as unavailable_backend,
)
from ._wire import ProtocolError as ProtocolError

if TYPE_CHECKING:
    from ._channel import BridgeListener as BridgeListener
    from ._docker import (
        DockerScriptLauncher as DockerScriptLauncher,
        bridge_mounts as bridge_mounts,
        make_bridge_dir as make_bridge_dir,
        remove_bridge_dir as remove_bridge_dir,
    )
    from ._host import run_script as run_script
    from ._launch import (
        ChildProcess as ChildProcess,
        Launcher as Launcher,
        LaunchRequest as LaunchRequest,
        LocalLauncher as LocalLauncher,
        child_env as child_env,
    )
    from ._stubs import describe_tools as describe_tools

# A script's run (listener, launcher, the process supervisor it spawns through, the
# docker transport) loads on first use (PEP 562): registering run_tool_script into a
# session that never runs a script costs none of it.
_LAZY = {
    "BridgeListener": "._channel",
    "DockerScriptLauncher": "._docker",
    "bridge_mounts": "._docker",
    "make_bridge_dir": "._docker",
    "remove_bridge_dir": "._docker",
    "run_script": "._host",
    "describe_tools": "._stubs",
    "ChildProcess": "._launch",
    "Launcher": "._launch",
    "LaunchRequest": "._launch",
    "LocalLauncher": "._launch",
    "child_env": "._launch",
}

__all__ = [
    "ALLOWED_MODULES",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "SANDBOX_LEVELS",
    "SCRIPT_TOOL",
    "BridgeListener",
    "ChildProcess",
    "DockerScriptLauncher",
    "LaunchRequest",
    "Launcher",
    "LocalLauncher",
    "ProtocolError",
    "ScriptConfig",
    "ScriptLimits",
    "ScriptResult",
    "bridge_mounts",
    "child_env",
    "describe_tools",
    "landlock_abi",
    "make_bridge_dir",
    "register_script_tool",
    "remove_bridge_dir",
    "run_script",
    "unavailable_backend",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
