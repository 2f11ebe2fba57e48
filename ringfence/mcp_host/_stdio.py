"""The stdio transport: a server's process, its environment, its bounded stdout, its stderr.

Guarantees: the server gets only the SDK's minimal environment plus the
names in ``inherit_env`` and literal ``env`` values; every stdout line is
bounded by the connection's :class:`~._inbound.InboundLimit` before it is
parsed; the server's stderr is logged line by line into the bounded,
redacted :class:`~._diagnostics.Diagnostics` and never reaches the terminal.

Non-guarantees: a stdio server runs as the local user with the user's file
and network access; approval gates its tool calls, not its process.
"""

from __future__ import annotations

import codecs
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import trio
from mcp import StdioServerParameters
from mcp.client import stdio as sdk_stdio
from mcp.shared.message import SessionMessage

from ..runtime import Redactor, Unavailable
from ._diagnostics import MAX_LOG_LINE_BYTES, Diagnostics
from ._inbound import InboundLimit, LineReader
from ._manifest import ServerConfig

__all__ = ["bounded_stdio_client", "build_stdio_env", "read_stderr", "stdio_transport"]


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


def stdio_transport(
    config: ServerConfig,
    errlog: Any,
    limit: InboundLimit,
    redactor: Redactor,
    diagnostics: Diagnostics,
) -> Any:
    """The SDK transport for ``config``'s stdio server (its environment's secrets registered)."""
    env, missing = build_stdio_env(config)
    for name in missing:
        diagnostics.fail("connect", f"inherit_env names {name}, which is not set; not passed")
    redactor.register_env(env)
    params = StdioServerParameters(
        command=config.command or "", args=list(config.args), env=env, cwd=config.cwd
    )
    return bounded_stdio_client(params, errlog, limit)


async def read_stderr(fd: int, diagnostics: Diagnostics, redactor: Redactor) -> None:
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
                    diagnostics.log("stderr", line.rstrip("\r"))
                while len(buffer) > MAX_LOG_LINE_BYTES + redactor.longest:
                    # Redacted first; what stays in the buffer is redacted text too.
                    redacted = redactor.redact(buffer)
                    diagnostics.log("stderr", redacted[:MAX_LOG_LINE_BYTES])
                    buffer = redacted[MAX_LOG_LINE_BYTES:]
    except (trio.ClosedResourceError, OSError):
        pass
    buffer += decoder.decode(b"", final=True)
    if buffer:
        diagnostics.log("stderr", buffer.rstrip("\r"))


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
        reader = LineReader(limit, params.encoding, params.encoding_error_handler)
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
