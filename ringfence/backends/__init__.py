"""ringfence.backends: where ``run_shell`` runs (see ARCHITECTURE.md).

A backend is started into a :class:`BackendSession` per kernel session; the
session runs one command at a time and returns a :class:`ShellResult`.
Built in: ``local`` (confined: a warm bubblewrap sandbox per session with
Landlock, seccomp and rlimits; the default), ``host`` (unconfined host child
processes, explicitly chosen) and ``docker`` (one warm, hardened container
per session). Select with ``--backend`` or ``$RINGFENCE_EXECUTION_BACKEND``
(the command line) or by name (:func:`select_backend`; the library never reads
the environment); add one with :func:`register_backend`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._execrules import ExecRules as ExecRules, exec_rules as exec_rules
from ._registry import (
    DEFAULT_BACKEND as DEFAULT_BACKEND,
    ENV_VARIABLE as ENV_VARIABLE,
    backend_names as backend_names,
    register_backend as register_backend,
    select_backend as select_backend,
    start_session as start_session,
)
from ._tool import (
    ShellTool as ShellTool,
    WorkspaceLike as WorkspaceLike,
    register_shell_tool as register_shell_tool,
)
from ._types import (
    BackendSession as BackendSession,
    OutputCallback as OutputCallback,
    SessionSpec as SessionSpec,
    ShellResult as ShellResult,
    Upper as Upper,
)

if TYPE_CHECKING:
    from ._confined import (
        ConfinedOptions as ConfinedOptions,
        ConfinedSession as ConfinedSession,
        Layer as Layer,
        start_confined as start_confined,
    )
    from ._confined_exec import ConfinedExec as ConfinedExec, confine_exec as confine_exec
    from ._docker import (
        CONTAINER_LABEL as CONTAINER_LABEL,
        DockerSession as DockerSession,
        remove_stale_containers as remove_stale_containers,
        start_docker as start_docker,
    )
    from ._dockerapi import (
        connect_docker as connect_docker,
        map_docker_errors as map_docker_errors,
        translate_docker_error as translate_docker_error,
    )
    from ._dockeroptions import DockerOptions as DockerOptions
    from ._imagebuild import (
        build_image as build_image,
        ensure_image as ensure_image,
        list_images as list_images,
    )
    from ._images import IMAGES as IMAGES, ImageInfo as ImageInfo, ImageRecipe as ImageRecipe
    from ._local import HostSession as HostSession, start_host as start_host

# Names load on first use (PEP 562): a kernel on the local backend, or the CLI's
# --help, never pays for the docker SDK; a session that runs no command (`ringfence
# call read_file`) never imports a backend's module, the process supervisor or psutil.
_LAZY = {
    "ConfinedOptions": "._confined",
    "ConfinedSession": "._confined",
    "Layer": "._confined",
    "start_confined": "._confined",
    # ``local`` is the confined backend; these two names keep older imports working.
    "LocalSession": "._confined:ConfinedSession",
    "start_local": "._confined:start_confined",
    "ConfinedExec": "._confined_exec",
    "confine_exec": "._confined_exec",
    "HostSession": "._local",
    "start_host": "._local",
    "IMAGES": "._images",
    "ImageInfo": "._images",
    "ImageRecipe": "._images",
    "CONTAINER_LABEL": "._docker",
    "DockerOptions": "._dockeroptions",
    "DockerSession": "._docker",
    "remove_stale_containers": "._docker",
    "start_docker": "._docker",
    "connect_docker": "._dockerapi",
    "map_docker_errors": "._dockerapi",
    "translate_docker_error": "._dockerapi",
    "build_image": "._imagebuild",
    "ensure_image": "._imagebuild",
    "list_images": "._imagebuild",
}


__all__ = [
    "DEFAULT_BACKEND",
    "ENV_VARIABLE",
    "BackendSession",
    "ExecRules",
    "OutputCallback",
    "SessionSpec",
    "ShellResult",
    "Upper",
    "ShellTool",
    "WorkspaceLike",
    "backend_names",
    "exec_rules",
    "register_backend",
    "register_shell_tool",
    "select_backend",
    "start_session",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


# The built-in backends, each imported when a session starts on it.


async def _start_local(spec: SessionSpec) -> BackendSession:
    from ._confined import start_confined

    return await start_confined(spec)


async def _start_host(spec: SessionSpec) -> BackendSession:
    from ._local import start_host

    return await start_host(spec)


async def _start_docker(spec: SessionSpec) -> BackendSession:
    from ._docker import start_docker

    return await start_docker(spec)


register_backend("local", _start_local)
register_backend("host", _start_host)
register_backend("docker", _start_docker)
