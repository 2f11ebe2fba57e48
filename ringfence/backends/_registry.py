"""Backends by name: how a session picks where ``run_shell`` runs.

A backend is a name and an async ``start(spec) -> BackendSession``. Adding a
third backend is one :func:`register_backend` call; the Gate, the kernel and
the ``run_shell`` tool do not change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..runtime._errors import InvalidArguments
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
# The command line's default backend (read by ``ringfence.cli``, never by the library).
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
    """The explicit ``name``, else ``local`` (confined).

    Never the environment: a library caller who names no backend gets the
    confined default whatever the process's environment says (the command
    line reads ``$RINGFENCE_EXECUTION_BACKEND``, :data:`ENV_VARIABLE`, and
    passes the name). Raises InvalidArguments (field ``backend``) naming the
    known backends when the choice is not registered; nothing falls back.
    """
    chosen = name or DEFAULT_BACKEND
    if chosen not in _BACKENDS:
        raise InvalidArguments(
            f"unknown execution backend {chosen!r}; known: {', '.join(backend_names())}",
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
