"""Which warm pool a starting docker session may claim from: the pools' shapes and registry.

A pooled container is generic: nothing of a workspace is mounted in it (its roots are
empty volumes that the claiming session ships into), so any session whose options give
the same :class:`PoolShape` can take it. :mod:`._pool` keeps pools and registers each
open one here; :func:`..docker._session.start_docker` asks :func:`claim` first. This
module imports no session code (the session imports it; the pool imports both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["PoolShape", "claim", "register", "unregister"]


@dataclass(frozen=True)
class PoolShape:
    """What makes two pooled containers interchangeable: engine, image, limits, runtime,
    network, the commands' user and the number of workspace roots."""

    engine: str  # the engine's address and its TLS files, as one string
    image: str
    memory: str
    cpus: float
    pids: int
    tmp_size: str
    runtime: str | None
    network: bool
    user: str
    roots: int


class _Pool(Protocol):
    shape: PoolShape

    def take(self) -> Any | None: ...

    def missed(self) -> None: ...


_OPEN: list[_Pool] = []


def register(pool: _Pool) -> None:
    _OPEN.append(pool)


def unregister(pool: _Pool) -> None:
    if pool in _OPEN:
        _OPEN.remove(pool)


def claim(shape: PoolShape) -> tuple[Any | None, _Pool | None]:
    """A started session from an open pool of this shape, and the pool (``(None, pool)`` is a
    miss: the pool was empty; ``(None, None)``: no pool has this shape)."""
    for pool in _OPEN:
        if pool.shape == shape:
            session = pool.take()
            if session is None:
                pool.missed()
            return session, pool
    return None, None
