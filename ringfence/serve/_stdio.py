"""The stdio wire: this process's stdin/stdout, claimed so nothing else can touch them.

While serving, file descriptor 0 reads ``/dev/null`` and 1 writes to stderr,
so a tool's child process or a stray ``print`` can neither steal a request
nor corrupt a response; the protocol runs on private duplicates (close-on-exec,
so children do not inherit them either).

Why not the SDK's own claim: its stdin reader blocks a worker thread that a
cancellation cannot interrupt, so a SIGTERM would wait until the client sent
another line or closed the pipe. Here a pipe or socket is waited on by trio
itself (cancellable at once), anything else read in a thread that a cancel
abandons, so a signal ends the server at once and the kernel can close and
seal its event stream.

Bounded (issue 29): a request line is split off by
:class:`ringfence.runtime._lines.BoundedLines`, the host side's reader, so no line
longer than :data:`~._defaults.MAX_REQUEST_BYTES` (32 MiB) is ever held, decoded or
parsed. Such a line is dropped as it streams past and answered with a JSON-RPC
error (``-32600``) naming the limit, to its id when the line's first or last bytes
show it (else to ``null``, JSON-RPC's id for a request that could not be read); a
line goes to stderr too, and the server keeps serving.

A line the SDK cannot read as one JSON-RPC message (invalid JSON, nesting past
its parser's depth, a batch array, a value that is no request, notification or
response) is answered as JSON-RPC says, to ``null``: ``-32700`` (parse error) or
``-32600`` (invalid request), naming why (:class:`AnsweringReader`); the SDK
itself only logs it at debug level and the client would wait for ever.

No thread hop per message (issue 20): the SDK's own transport costs three
(``readline``, ``write``, ``flush``, each in a worker: 55-180 µs apiece here),
more than the confined read a ``read_file`` call does. On a pipe or socket the
reader waits for readiness and the writer writes a message of at most
``PIPE_BUF`` bytes directly when ``poll`` shows room (such a write cannot
block); larger messages and other descriptors still use a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import stat
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import trio
from mcp_types import JSONRPCNotification

from ..runtime._lines import BoundedLines, Oversize, oversize_id
from ._defaults import MAX_REQUEST_BYTES

__all__ = ["AnsweringReader", "LineReader", "WireWriter", "claim_stdio"]

READ_CHUNK = 64 * 1024
# JSON-RPC's "Invalid Request": what an oversize request is answered with.
INVALID_REQUEST = -32600
# JSON-RPC's "Parse error": a line that is not JSON (or nested past the parser's depth).
PARSE_ERROR = -32700
# The longest line whose claimed id is checked (AnsweringReader): longer ones are not kept.
MAX_ID_CHECK_CHARACTERS = 1024 * 1024


def _pollable(fd: int) -> bool:
    """A pipe or a socket: epoll can wait on it, and readiness means a read or write won't block."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class LineReader:
    """Lines (str) from the wire descriptor, each at most ``max_bytes``, read without a thread
    where the kernel allows.

    On a pipe or a socket (every real MCP client) it waits for readiness on the
    trio thread (``wait_readable``, cancellable at once) and then reads what is
    there: no worker thread, no hop per request. Anything else (a regular file
    redirected to stdin, a terminal) is read a chunk at a time in a thread that
    a cancel abandons; that thread stays blocked in ``read`` until the input
    yields or closes, and the descriptor is never closed under it.

    A line longer than ``max_bytes`` is never held: it is handed to
    ``on_oversize`` (its ends and size, see :class:`~ringfence.runtime._lines.Oversize`)
    and reading goes on; without ``on_oversize`` it is dropped.
    """

    def __init__(
        self,
        fd: int,
        max_bytes: int = MAX_REQUEST_BYTES,
        on_oversize: Callable[[Oversize], Awaitable[None]] | None = None,
        prefix: bytes = b"",
    ) -> None:
        self._fd = fd
        self._fast = _pollable(fd)
        self._lines = BoundedLines(max_bytes)
        # ``prefix``: bytes read off the descriptor before (the command's early initialize).
        self._ready: deque[bytes | Oversize] = deque(self._lines.feed(prefix) if prefix else ())
        self._last = False  # the line in _ready is the stream's last, without its newline
        self._eof = False
        self._on_oversize = on_oversize
        # The lines handed out and not yet matched with the SDK's reading of them (one
        # item each, in order; see AnsweringReader): at most one or two at a time.
        self.handed: deque[str | None] = deque(maxlen=8)  # bounded even if nobody pops

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            while self._ready:
                line = self._ready.popleft()
                if isinstance(line, Oversize):
                    if self._on_oversize is not None:
                        await self._on_oversize(line)
                    continue
                end = "" if self._last and not self._ready else "\n"
                text = line.decode("utf-8", errors="replace") + end
                # Kept for AnsweringReader's id check (a line over the bound is not kept).
                self.handed.append(text if len(text) <= MAX_ID_CHECK_CHARACTERS else None)
                return text
            if self._eof:
                raise StopAsyncIteration
            if self._fast:
                await trio.lowlevel.wait_readable(self._fd)
                chunk = os.read(self._fd, READ_CHUNK)  # readable: returns at once (data or EOF)
            else:
                chunk = await trio.to_thread.run_sync(self._read_chunk, abandon_on_cancel=True)
            if chunk:
                self._ready.extend(self._lines.feed(chunk))
                continue
            self._eof = True
            last = self._lines.end()
            if last is not None:
                self._ready.append(last)
                self._last = True

    def _read_chunk(self) -> bytes:
        return os.read(self._fd, READ_CHUNK)


