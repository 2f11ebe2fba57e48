"""The stdio transport: a server's process, its environment, its bounded stdout, its stderr.

Guarantees: the server gets only the SDK's minimal environment plus the
names in ``inherit_env`` and literal ``env`` values; every stdout line is
bounded by the connection's :class:`~._inbound.InboundLimit` before it is
parsed; the server's stderr is logged line by line into the bounded,
redacted :class:`~._diagnostics.Diagnostics` and never reaches the terminal.

A server whose manifest entry says ``sandbox = "local"`` is started through
the :data:`StdioConfiner` the host passed in (the assembly layer,
``ringfence._embed``, supplies the confined local backend's): the SDK spawns
the wrapper it returns instead of the server, and the wrapper's first stdout
line, its report, is read here before any protocol byte and checked by the
confiner (a missing layer raises ``Unavailable`` naming it and its fix). No
confiner means no connection: such a server is refused, never started
unconfined. The layers are kept for the ``mcp_connected`` event. A writable
one (``sandbox_writable``) comes with the confiner's :class:`ConfinedWrites`:
its writes reach the workspace only through it, after each call (the pool
and the adapter settle it; the confiner's says how).

Non-guarantees: a server with ``sandbox = "none"`` (the default) runs as the
local user with the user's file and network access; approval gates its tool
calls, not its process. What a confined server can still do is the confiner's
to say (the local backend's: read what the kernel's user can read outside the
hidden directories).
"""

from __future__ import annotations

import codecs
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import trio
from mcp import StdioServerParameters
from mcp.client import stdio as sdk_stdio
from mcp.shared.message import SessionMessage

from ...runtime import CallContext, Redactor, Unavailable
from .._diagnostics import MAX_LOG_LINE_BYTES, Diagnostics
from ..manifest._load import ServerConfig
from ._inbound import InboundLimit, LineReader

__all__ = [
    "STDERR_QUOTE_LINES",
    "ConfinedCommand",
    "ConfinedWrites",
    "StdioCommand",
    "StdioConfiner",
    "bounded_stdio_client",
    "build_stdio_env",
    "read_stderr",
    "stdio_transport",
]

MAX_REPORT_BYTES = 64 * 1024  # the confiner's report line; a longer first line is no report
STDERR_QUOTE_LINES = 6  # the server's last stderr lines a failed connect quotes
STDERR_QUOTE_CHARS = 300  # each cut to this many characters


@dataclass(frozen=True)
class StdioCommand:
    """A stdio server to start confined: its argv and working directory, and its grants."""

    argv: tuple[str, ...]
    cwd: str | None
    network: bool
    writable: bool


class ConfinedWrites(Protocol):
    """A writable confined server's writes, as its confiner keeps them.

    Calls to the server take turns (``lock``, held from before a call until
    after its :meth:`settle`); :meth:`settle` makes what the server wrote
    until then the call's change set and returns ``out`` with ``changes``
    (or raises the refusal naming what was refused); :meth:`aclose` runs once
    the server's process is gone.
    """

    lock: trio.Lock

    async def settle(self, ctx: CallContext, out: dict[str, Any]) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ConfinedCommand:
    """What a confiner made of a :class:`StdioCommand`.

    ``argv`` is started instead of the server (it must run the server on its
    own stdin/stdout/stderr after writing one report line to stdout);
    ``layers`` are known before the start; ``read_report(line)`` returns
    every layer from that line (``b""`` when stdout ended first) or raises
    ``Unavailable`` naming the missing layer. ``writes``: a writable server's
    (:class:`ConfinedWrites`), whose writes reach the workspace only through it.
    """

    argv: tuple[str, ...]
    layers: tuple[Mapping[str, Any], ...]
    read_report: Callable[[bytes], tuple[Mapping[str, Any], ...]]
    writes: ConfinedWrites | None = None


