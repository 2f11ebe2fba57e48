"""Serving the review page: loopback only, on hypercorn + trio, for the life of a kernel.

:func:`serve_review` binds a loopback address (any other is refused: there is
no option to widen it; a name is checked again by the address it was bound on), generates the token (``secrets.token_urlsafe(32)``)
unless one is given, registers it as a secret of the kernel (so no record or
result can carry it), and serves :class:`._app.PathToken` → ``serve``'s
``RequestGuard`` → :class:`._app.ReviewApp`, at most
:data:`..serve._connections.MAX_CONNECTIONS` connections at once (a flood without the token
displaces only itself: :mod:`..serve._connections`). It records ``review_started``
(address, never the token) and, bounded per window, every refused request
(``review_refused``, ``review_refused_summary``).

:func:`attach_review` runs it inside ``async with kernel`` (a kernel startup),
so the page stops, and every question still waiting on it is denied, before
the session's event stream is sealed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config

from ..runtime._errors import InvalidArguments
from ..runtime._kernel import Kernel
from ..runtime._net import is_loopback
from ..serve._connections import Admitted, ConnectionLimit, serve_bounded
from ..serve._http import HttpOptions, RefusalAudit, RequestGuard, bind_refusal, host_literal
from ._app import MAX_FORM_BYTES, PathToken, ReviewApp
from ._approver import ReviewApprover
from ._feed import EventFeed
from ._site import ReviewSite

__all__ = ["ReviewOptions", "attach_review", "serve_review"]


@dataclass(frozen=True)
class ReviewOptions:
    """Where the page listens (loopback only; port 0 picks a free one) and what it shows."""

    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    plans: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not is_loopback(self.host):
            raise InvalidArguments(
                f"the review page listens on loopback only, not {self.host!r}: it can approve "
                "calls and undo changes, so it is never offered to the network",
                field="host",
            )
        if not 0 <= self.port <= 65535:
            raise InvalidArguments(f"port {self.port} is not in 0-65535", field="port")


async def serve_review(
    site: ReviewSite,
    options: ReviewOptions,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``site`` until cancelled; ``task_status.started(url)`` with the token in it.

    Raises InvalidArguments naming the address when it cannot be bound.
    """
    http = HttpOptions(
        token=options.token or HttpOptions.generate_token(),
        host=options.host,
        port=options.port,
        token_configured=options.token is not None,
    )
    site.kernel.register_secret(http.token)
    audit = RefusalAudit(
        emit=lambda kind, **data: site.emit(kind.replace("serve_", "review_"), **data),
        clock=trio.current_time,
    )
    app = ReviewApp(site, on_refused=lambda status, _text, scope: audit.refused(status, scope))
    connections = ConnectionLimit()
    guard = RequestGuard(
        Admitted(app, connections),
        http.token,
        on_refused=audit.refused,
        max_body_bytes=MAX_FORM_BYTES,
    )
    config = Config()
    config.bind = [f"{host_literal(options.host)}:{options.port}"]
    config.accesslog = None
    config.loglevel = "WARNING"  # its "Running on" line names the address without the token
    config.graceful_timeout = 1.0

    async def listen(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_bounded(PathToken(guard), config, connections, task_status=task_status)
        except OSError as exc:  # the bind
            refusal = bind_refusal(exc, config.bind[0], "the review page ")
            if refusal is None:
                raise
            raise refusal from None

    try:
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(listen)
            _loopback_only(options.host, binds)
            port = int(binds[0].rsplit(":", 1)[1])
            guard.listen_on(http.hosts_for(port), http.origins_for(port))
            app.origins = frozenset(http.origins_for(port))
            site.base = f"/{http.token}"
            await nursery.start(site.run)
            nursery.start_soon(audit.flush_every_window)
            address = f"{host_literal(options.host)}:{port}"
            site.emit("review_started", address=address, pid=os.getpid())
            task_status.started(f"http://{address}/{http.token}/")
    finally:
        with contextlib.suppress(RuntimeError):
            audit.flush()


def _loopback_only(host: str, binds: list[str]) -> None:
    """Refuse unless every socket bound is on a loopback address (not only the name asked).

    ``localhost`` is a name: the resolver (``/etc/hosts``, or DNS when that has no entry)
    may map it to any address. Until :meth:`RequestGuard.listen_on` nothing is served (every
    request is 421), so a socket bound elsewhere served nothing before this check.
    """
    bound = [urlsplit(b).hostname or "" for b in binds]
    if not bound or not all(is_loopback(address) for address in bound):
        raise InvalidArguments(
            f"the review page listens on loopback only: {host!r} was bound on "
            f"{', '.join(bound) or 'nothing'}, which is not loopback (check /etc/hosts); "
            "nothing was served",
            field="host",
        )


def attach_review(
    kernel: Kernel,
    feed: EventFeed,
    approver: ReviewApprover | None,
    options: ReviewOptions,
    announce: Callable[[str], None],
    *,
    plans: Sequence[str | Path] = (),
) -> None:
    """Serve the review page of ``kernel`` while it is entered; ``announce(url)`` once it listens."""

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[ReviewSite]:
        site = ReviewSite(kernel, feed, approver, plans=plans or options.plans)
        try:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(serve_review, site, options)
                announce(url)
                try:
                    yield site
                finally:
                    if approver is not None:
                        approver.close()
                    nursery.cancel_scope.cancel()
        finally:
            if approver is not None:
                approver.close()

    async def startup(k: Kernel) -> None:
        k.extensions["review"] = await k.enter_async_context(running())

    kernel.add_startup(startup)
