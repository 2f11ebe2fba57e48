"""The stdio wire: this process's stdin/stdout, claimed so nothing else can touch them.

While serving, file descriptor 0 reads ``/dev/null`` and 1 writes to stderr,
so a tool's child process or a stray ``print`` can neither steal a request
nor corrupt a response; the protocol runs on private duplicates (close-on-exec,
so children do not inherit them either).

Why not the SDK's own claim: its stdin reader blocks a worker thread that a
cancellation cannot interrupt, so a SIGTERM would wait until the client sent
another line or closed the pipe. Here each line is read in a thread that a
cancel abandons, so a signal ends the server at once and the kernel can close
and seal its event stream.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Iterator
from typing import BinaryIO

import anyio
import trio

__all__ = ["LineReader", "claim_stdio"]


class LineReader:
    """Lines (str) from a binary pipe; each read is abandoned, not awaited, on cancel.

    The abandoned thread stays blocked in ``readline`` until the pipe yields
    or closes; the descriptor is never closed under it.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        line = await trio.to_thread.run_sync(self._raw.readline, abandon_on_cancel=True)
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


@contextlib.contextmanager
def claim_stdio() -> Iterator[tuple[LineReader, anyio.AsyncFile[str]]]:
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
    # closefd=False for the reader: an abandoned thread may still be blocked on it,
    # so its descriptor is never closed (and never recycled) under that thread.
    reader = LineReader(os.fdopen(wire_in, "rb", closefd=False))
    out = io.TextIOWrapper(os.fdopen(wire_out, "wb"), encoding="utf-8", newline="\n")
    try:
        yield reader, anyio.wrap_file(out)
    finally:
        # Put the wire back on 0 and 1 for whoever runs after us in this process.
        for wire, fd in ((wire_in, 0), (wire_out, 1)):
            with contextlib.suppress(OSError):
                os.dup2(wire, fd)
        with contextlib.suppress(OSError, ValueError):
            out.close()
