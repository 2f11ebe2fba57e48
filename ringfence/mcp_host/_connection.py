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
- Redaction comes before every cut (error text, stderr lines), so a secret
  that straddles a cut is still removed whole.
- Only transport facts become transport errors: a closed stream (the SDK saw
  it end) is Unavailable, the SDK's own timeout is ToolTimeout. An error code
  the *server* sent (even ``-32000``/``-32001``, which look like those) is a
  ToolError (InvalidArguments for ``-32602``) whose server-written message is
  framed as untrusted content (for an untrusted server).
- No inbound JSON-RPC message larger than the server's ``max_message_bytes``
  (default 32 MiB) is parsed: over stdio each line is bounded before it is
  decoded; over Streamable HTTP a JSON body is bounded while it is read and an
  SSE event by the SDK's own event-size cap. The call fails with a ToolError
  naming the limit; the connection survives when the reply could be matched to
  its request, else it is closed and the next call reconnects.

Non-guarantees: a stdio server runs as the local user with the user's file
and network access; approval gates its tool calls, not its process.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
import pydantic
import trio
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client import stdio as sdk_stdio
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from ..runtime import (
    InvalidArguments,
    Redactor,
    RingfenceError,
    ToolError,
    ToolTimeout,
    Unavailable,
)
from ..runtime._groups import first_error
from ._failures import HttpStatusLog, explain
from ._manifest import ServerConfig, Transport, Trust
from ._oauth import build_auth
from ._results import frame_untrusted
from ._urls import scrub_url, url_secrets

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
MAX_ERROR_TEXT = 2000
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
        # Redact the whole line, then cut: a cut first would leave a secret's head behind.
        text = self.redactor.redact(text)[:MAX_LOG_LINE_BYTES]
        self.logs.append(
            {"ts": round(time.time(), 3), "source": source, "level": level, "text": text}
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


@dataclass
class InboundLimit:
    """The inbound message cap of one connection, and what happened to it.

    ``marker`` is a random value only ringfence knows: an error ringfence
    synthesizes for an oversize reply carries it, so a server cannot forge one.
    ``closed_for`` says why the transport was closed by the cap, if it was.
    """

    max_bytes: int
    marker: str = field(default_factory=lambda: secrets.token_hex(12))
    closed_for: str | None = None

    def message(self, who: str, action: str) -> str:
        return (
            f"{who}: the reply to {action} is larger than max_message_bytes "
            f"({self.max_bytes} bytes); it was discarded unread. Raise max_message_bytes for this "
            "server in the manifest if such replies are expected."
        )


def _sdk_made(exc: MCPError, kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    """Whether the SDK raised ``exc`` itself while handling ``kind`` (not a server's error reply).

    The SDK raises its own timeout inside ``except TimeoutError`` and its own
    write-side "connection closed" inside ``except BrokenResourceError``; an
    error response from the server is re-raised with no exception in flight.
    """
    return isinstance(exc.__context__, kind)


def _server_text(text: str, config: ServerConfig, action: str, redactor: Redactor | None) -> str:
    """Text the server wrote: URL scrubbed, redacted, *then* cut, then framed if untrusted."""
    text = scrub_url(text, config.url)
    if redactor is not None:
        text = redactor.redact(text)
    text = text[:MAX_ERROR_TEXT]
    if config.trust is Trust.TRUSTED:
        return text
    return frame_untrusted(text, config.name, f"error reply to {action}")


def translate_error(
    exc: BaseException,
    config: ServerConfig,
    action: str,
    *,
    redactor: Redactor | None = None,
    closed: bool = False,
    limit: InboundLimit | None = None,
) -> RingfenceError:
    """Map an SDK/transport exception to the ringfence error tree.

    The message names the server and the action, never the URL; ``details``
    carries ``broken=True`` when the connection can no longer be used.
    ``redactor`` redacts server text before it is cut (pass it whenever there is
    one). ``closed`` is the transport fact that the connection has ended: only
    then (or when the SDK itself raised it) is ``CONNECTION_CLOSED`` read as a
    closed connection; a server that *sends* that code gets a ToolError.
    ``limit`` recognises the errors ringfence's own inbound cap produced.
    """
    exc = first_error(exc)
    who = f"MCP server {config.name!r}"
    if isinstance(exc, RingfenceError):
        return exc
    if isinstance(exc, MCPError):
        return _translate_mcp_error(exc, config, action, redactor, closed, limit)
    text = scrub_url(str(exc), config.url)
    if redactor is not None:
        text = redactor.redact(text)
    text = text[:MAX_ERROR_TEXT]
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


_SSE_TOO_BIG = re.compile(r"exceeded the (\d+) byte limit")


def _translate_mcp_error(
    exc: MCPError,
    config: ServerConfig,
    action: str,
    redactor: Redactor | None,
    closed: bool,
    limit: InboundLimit | None,
) -> RingfenceError:
    who = f"MCP server {config.name!r}"
    code = exc.code
    message = exc.error.message if hasattr(exc, "error") else str(exc)
    if limit is not None and _is_limit_error(exc, message, limit):
        return ToolError(
            limit.message(who, action), field="max_message_bytes", limit=limit.max_bytes
        )
    http = config.transport is not Transport.STDIO
    sdk_closed = _sdk_made(exc, (anyio.BrokenResourceError, anyio.ClosedResourceError))
    # The HTTP transports resolve a request whose SSE stream failed with this code themselves.
    sse_gone = http and code == types.CONNECTION_CLOSED and message.startswith("SSE stream ")
    if code == types.CONNECTION_CLOSED and (closed or sdk_closed or sse_gone):
        if limit is not None and limit.closed_for:
            return ToolError(
                limit.message(who, action)
                + " The connection was closed; the next call reconnects.",
                field="max_message_bytes",
                limit=limit.max_bytes,
                broken=True,
            )
        return Unavailable(
            f"{who}: the connection closed during {action}; the call was not replayed because "
            "it may already have run. The next call reconnects.",
            broken=True,
        )
    if code == types.REQUEST_TIMEOUT and _sdk_made(exc, TimeoutError):
        return ToolTimeout(f"{who}: {action} timed out")
    if code == types.METHOD_NOT_FOUND:
        return Unavailable(f"{who} does not support {action} (method not found)")
    text = _server_text(message, config, action, redactor)
    if code == types.INVALID_PARAMS:
        return InvalidArguments(
            f"{who} rejected the arguments of {action} (MCP error {code}):\n{text}", mcp_code=code
        )
    # Any other code, including a server-sent -32000/-32001: the server's own error.
    return ToolError(f"{who}: {action} failed with MCP error {code}:\n{text}", mcp_code=code)


def _is_limit_error(exc: MCPError, message: str, limit: InboundLimit) -> bool:
    """An error ringfence's inbound cap produced (stdio, HTTP JSON) or the SDK's SSE event cap."""
    data = getattr(getattr(exc, "error", None), "data", None)
    if isinstance(data, dict) and data.get("ringfence_inbound_limit") == limit.marker:
        return True
    if exc.code == types.PARSE_ERROR and limit.marker in message:
        return True
    found = _SSE_TOO_BIG.search(message) if message.startswith("SSE stream ") else None
    return found is not None and int(found.group(1)) == limit.max_bytes


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


# -- inbound size cap ----------------------------------------------------------------------------

# A JSON-RPC *response* whose id can be read from its first or last bytes without parsing it:
# ``{"jsonrpc":"2.0","id":7,"result":…`` (Python SDK) or ``{"result":…,"jsonrpc":"2.0","id":7}``
# (TypeScript SDK). Anything else that is too large closes the connection instead.
_ID = rb'(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")'
_HEAD_ID = re.compile(
    rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*' + _ID + rb'\s*,\s*"(?:result|error)"\s*:'
)
_HEAD_RESULT = re.compile(rb'^\s*\{\s*"(?:result|error)"\s*:')
_TAIL_ID = re.compile(rb'"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*' + _ID + rb"\s*\}\s*$")
_PEEK = 512


def _oversize_reply_id(head: bytes, tail: bytes) -> int | str | None:
    """The id of an oversize response, if its first or last bytes show it unambiguously."""
    found = _HEAD_ID.match(head)
    if found is None and _HEAD_RESULT.match(head):
        found = _TAIL_ID.search(tail)
    if found is None:
        return None
    raw = found.group(1)
    if raw.startswith(b'"'):
        try:
            value = types.jsonrpc_message_adapter.validate_json(
                b'{"jsonrpc":"2.0","id":' + raw + b',"result":{}}'
            )
        except pydantic.ValidationError:
            return None
        return value.id  # type: ignore[union-attr]
    return int(raw)


def _limit_error(request_id: int | str, limit: InboundLimit) -> SessionMessage:
    error = types.ErrorData(
        code=types.INTERNAL_ERROR,
        message=f"reply larger than max_message_bytes ({limit.max_bytes} bytes)",
        data={"ringfence_inbound_limit": limit.marker},
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


class _LineReader:
    """Splits a byte stream into lines of at most ``limit.max_bytes``, never buffering more.

    An oversize line is dropped as it streams past (only its first and last
    bytes are kept, to find the response id). ``feed`` returns what to hand to
    the SDK for each finished line: a parsed message, a parse error, a
    synthesized limit error, or ``None`` when the connection must be closed.
    """

    def __init__(self, limit: InboundLimit, encoding: str, errors: str) -> None:
        self.limit = limit
        self.encoding = encoding
        self.errors = errors
        self.buffer = bytearray()
        self.dropping = False
        self.head = b""
        self.tail = b""

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception | None]:
        out: list[SessionMessage | Exception | None] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            piece = chunk[start:] if newline == -1 else chunk[start:newline]
            if self.dropping:
                self.tail = (self.tail + piece)[-_PEEK:]
            elif len(self.buffer) + len(piece) > self.limit.max_bytes:
                joined = bytes(self.buffer[:_PEEK]) + piece[:_PEEK]
                self.head = joined[:_PEEK]
                self.tail = (bytes(self.buffer[-_PEEK:]) + piece)[-_PEEK:]
                self.buffer = bytearray()
                self.dropping = True
            else:
                self.buffer += piece
            if newline == -1:
                return out
            out.append(self._line())
            start = newline + 1

    def _line(self) -> SessionMessage | Exception | None:
        if self.dropping:
            self.dropping = False
            request_id = _oversize_reply_id(self.head, self.tail)
            self.head = self.tail = b""
            return None if request_id is None else _limit_error(request_id, self.limit)
        raw, self.buffer = bytes(self.buffer), bytearray()
        try:
            line = raw.decode(self.encoding, self.errors)
        except UnicodeDecodeError as exc:
            return exc
        return sdk_stdio._parse_line(line)


# The SDK's own process handling (spawn in a new session, the spec's shutdown escalation)
# is reused; only the stdout reader is ringfence's, because the SDK's buffers a whole line
# of any size before parsing it.
_SDK_STDIO_HELPERS = (
    "_create_platform_compatible_process",
    "_get_executable_command",
    "_stop_server_process",
    "_drain_stdout",
    "_aclose_all",
    "_parse_line",
    "get_default_environment",
)


@contextlib.asynccontextmanager
async def bounded_stdio_client(
    params: StdioServerParameters, errlog: Any, limit: InboundLimit
) -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.stdio_client`` with every inbound line bounded by ``limit`` before it is parsed.

    Raises Unavailable naming the missing helper if the installed SDK lacks one
    of the pieces reused from ``mcp.client.stdio`` (fail closed: no unbounded reader).
    """
    missing = [name for name in _SDK_STDIO_HELPERS if not hasattr(sdk_stdio, name)]
    if missing:
        raise Unavailable(
            "the installed mcp SDK lacks mcp.client.stdio."
            + ", ".join(missing)
            + ", which ringfence's bounded stdio reader needs; install mcp 2.3.x",
            field="max_message_bytes",
        )
    command = await sdk_stdio._get_executable_command(params.command)
    process = await sdk_stdio._create_platform_compatible_process(
        command=command,
        args=params.args,
        env=sdk_stdio.get_default_environment() | (params.env or {}),
        errlog=errlog,
        cwd=params.cwd,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        reader = _LineReader(limit, params.encoding, params.encoding_error_handler)
        try:
            # Closing read_writer (leaving this block) is what tells the session the
            # connection ended, so it comes before the drain below, which can wait long.
            async with read_writer:
                async for chunk in process.stdout:
                    for item in reader.feed(chunk):
                        if item is None:
                            # An oversize message we cannot answer: end the connection.
                            limit.closed_for = "max_message_bytes"
                            return
                        await read_writer.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # teardown; the session sees the read stream end
        finally:
            # Keep the server from blocking on a full pipe until shutdown closes it.
            await sdk_stdio._drain_stdout(process)

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(
                        (data + "\n").encode(params.encoding, params.encoding_error_handler)
                    )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(0.5):
                    await writer_done.wait()
                await sdk_stdio._stop_server_process(process)
                await sdk_stdio._aclose_all(read_stream, write_stream, read_writer, write_reader)
            tg.cancel_scope.cancel()


class _BoundedBody(httpx2.AsyncByteStream):
    """A response body that stops with a StreamError once it passes ``limit.max_bytes``."""

    def __init__(self, inner: Any, limit: InboundLimit) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit.max_bytes:
                # The marker lets translate_error tell this from a server's own error text.
                raise httpx2.StreamError(
                    f"response body over {self._limit.max_bytes} bytes [{self._limit.marker}]"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedTransport(httpx2.AsyncBaseTransport):
    """Bounds every non-SSE response body (SSE events are bounded by the SDK per event)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: InboundLimit) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedBody(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


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
    limit: InboundLimit | None = None

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
        # The inbound cap of the connection being set up (for errors during the handshake).
        self._connecting_limit: InboundLimit | None = None
        self.http_log = HttpStatusLog()  # HTTP statuses the SDK hides, for explain()
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
                    # No connection came of it: a "closed" code here is a transport fact.
                    error = translate_error(
                        exc,
                        self.config,
                        "connect",
                        redactor=self._redactor,
                        closed=True,
                        limit=self._connecting_limit,
                    )
                    error = explain(error, exc, self.config, "connect", self.http_log)
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
            error = translate_error(
                exc,
                self.config,
                action,
                redactor=self._redactor,
                closed=_transport_closed(live),
                limit=live.limit,
            )
            error = explain(error, exc, self.config, action, self.http_log)
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

    def _transport(self, stack: contextlib.AsyncExitStack, errlog: Any, limit: InboundLimit) -> Any:
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
            return bounded_stdio_client(params, errlog, limit)
        headers = resolve_headers(c, self._redactor)
        auth = build_auth(c, self._redactor)  # None unless auth = "oauth"
        assert c.url is not None
        timeout = httpx2.Timeout(c.connect_timeout_seconds, read=max(300.0, c.call_timeout_seconds))
        if c.transport is Transport.HTTP:
            # trust_env=False: no ambient proxy or .netrc credentials reach a server.
            http = httpx2.AsyncClient(
                headers=headers,
                timeout=timeout,
                trust_env=False,
                auth=auth,
                event_hooks=self.http_log.hooks(),
                transport=_BoundedTransport(httpx2.AsyncHTTPTransport(trust_env=False), limit),
            )
            stack.push_async_callback(http.aclose)
            return streamable_http_client(
                c.url, http_client=http, max_sse_event_size=limit.max_bytes
            )

        def factory(
            headers: Any = None, timeout: Any = None, auth: Any = None
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                headers=headers,
                timeout=timeout,
                auth=auth,
                trust_env=False,
                event_hooks=self.http_log.hooks(),
            )

        return sse_client(
            c.url,
            headers=headers,
            timeout=c.connect_timeout_seconds,
            sse_read_timeout=max(300.0, c.call_timeout_seconds),
            httpx_client_factory=factory,
            auth=auth,
        )

    async def _read_stderr(self, fd: int) -> None:
        """Log the server's stderr line by line, each line redacted whole *before* any cut.

        A line longer than MAX_LOG_LINE_BYTES is logged in pieces, but only once
        enough of it has arrived that no registered secret can straddle the cut.
        """
        stream = trio.lowlevel.FdStream(fd)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        buffer = ""
        try:
            async with stream:
                while True:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    buffer += decoder.decode(chunk)
                    *lines, buffer = buffer.split("\n")
                    for line in lines:
                        self.diagnostics.log("stderr", line.rstrip("\r"))
                    while len(buffer) > MAX_LOG_LINE_BYTES + self._redactor.longest:
                        # Redacted first; what stays in the buffer is redacted text too.
                        redacted = self._redactor.redact(buffer)
                        self.diagnostics.log("stderr", redacted[:MAX_LOG_LINE_BYTES])
                        buffer = redacted[MAX_LOG_LINE_BYTES:]
        except (trio.ClosedResourceError, OSError):
            pass
        buffer += decoder.decode(b"", final=True)
        if buffer:
            self.diagnostics.log("stderr", buffer.rstrip("\r"))

    async def _runner(self, generation: int, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Own one SDK client from connect to close. Never raises after start()."""
        started = False
        live: LiveConnection | None = None
        limit = InboundLimit(self.config.max_message_bytes)
        self._connecting_limit = limit
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
                    self._transport(stack, errlog, limit),
                    mode=self.config.protocol_mode,
                    cache=None,
                    client_info=CLIENT_INFO,
                    **self._client_options,
                )
                await stack.enter_async_context(client)
                if errlog is not None:
                    # The child has its copy; closing ours lets the reader see EOF when it exits.
                    errlog.close()
                live = LiveConnection(client, generation, time.time(), limit=limit)
                started = True
                task_status.started(live)
                await live.close_requested.wait()
        except Exception as exc:
            if not started:
                raise
            error = translate_error(
                exc,
                self.config,
                "the connection",
                redactor=self._redactor,
                closed=True,
                limit=limit,
            )
            self.diagnostics.fail("connection", error)
            if live is not None and live.broken is None:
                live.broken = error.message
        finally:
            if live is not None:
                if live.broken is None:
                    live.broken = "closed"
                live.finished.set()
