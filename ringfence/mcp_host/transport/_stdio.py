"""The stdio transport: a server's process, its environment, its bounded stdout, its stderr.

Guarantees: the server gets only the SDK's minimal environment plus the
names in ``inherit_env`` and literal ``env`` values; every stdout line is
bounded by the connection's :class:`~._inbound.InboundLimit` before it is
parsed; the server's stderr is logged line by line into the bounded,
redacted :class:`~._diagnostics.Diagnostics` and never reaches the terminal.
The server is started by ringfence's process supervisor (``ringfence._proc``,
the one place that spawns: its own session, its own cgroup where cgroup v2 is
writable), and stopped as the MCP lifecycle says (stdin closed, a grace, then
SIGTERM and SIGKILL) together with everything it started.

A server whose manifest entry says ``sandbox = "local"`` is started through
the :data:`StdioConfiner` the host passed in (the assembly layer,
``ringfence._embed``, supplies the confined local backend's): the wrapper it
returns is started instead of the server, and the wrapper's first stdout
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
import errno
import json
import os
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import trio
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from ...runtime._calls import CallContext
from ...runtime._errors import Unavailable
from ...runtime._programs import in_root, program_outside_roots, search_path
from ...runtime._redact import Redactor
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

# The variable a confined server's environment travels in, to the sandbox's supervisor alone
# (``ringfence._confine.SANDBOXED_ENV``, spelled again here: this layer imports nothing of the
# sandbox; tests/mcp_host/test_mcp_host_confined_env.py checks that the two agree).
SANDBOXED_ENV = "RINGFENCE_SANDBOXED_ENV"
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
    on_stderr: Callable[[int], None],
    limit: InboundLimit,
    redactor: Redactor,
    diagnostics: Diagnostics,
    *,
    confiner: StdioConfiner | None = None,
    sandbox: dict[str, Any] | None = None,
    writes: list[ConfinedWrites] | None = None,
    roots: Sequence[str] = (),
) -> Any:
    """The transport for ``config``'s stdio server (its environment's secrets registered).

    ``on_stderr(fd)`` takes over the server's stderr (a pipe's read end) once it
    runs. ``sandbox = "local"`` servers are wrapped by ``confiner`` (Unavailable
    without one); ``sandbox`` (a dict) receives what the ``mcp_connected``
    event records: ``confined``, and for a confined server its grants and
    layers; ``writes`` receives a writable server's :class:`ConfinedWrites`
    (the caller closes it once the process is gone). An unconfined server's bare program
    name is looked up on ``PATH`` without its entries in ``roots`` (the session's workspace
    roots) and what it finds must lie outside them (a path the operator wrote is taken as
    written), and the server gets that ``PATH`` unless its ``env`` sets one
    (:mod:`ringfence.runtime._programs`: an activated project venv let the agent plant the
    ``python3`` the host ran as the operator); Unavailable otherwise.
    """
    env, missing = build_stdio_env(config)
    for name in missing:
        diagnostics.fail("connect", f"inherit_env names {name}, which is not set; not passed")
    redactor.register_env(env)
    record = sandbox if sandbox is not None else {}
    record.clear()
    record["confined"] = False
    command, args, cwd = config.command or "", list(config.args), config.cwd
    if config.sandbox != "local" and roots:
        # The PATH the SDK would give the server (its safe set), searched without the roots.
        path = env.get("PATH") or get_default_environment().get("PATH", os.defpath)
        if "/" not in command:  # a path the operator wrote is the operator's choice
            command = program_outside_roots(command, roots, path, f"server {config.name!r}")
        env.setdefault("PATH", search_path(path, roots))
        if cwd is None:
            cwd = working_directory(roots)
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
        # The server's variables are the server's alone: the wrapper (the spawn gate's shell,
        # bubblewrap: host processes, outside the sandbox) and the supervisor get only the
        # SDK's minimal set; the supervisor hands these to the server at its exec, after
        # every layer (an LD_PRELOAD of a workspace file ran on the host before).
        env = {SANDBOXED_ENV: json.dumps(get_default_environment() | env)}
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
        params, limit, on_stderr=on_stderr, on_report=reported if confined is not None else None
    )


def working_directory(roots: Sequence[str]) -> str | None:
    """Where an unconfined server runs when its manifest names no ``cwd``: this process's
    own directory, unless it lies in a workspace root; then the home directory (``/`` when
    that lies in a root too). A server's working directory is where ``python -m NAME``,
    ``npx`` and ``node`` look first for the code they run: in a root, the agent's
    ``NAME.py`` or ``node_modules`` ran on the host as the operator. None: keep this one."""
    try:
        here = os.getcwd()
    except OSError:
        return "/"
    if in_root(here, roots) is None:
        return None
    home = os.path.expanduser("~")
    return home if os.path.isdir(home) and in_root(home, roots) is None else "/"


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


# The MCP lifecycle's shutdown (2025-11-25, "Shutdown"; the SDK's stdio client keeps the same
# times): stdin closed, this long for the server to exit on its own, then SIGTERM and, after
# as long again, SIGKILL, to the server's whole tree.
EXIT_GRACE_SECONDS = 2.0
KILL_GRACE_SECONDS = 2.0
_WRITER_FLUSH_SECONDS = 0.5  # for the writer to send what was accepted before stdin closes
_READ_SIZE = 65536


@contextlib.asynccontextmanager
async def bounded_stdio_client(
    params: StdioServerParameters,
    limit: InboundLimit,
    *,
    on_stderr: Callable[[int], None],
    on_report: Callable[[bytes], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.stdio_client``'s streams, every inbound line bounded by ``limit`` before it is parsed.

    The server is started through ringfence's process supervisor with the
    SDK's minimal environment (``get_default_environment``) plus
    ``params.env``, exactly; ``on_stderr(fd)`` takes over its stderr. With
    ``on_report``, the process's first stdout line (at most
    ``MAX_REPORT_BYTES``, newline stripped; ``b""`` if stdout ends first) is
    handed to it before anything is sent or parsed; what it raises stops the
    process and propagates. A command that cannot be started raises
    ``FileNotFoundError``/``PermissionError`` naming it (what ``connect``
    reports as such).
    """
    from ... import _proc  # the process supervisor, loaded by the first stdio server

    await trio.to_thread.run_sync(_proc.tracking)  # probed once per process, off this thread
    cwd = Path(params.cwd) if params.cwd is not None else Path.cwd()
    argv = [params.command, *params.args]
    try:
        process = _proc.spawn(
            argv,
            cwd=cwd,
            env=get_default_environment() | (params.env or {}),
            stdin_pipe=True,
            exact_env=True,  # the server's environment is the one built here, nothing else
        )
    except _proc.ExecFailed as exc:
        if exc.code == 127:
            raise FileNotFoundError(
                errno.ENOENT, os.strerror(errno.ENOENT), params.command
            ) from None
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), params.command) from None
    assert process.stdin is not None  # stdin_pipe
    stdin = trio.lowlevel.FdStream(process.stdin)
    stdout = trio.lowlevel.FdStream(process.stdout)
    try:
        on_stderr(process.stderr)
    except BaseException:
        os.close(process.stderr)
        raise
    stopped = False

    async def stop() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            await _stop(process, stdin, stdout)

    try:
        early = b""
        if on_report is not None:
            early = await _read_report(stdout, on_report)
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
                        chunk, pending = (pending, b"") if pending else (b"", b"")
                        if not chunk:
                            chunk = await stdout.receive_some(_READ_SIZE)
                            if not chunk:
                                break
                        for item in reader.feed(chunk):
                            if item is None:
                                # An oversize message we cannot answer: end the connection.
                                limit.closed_for = "max_message_bytes"
                                return
                            await read_writer.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, trio.ClosedResourceError):
                pass  # teardown; the session sees the read stream end
            except OSError:
                pass  # the pipe broke: the same
            finally:
                # Keep the server from blocking on a full pipe until shutdown closes it.
                await _drain(stdout)

        async def stdin_writer() -> None:
            try:
                async with write_reader:
                    async for message in write_reader:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await stdin.send_all(
                            (data + "\n").encode(params.encoding, params.encoding_error_handler)
                        )
            except (
                anyio.ClosedResourceError,
                anyio.BrokenResourceError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                OSError,
            ):
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
                    with anyio.move_on_after(_WRITER_FLUSH_SECONDS):
                        await writer_done.wait()
                    await stop()
                    for stream in (read_stream, write_stream, read_writer, write_reader):
                        await stream.aclose()
                tg.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await stop()  # done already, unless the start failed
            process.close()


