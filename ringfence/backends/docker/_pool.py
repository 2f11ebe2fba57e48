"""Warm pools: started, generic, hardened containers that a starting session claims at once.

A cold docker session pays a container start (create, start, attach the supervisor,
probe the overlay: ~200-300 ms here). A :class:`WarmPool` keeps ``size`` of them
started for one :class:`._warm.PoolShape` (engine, image, limits, runtime, network, user,
number of roots), each with its supervisor attached and its first overlay probed.
While the pool is open (``async with WarmPool(...)``) every change-set session whose
options have that shape takes one in :func:`._session.start_docker`: no Engine API call
at all. The claimed container is the session's alone: it is removed when the session
closes, never handed out again, and the pool starts a fresh one in the background.

A pooled container is generic because nothing of a workspace is mounted in it: its
roots are empty volumes, and it is a *shipped* session (:mod:`..engines._remote`)
on whichever engine the pool is for, the local one included: the claiming
session's first command ships the roots (a tar through the supervisor's stdin for a
small workspace) and every command's writes come back as its change set. So a pool
needs change sets, and a pooled session cannot run ``run_tool_script`` (the bridge
needs the host's paths; it is refused naming the engine, as on a remote engine).

Every pooled container holds a lease (:mod:`._container`): if the process that keeps
the pool dies, its containers and their volumes go within about a second. Figures
(warm, starting, claims, misses, failures) are :meth:`WarmPool.stats`, in each
pooled or missed session's ``backend_started`` metadata (``pool``), and the
containers are labelled ``ringfence.pool`` for ``ringfence doctor``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import trio

from ...runtime._errors import InvalidArguments, RingfenceError
from .._trees import claim, sweep_unclaimed
from .._types import SessionSpec
from ..engines._engines import Engine
from ._options import DockerOptions
from ._session import DockerSession, local_engine, pool_shape, start_cold
from ._warm import PoolShape, register, unregister

__all__ = ["PoolStats", "WarmPool"]

MAX_SIZE = 64
_RETRY = 2.0  # after a failed start, before the next try (a broken engine is not hammered)


@dataclass(frozen=True)
class PoolStats:
    """A pool's figures at one moment."""

    size: int
    warm: int
    starting: int
    claims: int
    misses: int
    failures: int
    last_error: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "warm": self.warm,
            "starting": self.starting,
            "claims": self.claims,
            "misses": self.misses,
            "failures": self.failures,
            **({"last_error": self.last_error} if self.last_error else {}),
        }


_PREFIX = "ringfence-pool-"


def _sweep_pools() -> int:
    """Remove the pool directories in the temporary directory whose pool's process is gone."""
    return sweep_unclaimed(Path(tempfile.gettempdir()), prefix=_PREFIX)


def _engine_table(engine: Engine) -> dict[str, Any]:
    return {**engine.as_table(), "ship": "always"}


class WarmPool:
    """``size`` started containers of one shape, refilled in the background while open.

    ``options`` are the docker backend's (``image``, ``memory``, ``cpus``, ``pids``,
    ``tmp_size``, ``runtime``, ``user``, ``base_url`` or one ``engines`` table); a
    session claims from the pool when its own options give the same shape, with
    ``roots`` workspace roots and ``network``. Bad values raise InvalidArguments here.
    """

    def __init__(
        self,
        options: Mapping[str, Any] | None = None,
        *,
        size: int = 2,
        roots: int = 1,
        network: bool = False,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
            raise InvalidArguments(
                f"a warm pool's size must be 1 to {MAX_SIZE}, not {size!r}", field="size"
            )
        if isinstance(roots, bool) or not isinstance(roots, int) or not 1 <= roots <= 16:
            raise InvalidArguments(f"roots must be 1 to 16, not {roots!r}", field="roots")
        opts = DockerOptions.from_mapping(options or {})
        if len(opts.engines) > 1:
            raise InvalidArguments(
                "a warm pool is for one engine; open one pool per engine",
                field="options.engines",
            )
        base = opts.engines[0] if opts.engines else local_engine(opts)
        self.engine = replace(base, ship="always")
        self.shape: PoolShape = pool_shape(opts, opts.engines[0] if opts.engines else None,
                                           network, roots)  # fmt: skip
        self.size = size
        self._network = network
        self._options = {
            **{k: v for k, v in (options or {}).items() if k not in ("engines", "base_url")},
            "image": opts.image,
            "user": self.shape.user,
            "engines": [_engine_table(self.engine)],
        }
        self._opts = DockerOptions.from_mapping(self._options)
        self._ready: deque[DockerSession] = deque()
        self._starting = 0
        self._claims = 0
        self._misses = 0
        self._failures = 0
        self._last_error: str | None = None
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: Any = None
        self._dir: Path | None = None
        self._mark: int | None = None  # the directory's claim (.._trees.claim) while open

    # -- what sessions see --------------------------------------------------------------------

    def stats(self) -> PoolStats:
        return PoolStats(
            size=self.size,
            warm=len(self._ready),
            starting=self._starting,
            claims=self._claims,
            misses=self._misses,
            failures=self._failures,
            last_error=self._last_error,
        )

    def take(self) -> DockerSession | None:
        """A warm session, or None (a miss). Never blocks; the pool refills in the background."""
        while self._ready:
            session = self._ready.popleft()
            self._signal()
            if session.alive():
                self._claims += 1
                return session
            if self._nursery is not None:  # died while waiting: removed in the background
                self._nursery.start_soon(session.aclose)
        return None

    def missed(self) -> None:
        self._misses += 1

    async def wait_warm(self, count: int | None = None, timeout: float = 120.0) -> None:
        """Wait until ``count`` (default ``size``) containers are warm (tests, benchmarks)."""
        want = self.size if count is None else count
        with trio.fail_after(timeout):
            while len(self._ready) < want:
                await self._wait_changed()

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> WarmPool:
        # A killed pool's process closes nothing (its containers go with their leases): its
        # directory is claimed for the pool's life, and one nobody holds goes here.
        with contextlib.suppress(OSError):
            await trio.to_thread.run_sync(_sweep_pools)
        self._dir = Path(tempfile.mkdtemp(prefix=_PREFIX))
        self._mark = claim(self._dir)
        for i in range(self.shape.roots):
            (self._dir / f"root{i}").mkdir()
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        self._nursery.start_soon(self._keep)
        register(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        unregister(self)
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        try:
            return await self._nursery_manager.__aexit__(exc_type, exc, tb)  # type: ignore[no-any-return]
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                while self._ready:
                    await self._ready.popleft().aclose()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
            if self._mark is not None:
                os.close(self._mark)
                self._mark = None

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _keep(self) -> None:
        """Start containers until ``size`` are warm or starting; again after each claim."""
        assert self._nursery is not None
        while True:
            while len(self._ready) + self._starting < self.size:
                self._starting += 1
                self._nursery.start_soon(self._start_one)
            await self._changed.wait()

    async def _start_one(self) -> None:
        assert self._dir is not None
        spec = SessionSpec(
            roots=tuple(self._dir / f"root{i}" for i in range(self.shape.roots)),
            network=self._network,
            spool_dir=self._dir,
            options=self._options,
            change_sets=True,
        )
        failed = False
        try:
            session = await start_cold(spec, self._opts, self.engine, pooled=True)
        except RingfenceError as exc:
            self._failures += 1
            self._last_error = exc.message
            failed = True
        else:
            self._ready.append(session)
        finally:
            self._starting -= 1
        if failed:
            with contextlib.suppress(trio.Cancelled):
                await trio.sleep(_RETRY)
        self._signal()
