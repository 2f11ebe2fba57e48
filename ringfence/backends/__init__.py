"""ringfence.backends: where ``run_shell`` runs (see ARCHITECTURE.md).

A backend is started into a :class:`BackendSession` per kernel session; the
session runs one command at a time and returns a :class:`ShellResult`.
Built in: ``local`` (host child processes) and ``docker`` (one warm,
hardened container per session). Select with ``--backend``,
``$RINGFENCE_EXECUTION_BACKEND`` or :func:`select_backend`; add one with
:func:`register_backend`.
"""

from ._docker import CONTAINER_LABEL as CONTAINER_LABEL
from ._docker import DockerOptions as DockerOptions
from ._docker import DockerSession as DockerSession
from ._docker import remove_stale_containers as remove_stale_containers
from ._docker import start_docker as start_docker
from ._dockerapi import connect_docker as connect_docker
from ._dockerapi import map_docker_errors as map_docker_errors
from ._dockerapi import translate_docker_error as translate_docker_error
from ._images import IMAGES as IMAGES
from ._images import ImageInfo as ImageInfo
from ._images import ImageRecipe as ImageRecipe
from ._images import build_image as build_image
from ._images import ensure_image as ensure_image
from ._images import list_images as list_images
from ._local import LocalSession as LocalSession
from ._local import start_local as start_local
from ._registry import DEFAULT_BACKEND as DEFAULT_BACKEND
from ._registry import ENV_VARIABLE as ENV_VARIABLE
from ._registry import backend_names as backend_names
from ._registry import register_backend as register_backend
from ._registry import select_backend as select_backend
from ._registry import start_session as start_session
from ._tool import ShellTool as ShellTool
from ._tool import WorkspaceLike as WorkspaceLike
from ._tool import register_shell_tool as register_shell_tool
from ._types import BackendSession as BackendSession
from ._types import OutputCallback as OutputCallback
from ._types import SessionSpec as SessionSpec
from ._types import ShellResult as ShellResult

register_backend("local", start_local)
register_backend("docker", start_docker)
