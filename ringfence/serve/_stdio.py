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
import os
import select
import stat
from collections.abc import Iterator
from typing import BinaryIO

import trio

__all__ = ["LineReader", "WireWriter", "claim_stdio"]

READ_CHUNK = 64 * 1024


def _pollable(fd: int) -> bool:
    """A pipe or a socket: epoll can wait on it, and readiness means a read or write won't block."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class LineReader:
    """Lines (str) from the wire descriptor, read without a thread where the kernel allows.

    On a pipe or a socket (every real MCP client) it waits for readiness on the
    trio thread (``wait_readable``, cancellable at once) and then reads what is
    there: no worker thread, no hop per request. Anything else (a regular file
    redirected to stdin, a terminal) is read a line at a time in a thread that
    a cancel abandons; that thread stays blocked in ``readline`` until the
    input yields or closes, and the descriptor is never closed under it.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._fast = _pollable(fd)
        self._raw: BinaryIO | None = None if self._fast else os.fdopen(fd, "rb", closefd=False)
        self._buf = bytearray()
        self._searched = 0  # the buffer holds no newline before this index
        self._eof = False

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        if self._raw is not None:
            line = await trio.to_thread.run_sync(self._raw.readline, abandon_on_cancel=True)
            if not line:
                raise StopAsyncIteration
            return line.decode("utf-8", errors="replace")
        while True:
            end = self._buf.find(b"\n", self._searched)
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                self._searched = 0
                return line.decode("utf-8", errors="replace")
            self._searched = len(self._buf)
            if self._eof:
                if not self._buf:
                    raise StopAsyncIteration
                line = bytes(self._buf)  # a last line without its newline
                self._buf.clear()
                self._searched = 0
                return line.decode("utf-8", errors="replace")
            await trio.lowlevel.wait_readable(self._fd)
            chunk = os.read(self._fd, READ_CHUNK)  # readable: returns at once (data or EOF)
            if chunk:
                self._buf += chunk
            else:
                self._eof = True


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
        self._poll: select.poll | None = None
        if _pollable(fd):
            self._poll = select.poll()
            self._poll.register(fd, select.POLLOUT)

    async def write(self, text: str) -> None:
        self._pending += text.encode("utf-8")

    async def flush(self) -> None:
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
def claim_stdio() -> Iterator[tuple[LineReader, WireWriter]]:
    """Move the wire off fds 0 and 1 for the duration; yield (lines in, text out).

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
    reader = LineReader(wire_in)
    out = WireWriter(wire_out)
    try:
        yield reader, out
    finally:
        # Put the wire back on 0 and 1 for whoever runs after us in this process.
        for wire, fd in ((wire_in, 0), (wire_out, 1)):
            with contextlib.suppress(OSError):
                os.dup2(wire, fd)
        with contextlib.suppress(OSError):
            out.close()
