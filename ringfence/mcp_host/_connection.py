"""Pooled connections to one MCP server over stdio, Streamable HTTP or SSE.

Each server has one :class:`ConnectionPool` holding at most one live SDK
``mcp.Client`` (JSON-RPC multiplexes concurrent calls, so one process serves
them all). The client lives in a *runner task* in the pool's nursery, because
the SDK's transports open task groups that must be exited by the task that
entered them; callers in any task borrow the client.

Guarantees:

- Every operation runs under a deadline (a trio cancel scope): connecting under
  ``connect_timeout_seconds``, each call under ``call_timeout_seconds``. A call
  that runs out is cancelled (the SDK sends the server ``notifications/cancelled``)
  and raises :class:`~ringfence.runtime.ToolTimeout`.
- A call is sent at most once. A call whose connection broke is **not
  replayed** (it may already have acted); it raises ``Unavailable`` saying so.
- A broken connection is discarded (its process is stopped) and the next
  independent call connects afresh.
- Errors from the SDK and its transports are translated into the ringfence
  error tree here; a URL is never repeated in a message (its display form is).
- The server's stderr (stdio) is captured line by line into bounded,
  redacted diagnostics; it never reaches the terminal.

Non-guarantees: a stdio server runs as the local user with the user's file
and network access; approval gates its tool calls, not its process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
import pydantic
import trio
from mcp import Client, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from ..runtime import (
    InvalidArguments,
    Redactor,
    RingfenceError,
    ToolError,
    ToolTimeout,
    Unavailable,
)
from ._manifest import ServerConfig, Transport
from ._oauth import build_auth
from ._urls import display_url, url_secrets

__all__ = [
    "ConnectionPool",
    "Diagnostics",
    "LiveConnection",
    "build_stdio_env",
    "resolve_headers",
    "translate_error",
]

T = TypeVar("T")

MAX_LOG_LINES = 500
MAX_LOG_LINE_BYTES = 4096
MAX_RECORDS = 200
CLIENT_INFO = types.Implementation(name="ringfence", version="0.1.0")


@dataclass
class Diagnostics:
    """Bounded, redacted evidence about one server: logs, notifications, failures."""

    redactor: Redactor
    logs: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    notifications: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RECORDS))
    failures: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RECORDS))

    def log(self, source: str, text: str, level: str = "info") -> None:
        text = text[:MAX_LOG_LINE_BYTES]
        self.logs.append(
            {
                "ts": round(time.time(), 3),
                "source": source,
                "level": level,
                "text": self.redactor.redact(text),
            }
        )

    def notify(self, method: str, **data: Any) -> dict[str, Any]:
        record = {"ts": round(time.time(), 3), "method": method, **self.redactor.redact_value(data)}
        self.notifications.append(record)
        return record

    def fail(self, action: str, error: RingfenceError | str) -> None:
        message = error.message if isinstance(error, RingfenceError) else error
        code = error.code if isinstance(error, RingfenceError) else "note"
        self.failures.append(
            {
                "ts": round(time.time(), 3),
                "action": action,
                "code": code,
                "message": self.redactor.redact(message),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "logs": list(self.logs),
            "notifications": list(self.notifications),
            "failures": list(self.failures),
        }


# -- secrets and transport parameters ----------------------------------------------------------


def build_stdio_env(
    config: ServerConfig, environ: dict[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """The variables a stdio server gets on top of the SDK's minimal safe set.

    Only names in ``inherit_env`` (copied from ``environ``) and literal ``env``
    values. Returns ``(env, missing)``: ``missing`` lists inherit_env names
    that are not set.
    """
    environ = dict(os.environ) if environ is None else environ
    env: dict[str, str] = {}
    missing: list[str] = []
    for name in config.inherit_env:
        if name in environ:
            env[name] = environ[name]
        else:
            missing.append(name)
    env.update(config.env)
    return env, missing


def resolve_headers(
    config: ServerConfig, redactor: Redactor, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """HTTP headers from ``api_key_env`` / ``headers_env``, resolved now; secrets registered.

    Raises Unavailable naming the variable when one is not set.
    """
    environ = dict(os.environ) if environ is None else environ
    headers: dict[str, str] = {}

    def get(var: str, key: str) -> str:
        value = environ.get(var)
        if not value:
            raise Unavailable(
                f"server {config.name!r}: {key} names the environment variable {var}, which is not set; "
                "set it before connecting",
                field=key,
            )
        return value

    if config.api_key_env:
        token = get(config.api_key_env, "api_key_env")
        headers["Authorization"] = f"Bearer {token}"
    for header, var in config.headers_env.items():
        headers[header] = get(var, f"headers_env.{header}")
    for value in headers.values():
        redactor.register_credential(value)
    return headers


# -- error translation -------------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    """The first interesting exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        exc = inner[0] if inner else exc.exceptions[0]
    return exc