StdioConfiner = Callable[[StdioCommand], ConfinedCommand]


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
    *,
    confiner: StdioConfiner | None = None,
    sandbox: dict[str, Any] | None = None,
    writes: list[ConfinedWrites] | None = None,
) -> Any:
    """The SDK transport for ``config``'s stdio server (its environment's secrets registered).

    ``sandbox = "local"`` servers are wrapped by ``confiner`` (Unavailable
    without one); ``sandbox`` (a dict) receives what the ``mcp_connected``
    event records: ``confined``, and for a confined server its grants and
    layers; ``writes`` receives a writable server's :class:`ConfinedWrites`
    (the caller closes it once the process is gone).
    """
    env, missing = build_stdio_env(config)
    for name in missing:
        diagnostics.fail("connect", f"inherit_env names {name}, which is not set; not passed")
    redactor.register_env(env)
    record = sandbox if sandbox is not None else {}
    record.clear()
    record["confined"] = False
    command, args, cwd = config.command or "", list(config.args), config.cwd
    confined: ConfinedCommand | None = None
    if config.sandbox == "local":
        if confiner is None:
            raise Unavailable(
                f'server {config.name!r} asks for sandbox = "local", but this host supplies no '
                "confinement for MCP servers (connect it through create_kernel or the ringfence "
                "CLI, or pass stdio_confiner to connect_servers); it was not started",
                field="sandbox",
            )
        confined = confiner(
            StdioCommand(
                argv=(command, *args),
                cwd=cwd,
                network=config.sandbox_network,
                writable=config.sandbox_writable,
            )
        )
        command, args, cwd = confined.argv[0], list(confined.argv[1:]), None
        if confined.writes is not None and writes is not None:
            writes.append(confined.writes)
        record.update(
            confined=True,
            network=config.sandbox_network,
            writable=config.sandbox_writable,
            layers=[dict(layer) for layer in confined.layers],
        )

    def reported(line: bytes) -> None:
        assert confined is not None
        record["layers"] = [dict(layer) for layer in confined.read_report(line)]

    params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    return bounded_stdio_client(
        params, errlog, limit, on_report=reported if confined is not None else None
    )


async def read_stderr(
    fd: int,
    diagnostics: Diagnostics,
    redactor: Redactor,
    *,
    tail: deque[str] | None = None,
    done: trio.Event | None = None,
) -> None:
    """Log the server's stderr line by line, each line redacted whole *before* any cut.

    A line longer than MAX_LOG_LINE_BYTES is logged in pieces, but only once
    enough of it has arrived that no registered secret can straddle the cut.
    ``tail`` also keeps the last lines (redacted, cut): what a failed connect
    quotes to say why the server died; ``done`` is set when stderr ends.
    """

    def log(line: str) -> None:
        diagnostics.log("stderr", line)
        if tail is not None:
            tail.append(redactor.redact(line)[:STDERR_QUOTE_CHARS])

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
                    log(line.rstrip("\r"))
                while len(buffer) > MAX_LOG_LINE_BYTES + redactor.longest:
                    # Redacted first; what stays in the buffer is redacted text too.
                    redacted = redactor.redact(buffer)
                    log(redacted[:MAX_LOG_LINE_BYTES])
                    buffer = redacted[MAX_LOG_LINE_BYTES:]
    except (trio.ClosedResourceError, OSError):
        pass
    finally:
        buffer += decoder.decode(b"", final=True)
        if buffer:
            log(buffer.rstrip("\r"))
        if done is not None:
            done.set()


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
    params: StdioServerParameters,
    errlog: Any,
    limit: InboundLimit,
    *,
    on_report: Callable[[bytes], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.stdio_client`` with every inbound line bounded by ``limit`` before it is parsed.

    With ``on_report``, the process's first stdout line (at most
    ``MAX_REPORT_BYTES``, newline stripped; ``b""`` if stdout ends first) is
    handed to it before anything is sent or parsed; what it raises stops the
    process and propagates. Raises Unavailable naming the missing helper if
    the installed SDK lacks one of the pieces reused from ``mcp.client.stdio``
    (fail closed: no unbounded reader).
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
    early = b""
    if on_report is not None:
        try:
            early = await _read_report(process, on_report)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await sdk_stdio._stop_server_process(process)
            raise
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        reader = LineReader(limit, params.encoding, params.encoding_error_handler)
        try:
            # Closing read_writer (leaving this block) is what tells the session the
            # connection ended, so it comes before the drain below, which can wait long.
            async with read_writer:
                pending = early  # read ahead with the report
                while True:
                    if pending:
                        chunk, pending = pending, b""
                    else:
                        try:
                            chunk = await process.stdout.receive()
                        except anyio.EndOfStream:
                            break
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


async def _read_report(process: Any, on_report: Callable[[bytes], None]) -> bytes:
    """Read the first stdout line, hand it to ``on_report``; return the bytes after it."""
    buffer = b""
    while b"\n" not in buffer and len(buffer) <= MAX_REPORT_BYTES:
        try:
            chunk = await process.stdout.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            break
        buffer += chunk
    line, newline, rest = buffer.partition(b"\n")
    on_report(line if newline else buffer[:MAX_REPORT_BYTES])  # b"": stdout ended first
    return rest
