"""``ringfence mcp login``: authorize afresh by connecting once, with a loopback redirect.

Kept apart from :mod:`._provider` (the provider every connection uses) because it
drives a whole connection: it sits above :mod:`..transport._pool`, which sits above
:mod:`._provider`.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trio
from mcp.shared.auth import AuthorizationCodeResult

from ...runtime._errors import Denied, Unavailable
from ...runtime._groups import first_error, raise_single
from ...runtime._redact import Redactor
from .._diagnostics import Diagnostics
from ..manifest._load import AuthMode, ServerConfig
from ..transport._pool import ConnectionPool
from ._provider import LoginFlow, SealedTokenStorage, auth_status, login_flow
from ._tokens import SealedStore

__all__ = ["LOGIN_TIMEOUT_SECONDS", "login", "loopback_flow"]


LOGIN_TIMEOUT_SECONDS = 600.0


async def login(
    config: ServerConfig, redactor: Redactor, flow: LoginFlow, store: SealedStore | None = None
) -> dict[str, Any]:
    """Authorize afresh through ``flow`` by connecting once; returns :func:`auth_status`.

    The stored tokens are dropped first (the registration is kept), so the
    server's 401 drives the SDK's full flow: discovery, registration, PKCE,
    token exchange. The connection is closed again; the tokens stay sealed.
    """
    if config.auth is not AuthMode.OAUTH:
        raise Unavailable(
            f'MCP server {config.name!r} is not configured with auth = "oauth"', field="auth"
        )
    await SealedTokenStorage(config, redactor, store).clear_tokens()
    config = replace(config, connect_timeout_seconds=LOGIN_TIMEOUT_SECONDS)
    try:
        with login_flow(flow):
            async with trio.open_nursery() as nursery:
                pool = ConnectionPool(config, nursery, redactor, Diagnostics(redactor))
                try:
                    live = await pool.connect()
                    # A server may take the handshake without a token and answer 401 from
                    # tools/list on: list once, so its refusal drives the flow here too.
                    if live.client.server_capabilities.tools is not None:
                        await pool.run(
                            "tools/list",
                            lambda client: client.list_tools(),
                            timeout=LOGIN_TIMEOUT_SECONDS,
                        )
                finally:
                    await pool.aclose()
    except BaseExceptionGroup as group:
        raise_single(group)
    return auth_status(config, store)


# -- the loopback redirect listener (``mcp login``) -------------------------------------------

_DONE_PAGE = (
    b"<!doctype html><title>ringfence</title><p>ringfence: authorization received. "
    b"You can close this window.</p>"
)


@contextlib.asynccontextmanager
async def loopback_flow(
    show: Callable[[str], Awaitable[None]], port: int = 0
) -> AsyncIterator[LoginFlow]:
    """A :class:`LoginFlow` whose redirect lands on a listener on 127.0.0.1 (RFC 8252 §7.3).

    ``show(url)`` presents the authorization URL (print it, open a browser).
    The listener answers ``GET /callback`` once: the code and state go to the
    flow (the SDK checks the state again); an ``error`` from the authorization server
    raises ``Denied`` naming it. Only loopback is bound; ``port`` 0 picks a free one.

    Only the redirect of the login this flow opened is taken: its ``state`` must be the
    one in the authorization URL ``show`` was given (compared in constant time). Any
    other ``GET /callback`` (a page in the person's browser, a local process: the port
    is predictable) is answered ``400`` and changes nothing, so it can neither end the
    login with a forged ``error`` or ``code`` nor take the real redirect's place.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    received: list[dict[str, str]] = []
    arrived = trio.Event()
    expected: list[str] = []  # the state of the authorization URL shown last

    async def redirect(url: str) -> None:
        states = parse_qs(urlsplit(url).query).get("state") or [""]
        expected[:] = [states[0]] if len(states) == 1 and states[0] else []
        await show(url)

    async def callback_route(request: Request) -> Response:
        if arrived.is_set():
            return Response("already received", status_code=409)
        given = request.query_params.getlist("state")
        if not (
            expected
            and len(given) == 1
            and hmac.compare_digest(given[0].encode("utf-8"), expected[0].encode("utf-8"))
        ):
            # Not the redirect of the login this flow opened: nothing is taken from it.
            return Response(
                "ringfence: not the redirect of the login in progress; ignored\n",
                status_code=400,
            )
        received.append(dict(request.query_params))
        arrived.set()
        return HTMLResponse(_DONE_PAGE)

    app = Starlette(routes=[Route("/callback", callback_route, methods=["GET"])])
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None

    async def callback() -> AuthorizationCodeResult:
        await arrived.wait()
        params = received[0]
        if "error" in params or "code" not in params:
            raise Denied(
                "the authorization server refused: "
                f"{params.get('error', 'no code')}: {params.get('error_description', '')[:200]}",
                field="auth",
            )
        return AuthorizationCodeResult(
            code=params["code"], state=params.get("state"), iss=params.get("iss")
        )

    async with trio.open_nursery() as nursery:
        shutdown = trio.Event()

        async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await serve(app, config, shutdown_trigger=shutdown.wait, task_status=task_status)

        try:
            binds = await nursery.start(run)
        except (OSError, BaseExceptionGroup) as exc:
            # hypercorn binds in a nursery of its own, so the OSError may come in a group; say
            # what could not be bound and the way out (a bare OSError line names no port).
            error = first_error(exc)
            if not isinstance(error, OSError):
                raise
            raise Unavailable(
                f"cannot listen for the login redirect on 127.0.0.1:{port}: "
                f"{error.strerror or error}; free the port or choose another with --port",
                field="port",
            ) from None
        bound = int(str(binds[0]).rsplit(":", 1)[1])
        try:
            yield LoginFlow(f"http://127.0.0.1:{bound}/callback", redirect, callback)
        finally:
            shutdown.set()
            nursery.cancel_scope.cancel()
