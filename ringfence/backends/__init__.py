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
from ._registry import (
    DEFAULT_BACKEND as DEFAULT_BACKEND,
    ENV_VARIABLE as ENV_VARIABLE,
    backend_names as backend_names,
    register_backend as register_backend,
    select_backend as select_backend,
    start_session as start_session,
)
from ._run_shell import (
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
from .confined._execrules import ExecRules as ExecRules, exec_rules as exec_rules

if TYPE_CHECKING:
    from ._host import HostSession as HostSession, start_host as start_host
    from .confined._exec import (
        ConfinedExec as ConfinedExec,
        ExecChanges as ExecChanges,
        confine_exec as confine_exec,
    )
    from .confined._session import (
        ConfinedOptions as ConfinedOptions,
        ConfinedSession as ConfinedSession,
        Layer as Layer,
        start_confined as start_confined,
    )
    from .docker._api import (
        connect_docker as connect_docker,
        map_docker_errors as map_docker_errors,
        translate_docker_error as translate_docker_error,
    )
    from .docker._imagebuild import (
        build_image as build_image,
        ensure_image as ensure_image,
        list_images as list_images,
    )
    from .docker._images import IMAGES as IMAGES, ImageInfo as ImageInfo, ImageRecipe as ImageRecipe
    from .docker._options import DockerOptions as DockerOptions
    from .docker._pool import PoolStats as PoolStats, WarmPool as WarmPool
    from .docker._session import (
        CONTAINER_LABEL as CONTAINER_LABEL,
        DockerSession as DockerSession,
        remove_stale_containers as remove_stale_containers,
        start_docker as start_docker,
    )

# Names load on first use (PEP 562): a kernel on the local backend, or the CLI's
# --help, never pays for the docker SDK; a session that runs no command (`ringfence
# call read_file`) never imports a backend's module, the process supervisor or psutil.
_LAZY = {
    "ConfinedOptions": ".confined._session",
    "ConfinedSession": ".confined._session",
    "Layer": ".confined._session",
    "start_confined": ".confined._session",
    # ``local`` is the confined backend; these two names keep older imports working.
    "LocalSession": ".confined._session:ConfinedSession",
    "start_local": ".confined._session:start_confined",
    "ConfinedExec": ".confined._exec",
    "confine_exec": ".confined._exec",
    "ExecChanges": ".confined._exec",
    "HostSession": "._host",
    "start_host": "._host",
    "IMAGES": ".docker._images",
    "ImageInfo": ".docker._images",
    "ImageRecipe": ".docker._images",
    "CONTAINER_LABEL": ".docker._session",
    "DockerOptions": ".docker._options",
    "PoolStats": ".docker._pool",
    "WarmPool": ".docker._pool",
    "DockerSession": ".docker._session",
    "remove_stale_containers": ".docker._session",
    "start_docker": ".docker._session",
    "connect_docker": ".docker._api",
    "map_docker_errors": ".docker._api",
    "translate_docker_error": ".docker._api",
    "build_image": ".docker._imagebuild",
    "ensure_image": ".docker._imagebuild",
    "list_images": ".docker._imagebuild",
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
    from .confined._session import start_confined

    return await start_confined(spec)


async def _start_host(spec: SessionSpec) -> BackendSession:
    from ._host import start_host

    return await start_host(spec)


async def _start_docker(spec: SessionSpec) -> BackendSession:
    from .docker._session import start_docker

    return await start_docker(spec)


register_backend("local", _start_local)
register_backend("host", _start_host)
register_backend("docker", _start_docker)
