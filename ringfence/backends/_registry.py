"""Backends by name: how a session picks where ``run_shell`` runs.

A backend is a name and an async ``start(spec) -> BackendSession``. Adding a
third backend is one :func:`register_backend` call; the Gate, the kernel and
the ``run_shell`` tool do not change.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from ..runtime import InvalidArguments
from ._types import BackendSession, SessionSpec

__all__ = [
    "DEFAULT_BACKEND",
    "ENV_VARIABLE",
    "BackendStarter",
    "backend_names",
    "register_backend",
    "select_backend",
    "start_session",
]

BackendStarter = Callable[[SessionSpec], Awaitable[BackendSession]]

DEFAULT_BACKEND = "local"
ENV_VARIABLE = "RINGFENCE_EXECUTION_BACKEND"

_BACKENDS: dict[str, BackendStarter] = {}


def register_backend(name: str, start: BackendStarter, *, replace: bool = False) -> None:
    """Make ``start`` available as ``name``. Re-registering a name needs ``replace=True``."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise InvalidArguments(f"backend name {name!r} must be alphanumeric", field="name")
    if name in _BACKENDS and not replace:
        raise InvalidArguments(f"a backend named {name!r} is already registered", field="name")
    _BACKENDS[name] = start


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def select_backend(name: str | None = None) -> str:
    """The explicit ``name``, else ``$RINGFENCE_EXECUTION_BACKEND``, else ``local``.

    Raises InvalidArguments (field ``backend``) naming the known backends when
    the choice is not registered. Nothing falls back silently: an unknown name
    from the environment is an error too.
    """
    chosen = name or os.environ.get(ENV_VARIABLE) or DEFAULT_BACKEND
    if chosen not in _BACKENDS:
        where = "" if name else f" (from ${ENV_VARIABLE})"
        raise InvalidArguments(
            f"unknown execution backend {chosen!r}{where}; known: {', '.join(backend_names())}",
            field="backend",
        )
    return chosen


async def start_session(name: str | None, spec: SessionSpec) -> BackendSession:
    """Start a session on the selected backend (see :func:`select_backend`).

    Raises what the backend's start raises: ``Unavailable`` when its sandbox
    layer is missing (never a fallback to another backend), ``InvalidArguments``
    for a bad spec.
    """
    return await _BACKENDS[select_backend(name)](spec)
