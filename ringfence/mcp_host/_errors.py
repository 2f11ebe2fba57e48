"""SDK and transport exceptions mapped to the ringfence error tree, for one server and action.

Guarantees: a URL is never repeated in a message (its display form is);
server-written text is URL-scrubbed, redacted, *then* cut, then framed as
untrusted content (for an untrusted server). Only transport facts become
transport errors: a closed stream (the SDK saw it end) is Unavailable, the
SDK's own timeout is ToolTimeout. An error code the *server* sent (even
``-32000``/``-32001``, which look like those) is a ToolError (InvalidArguments
for ``-32602``).
"""

from __future__ import annotations

import os
import re

import anyio
import httpx2
import pydantic
from mcp import MCPError, types

from ..runtime._errors import InvalidArguments, RingfenceError, ToolError, ToolTimeout, Unavailable
from ..runtime._groups import first_error
from ..runtime._redact import Redactor
from ._results import frame_untrusted
from ._urls import scrub_url
from .manifest._load import ServerConfig, Transport, Trust
from .transport._inbound import InboundLimit

__all__ = ["MAX_ERROR_TEXT", "command_fix", "translate_error"]

MAX_ERROR_TEXT = 2000


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
    if limit is not None and isinstance(exc, httpx2.StreamError) and limit.marker in str(exc):
        # A body ringfence's cap stopped outside the MCP exchange (a redirect's body the SDK
        # drains, an OAuth reply): the connection's reader raised it, never the server.
        return ToolError(
            limit.message(who, action),
            field="max_message_bytes",
            limit=limit.max_bytes,
            broken=True,
        )
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
            f"{command_fix(config.command)}",
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


def command_fix(command: str | None) -> str:
    """What to do about a stdio server's command that would not start, for its spelling."""
    if not command:
        return "configure the server's command"
    if os.path.isabs(command):
        if not os.path.exists(command):
            return f"{command} does not exist: install the server there, or point command at it"
        if not os.access(command, os.X_OK) or os.path.isdir(command):
            return f"{command} is not an executable file: point command at the server's program"
        return "check that its interpreter (the #! line) exists"
    return (
        f"{command!r} is not found on the PATH the server starts with: configure the absolute "
        "path of the server's executable"
    )
