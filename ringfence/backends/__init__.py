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
    backend_names as backend_names,
    register_backend as register_backend,
    select_backend as select_backend,
    start_session as start_session,
)
from ._run_shell import register_shell_tool as register_shell_tool
from ._types import (
    BackendSession as BackendSession,
    OutputCallback as OutputCallback,
    SessionSpec as SessionSpec,
    ShellResult as ShellResult,
)

if TYPE_CHECKING:
    from .confined._plan import ConfinedOptions as ConfinedOptions
    from .docker._options import DockerOptions as DockerOptions
    from .docker._pool import PoolStats as PoolStats, WarmPool as WarmPool

# Names load on first use (PEP 562): a kernel on the local backend, or the CLI's
# --help, never pays for the docker SDK; a session that runs no command (`ringfence
# call read_file`) never imports a backend's module, the process supervisor or psutil.
# The rest (each backend's session class and start function, the docker helpers, the
# exec-check rules) stays in its private module: ``confined/``, ``docker/``, ``_host``.
_LAZY = {
    "ConfinedOptions": ".confined._plan",
    "DockerOptions": ".docker._options",
    "PoolStats": ".docker._pool",
    "WarmPool": ".docker._pool",
}

__all__ = [
    "DEFAULT_BACKEND",
    "BackendSession",
    "OutputCallback",
    "SessionSpec",
    "ShellResult",
    "backend_names",
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