async def _stop(
    process: Any, stdin: trio.lowlevel.FdStream, stdout: trio.lowlevel.FdStream
) -> None:
    """Stop the server as the MCP lifecycle says: stdin closed, :data:`EXIT_GRACE_SECONDS` to
    exit, then SIGTERM and SIGKILL; then whatever it left behind. Shielded by the caller."""
    await stdin.aclose()
    with trio.move_on_after(EXIT_GRACE_SECONDS):
        await process.wait_leader()
    if process.leader_exited():
        await process.kill_rest()
    else:
        await process.terminate(KILL_GRACE_SECONDS)
        await process.kill_rest()
    await stdout.aclose()  # a survivor holding the pipe cannot keep the reader waiting


async def _drain(stdout: trio.lowlevel.FdStream) -> None:
    """Read and drop what the server still writes, until its stdout ends or is closed."""
    with (
        trio.CancelScope(shield=True),
        contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError),
    ):
        while await stdout.receive_some(_READ_SIZE):
            pass


async def _read_report(stdout: trio.lowlevel.FdStream, on_report: Callable[[bytes], None]) -> bytes:
    """Read the first stdout line, hand it to ``on_report``; return the bytes after it."""
    buffer = b""
    while b"\n" not in buffer and len(buffer) <= MAX_REPORT_BYTES:
        try:
            chunk = await stdout.receive_some(_READ_SIZE)
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            break
        if not chunk:
            break
        buffer += chunk
    line, newline, rest = buffer.partition(b"\n")
    on_report(line if newline else buffer[:MAX_REPORT_BYTES])  # b"": stdout ended first
    return rest