def translate_error(exc: BaseException, config: ServerConfig, action: str) -> RingfenceError:
    """Map an SDK/transport exception to the ringfence error tree.

    The message names the server and the action, never the URL; ``details``
    carries ``broken=True`` when the connection can no longer be used.
    """
    exc = _leaf(exc)
    who = f"MCP server {config.name!r}"
    if isinstance(exc, RingfenceError):
        return exc
    text = _scrub(str(exc), config)
    if isinstance(exc, MCPError):
        code = exc.code
        if code == types.CONNECTION_CLOSED:
            return Unavailable(
                f"{who}: the connection closed during {action}; the call was not replayed because "
                "it may already have run. The next call reconnects.",
                broken=True,
            )
        if code == types.REQUEST_TIMEOUT:
            return ToolTimeout(f"{who}: {action} timed out")
        if code == types.INVALID_PARAMS:
            return InvalidArguments(f"{who} rejected the arguments of {action}: {text}")
        if code == types.METHOD_NOT_FOUND:
            return Unavailable(f"{who} does not support {action} (method not found)")
        return ToolError(f"{who}: {action} failed with MCP error {code}: {text}", mcp_code=code)
    if isinstance(exc, pydantic.ValidationError):
        return ToolError(
            f"{who} returned a malformed result for {action} ({exc.error_count()} problems)"
        )
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        hint = (
            " (check the credentials named by api_key_env/headers_env)"
            if status in (401, 403)
            else ""
        )
        return Unavailable(
            f"{who} answered HTTP {status} during {action}{hint}", broken=True, status=status
        )
    if isinstance(exc, httpx2.TimeoutException):
        return ToolTimeout(f"{who}: the HTTP connection timed out during {action}", broken=True)
    if isinstance(exc, httpx2.HTTPError):
        return Unavailable(
            f"{who} could not be reached during {action} ({type(exc).__name__})", broken=True
        )
    if isinstance(exc, FileNotFoundError | PermissionError) and action == "connect":
        return Unavailable(
            f"{who}: could not start {config.command!r}: {exc.strerror or type(exc).__name__}; "
            "configure an absolute path to the server's executable",
            field="command",
            broken=True,
        )
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
        return Unavailable(
            f"{who}: the connection is closed ({action} was not replayed). The next call reconnects.",
            broken=True,
        )
    if isinstance(exc, OSError):
        return Unavailable(f"{who}: {action} failed: {exc.strerror or text}", broken=True)
    return ToolError(f"{who}: {action} failed: {type(exc).__name__}: {text}")


def _scrub(text: str, config: ServerConfig) -> str:
    """Take the URL (whole, displayed, without its query) and its host out of a message."""
    if config.url:
        from urllib.parse import urlsplit

        url = config.url
        base = url.split("?", 1)[0].split("#", 1)[0]
        for form in sorted({url, display_url(url), base}, key=len, reverse=True):
            text = text.replace(form, "<server URL>")
        for part in url_secrets(url):
            if len(part) >= 4:
                text = text.replace(part, "<not shown>")
        try:
            host = urlsplit(url).hostname
        except ValueError:
            host = None
        if host:
            text = text.replace(host, "<host>")
    return text[:2000]


def _transport_closed(live: LiveConnection) -> bool:
    """Whether the SDK already saw the transport end (nothing can be sent on it).

    Reads the SDK dispatcher's private flag; if a future SDK drops it, this says
    False and a dead connection is found by the next call instead (which then
    fails without being replayed, and the call after it reconnects).
    """
    try:
        dispatcher = getattr(live.client.session, "_dispatcher", None)
    except RuntimeError:
        return True
    return bool(getattr(dispatcher, "_closed", False))