class WireWriter:
    """Text to the wire descriptor: :meth:`write` buffers, :meth:`flush` sends.

    A message of at most ``PIPE_BUF`` bytes is written on the trio thread when
    ``poll`` shows the pipe or socket has room: such a write is atomic and
    cannot block. A larger message, a full pipe or another kind of descriptor
    goes to a worker thread (one hop, as every write did before). What the SDK
    transport needs of its ``stdout``: ``write`` and ``flush``.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = bytearray()
        # One flush at a time: the SDK's writer and an oversize answer share the wire, and a
        # message in a worker's write must not be cut by another one written directly.
        self._flushing = trio.Lock()
        self._poll: select.poll | None = None
        if _pollable(fd):
            self._poll = select.poll()
            self._poll.register(fd, select.POLLOUT)

    async def write(self, text: str) -> None:
        self._pending += text.encode("utf-8")

    async def flush(self) -> None:
        async with self._flushing:
            data = bytes(self._pending)
            self._pending.clear()
            if not data:
                return
            if self._poll is not None and len(data) <= select.PIPE_BUF and self._room():
                written = os.write(self._fd, data)  # atomic: all or (on error) an exception
                data = data[written:]
                if not data:
                    return
            await trio.to_thread.run_sync(self._write_all, data)

    def _room(self) -> bool:
        assert self._poll is not None
        events = self._poll.poll(0)
        bad = select.POLLERR | select.POLLHUP | select.POLLNVAL
        return bool(events) and not events[0][1] & bad and bool(events[0][1] & select.POLLOUT)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        os.close(self._fd)


@contextlib.contextmanager
def claim_stdio(prefix: bytes = b"") -> Iterator[tuple[LineReader, WireWriter]]:
    """Move the wire off fds 0 and 1 for the duration; yield (lines in, text out).

    ``prefix``: what was already read from stdin (:mod:`._early`), read first.

    Raises OSError when the descriptors cannot be duplicated (for example,
    when stdin or stdout is closed).
    """
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
    finally:
        os.close(devnull)
    # The reader's descriptor is never closed: an abandoned thread may still be
    # blocked on it, so it must not be closed (and recycled) under that thread.
    out = WireWriter(wire_out)

    async def answer(dropped: Oversize) -> None:
        await answer_oversize(out, dropped, MAX_REQUEST_BYTES)

    reader = LineReader(wire_in, MAX_REQUEST_BYTES, answer, prefix)
    try:
        yield reader, out
    finally:
        # Put the wire back on 0 and 1 for whoever runs after us in this process.
        for wire, fd in ((wire_in, 0), (wire_out, 1)):
            with contextlib.suppress(OSError):
                os.dup2(wire, fd)
        with contextlib.suppress(OSError):
            out.close()


async def answer_oversize(out: WireWriter, dropped: Oversize, limit: int) -> None:
    """Tell the client its message was over ``limit`` and dropped unread (and say so on stderr).

    The answer goes to the request's id when the line's ends show it, else to
    ``null`` (JSON-RPC's id for a request that could not be read).
    """
    request_id = oversize_id(dropped, ("method",))
    message = (
        f"request larger than ringfence serve's limit of {limit:,} bytes "
        f"({limit / 2**20:g} MiB): {dropped.size:,} bytes discarded unread; "
        "send smaller arguments (a large file through the workspace, not inline)"
    )
    error = {"code": INVALID_REQUEST, "message": message, "data": {"max_bytes": limit}}
    await out.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}) + "\n")
    await out.flush()
    sys.stderr.write(f"ringfence serve: {message} (id {json.dumps(request_id)})\n")
    sys.stderr.flush()


class AnsweringReader:
    """The SDK transport's read stream, with what it could not read answered on the wire.

    The SDK's stdio transport hands a line it cannot validate to the server
    loop as an exception, which logs it at debug level and sends nothing, so a
    client waits for an answer that never comes. Here such an item is answered
    with a JSON-RPC error to ``null`` (the id of a message that could not be
    read), never passed on, and reading goes on. The rest is the SDK stream's,
    passed through (``last_context`` included: the sender's context).
    """

    def __init__(self, inner: Any, out: WireWriter, lines: LineReader | None = None) -> None:
        self._inner = inner
        self._out = out
        self._lines = lines

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            # The SDK reads each line the LineReader hands out as exactly one item, in order.
            line = self._lines.handed.popleft() if self._lines and self._lines.handed else None
            if not isinstance(item, Exception):
                if line is not None and isinstance(
                    getattr(item, "message", None), JSONRPCNotification
                ):
                    bad = claimed_id(line)
                    if bad is not None:
                        await answer_bad_id(self._out, bad)
                        continue  # never passed on: it was no notification
                return item
            await answer_unreadable(self._out, item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def unreadable_error(exc: Exception) -> dict[str, Any] | None:
    """The JSON-RPC error for a line the SDK could not read (``exc``: its validation error).

    None for a blank line: no message was sent, so none is answered.
    """
    errors: list[dict[str, Any]] = []
    with contextlib.suppress(Exception):
        errors = list(exc.errors(include_url=False))  # type: ignore[attr-defined]  # pydantic's
    first = errors[0] if errors else {}
    text = first.get("input")
    if isinstance(text, str) and not text.strip():
        return None
    if first.get("type") == "json_invalid":
        reason = str(first.get("msg", "invalid JSON"))[:200]
        return {"code": PARSE_ERROR, "message": f"Parse error: {reason}"}
    if isinstance(first.get("input"), list):
        why = (
            "a JSON array (a JSON-RPC batch); MCP has no batches since 2025-06-18: "
            "send one message per line"
        )
    else:
        why = "not a JSON-RPC 2.0 request, notification or response"
    return {"code": INVALID_REQUEST, "message": f"Invalid Request: {why}"}


def claimed_id(line: str) -> str | None:
    """The JSON of the ``id`` a line read as a notification carries, or None when it has none.

    The SDK reads a request whose ``id`` is no JSON-RPC id (a float such as ``1e400``, a
    boolean, ``null``, an object) as a notification, dropping the ``id``: so nothing would
    answer it. Parsed only for such lines (notifications are small and rare)."""
    if '"id"' not in line:
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or "id" not in value:
        return None
    claimed = value["id"]
    if isinstance(claimed, str) or (isinstance(claimed, int) and not isinstance(claimed, bool)):
        return None  # a valid id: not what made the SDK read a notification
    return json.dumps(claimed)[:100]


async def answer_bad_id(out: WireWriter, shown: str) -> None:
    """Answer a request whose ``id`` is no id with JSON-RPC's ``-32600`` to ``null``."""
    error = {
        "code": INVALID_REQUEST,
        "message": f"Invalid Request: its id {shown} is not a JSON-RPC id (a string or an "
        "integer); it was not run",
    }
    await out.write(json.dumps({"jsonrpc": "2.0", "id": None, "error": error}) + "\n")
    await out.flush()


async def answer_unreadable(out: WireWriter, exc: Exception) -> None:
    """Answer a line the SDK could not read with a JSON-RPC error to ``null``."""
    error = unreadable_error(exc)
    if error is None:
        return
    await out.write(json.dumps({"jsonrpc": "2.0", "id": None, "error": error}) + "\n")
    await out.flush()