# -- the pool ----------------------------------------------------------------------------------


@dataclass
class LiveConnection:
    """One connected SDK client and the runner task that owns it."""

    client: Client
    generation: int
    connected_at: float
    close_requested: trio.Event = field(default_factory=trio.Event)
    finished: trio.Event = field(default_factory=trio.Event)
    broken: str | None = None

    @property
    def protocol_version(self) -> str:
        return self.client.protocol_version


ClientOptions = dict[str, Any]


class ConnectionPool:
    """The pooled connection to one server (see the module docstring for guarantees).

    ``client_options`` are passed to ``mcp.Client`` (callbacks, message
    handler). Use :meth:`run` for every request; :meth:`aclose` stops the
    server. ``nursery`` must stay open for the pool's lifetime.
    """

    def __init__(
        self,
        config: ServerConfig,
        nursery: trio.Nursery,
        redactor: Redactor,
        diagnostics: Diagnostics,
        client_options: ClientOptions | None = None,
    ) -> None:
        self.config = config
        self._nursery = nursery
        self._redactor = redactor
        self.diagnostics = diagnostics
        self._client_options = dict(client_options or {})
        self._live: LiveConnection | None = None
        self._lock = trio.Lock()
        self._generation = 0
        self._closed = False
        self.connects = 0
        self.on_connect: Callable[[LiveConnection], Awaitable[None]] | None = None
        if config.url:
            for part in url_secrets(config.url):
                redactor.register(part)

    # -- public ------------------------------------------------------------------------------

    @property
    def live(self) -> LiveConnection | None:
        return self._live if self._live is not None and self._live.broken is None else None

    async def connect(self) -> LiveConnection:
        """The live connection, connecting first if there is none (or it broke).

        Raises ToolTimeout past ``connect_timeout_seconds`` and the translated
        error (usually Unavailable) when the server cannot be started or reached.
        """
        if self._closed:
            raise Unavailable(
                f"MCP server {self.config.name!r}: the session's connections are closed"
            )
        live = self.live
        if live is not None and not _transport_closed(live):
            return live
        async with self._lock:
            live = self.live
            if live is not None:
                if not _transport_closed(live):
                    return live
                # Closed before anything was sent on it: reconnecting replays nothing.
                self.discard(live, "the server closed the connection")
            started: LiveConnection | None = None
            try:
                with trio.fail_after(self.config.connect_timeout_seconds):
                    started = await self._nursery.start(self._runner, self._generation + 1)
                    if self.on_connect is not None:
                        await self.on_connect(started)
            except BaseException as exc:
                if started is not None:
                    started.broken = started.broken or "failed during connect"
                    started.close_requested.set()
                if isinstance(exc, trio.TooSlowError):
                    error: RingfenceError = ToolTimeout(
                        f"MCP server {self.config.name!r} did not finish connecting within "
                        f"{self.config.connect_timeout_seconds:g}s (connect_timeout_seconds)",
                        field="connect_timeout_seconds",
                    )
                elif isinstance(exc, Exception):
                    error = translate_error(exc, self.config, "connect")
                else:
                    raise
                self.diagnostics.fail("connect", error)
                raise error from None
            self._generation += 1
            self._live = started
            self.connects += 1
            return started

    async def run(
        self,
        action: str,
        fn: Callable[[Client], Awaitable[T]],
        *,
        timeout: float | None = None,
    ) -> T:
        """Run one request under the call deadline; translate failures; never retry.

        Raises ToolTimeout when the deadline passes, Unavailable when the
        connection is (or becomes) unusable, and the translated error otherwise.
        """
        live = await self.connect()
        deadline = self.config.call_timeout_seconds if timeout is None else timeout
        try:
            with trio.move_on_after(deadline) as scope:
                return await fn(live.client)
        except Exception as exc:
            error = translate_error(exc, self.config, action)
            if error.details.get("broken"):
                self.discard(live, error.message)
            self.diagnostics.fail(action, error)
            raise error from None
        assert scope.cancelled_caught
        error = ToolTimeout(
            f"MCP server {self.config.name!r}: {action} did not finish within {deadline:g}s "
            "(call_timeout_seconds); it was cancelled and will not be retried",
            field="call_timeout_seconds",
        )
        self.diagnostics.fail(action, error)
        raise error

    def discard(self, live: LiveConnection, reason: str) -> None:
        """Mark ``live`` broken and stop it; the next call reconnects."""
        if live.broken is None:
            live.broken = reason
            self.diagnostics.fail(
                "connection", f"discarded connection #{live.generation}: {reason}"
            )
        live.close_requested.set()

    async def aclose(self) -> None:
        """Stop the server (bounded by the SDK's shutdown escalation). Idempotent."""
        self._closed = True
        live = self._live
        if live is not None:
            live.close_requested.set()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await live.finished.wait()

    # -- the runner ----------------------------------------------------------------------------

    def _transport(self, stack: contextlib.AsyncExitStack, errlog: Any) -> Any:
        c = self.config
        if c.transport is Transport.STDIO:
            env, missing = build_stdio_env(c)
            for name in missing:
                self.diagnostics.fail(
                    "connect", f"inherit_env names {name}, which is not set; not passed"
                )
            self._redactor.register_env(env)
            params = StdioServerParameters(
                command=c.command or "", args=list(c.args), env=env, cwd=c.cwd
            )
            return stdio_client(params, errlog=errlog)
        headers = resolve_headers(c, self._redactor)
        auth = build_auth(c, self._redactor)  # None unless auth = "oauth"
        assert c.url is not None
        timeout = httpx2.Timeout(c.connect_timeout_seconds, read=max(300.0, c.call_timeout_seconds))
        if c.transport is Transport.HTTP:
            # trust_env=False: no ambient proxy or .netrc credentials reach a server.
            http = httpx2.AsyncClient(headers=headers, timeout=timeout, trust_env=False, auth=auth)
            stack.push_async_callback(http.aclose)
            return streamable_http_client(c.url, http_client=http)

        def factory(
            headers: Any = None, timeout: Any = None, auth: Any = None
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, trust_env=False)

        return sse_client(
            c.url,
            headers=headers,
            timeout=c.connect_timeout_seconds,
            sse_read_timeout=max(300.0, c.call_timeout_seconds),
            httpx_client_factory=factory,
            auth=auth,
        )

    async def _read_stderr(self, fd: int) -> None:
        stream = trio.lowlevel.FdStream(fd)
        buffer = b""
        try:
            async with stream:
                while True:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        self.diagnostics.log("stderr", line.decode("utf-8", "replace").rstrip("\r"))
                    if len(buffer) > MAX_LOG_LINE_BYTES:
                        self.diagnostics.log("stderr", buffer.decode("utf-8", "replace"))
                        buffer = b""
        except (trio.ClosedResourceError, OSError):
            pass
        if buffer:
            self.diagnostics.log("stderr", buffer.decode("utf-8", "replace"))

    async def _runner(self, generation: int, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Own one SDK client from connect to close. Never raises after start()."""
        started = False
        live: LiveConnection | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                errlog = None
                if self.config.transport is Transport.STDIO:
                    read_fd, write_fd = os.pipe()
                    os.set_inheritable(write_fd, False)
                    errlog = os.fdopen(write_fd, "w", encoding="utf-8")
                    stack.callback(errlog.close)
                    self._nursery.start_soon(self._read_stderr, read_fd)
                client = Client(
                    self._transport(stack, errlog),
                    mode=self.config.protocol_mode,
                    cache=None,
                    client_info=CLIENT_INFO,
                    **self._client_options,
                )
                await stack.enter_async_context(client)
                if errlog is not None:
                    # The child has its copy; closing ours lets the reader see EOF when it exits.
                    errlog.close()
                live = LiveConnection(client, generation, time.time())
                started = True
                task_status.started(live)
                await live.close_requested.wait()
        except Exception as exc:
            if not started:
                raise
            error = translate_error(exc, self.config, "the connection")
            self.diagnostics.fail("connection", error)
            if live is not None and live.broken is None:
                live.broken = error.message
        finally:
            if live is not None:
                if live.broken is None:
                    live.broken = "closed"
                live.finished.set()
