"""Newline-delimited JSON-RPC from a peer, bounded before anything is decoded or parsed.

:class:`BoundedLines` splits a byte stream into lines of at most ``max_bytes``
and never holds more than that (plus one chunk): a longer line is dropped as it
streams past, keeping only its first and last :data:`PEEK` bytes and its size
(an :class:`Oversize`). Both ends of an MCP stdio connection read through it:
the host side (``mcp_host._inbound``: a server's replies) and ``ringfence
serve`` (``serve._stdio``: a client's requests). :func:`oversize_id` reads the
JSON-RPC id of a dropped message from those ends, without parsing it, when they
show it unambiguously, so the peer can be answered about that very message.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

__all__ = ["PEEK", "BoundedLines", "Oversize", "oversize_id"]

# How much of each end of a dropped line is kept (to find its id).
PEEK = 512


@dataclass(frozen=True)
class Oversize:
    """A line longer than the limit, dropped unread: its first and last bytes, and its size."""

    head: bytes
    tail: bytes
    size: int


class BoundedLines:
    """Splits a byte stream into lines (without their ``\\n``) of at most ``max_bytes``.

    :meth:`feed` returns, for each line a chunk completes, its bytes or an
    :class:`Oversize`; :meth:`end` returns what is left when the stream ends (a
    last line without its newline), if anything. Memory is bounded by
    ``max_bytes`` plus the chunk being fed, whatever the peer sends.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._dropping = False
        self._size = 0
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> list[bytes | Oversize]:
        pieces = chunk.split(b"\n")
        self._take(pieces[0])
        if len(pieces) == 1:
            return []
        out: list[bytes | Oversize] = [self._line()]
        # The lines the chunk holds whole, split in C, each as _take then _line would make it
        # (one by one in Python, a 4 MiB chunk of blank lines held the review page's loop 15 s).
        limit = self.max_bytes
        whole = pieces[1:-1]
        if len(chunk) > limit and whole and max(map(len, whole)) > limit:
            whole = [p if len(p) <= limit else Oversize(p[:PEEK], p[-PEEK:], len(p)) for p in whole]
        out += whole
        self._take(pieces[-1])
        return out

    def _take(self, piece: bytes) -> None:
        """Add ``piece`` (no newline in it) to the line under way."""
        if self._dropping:
            self._tail = (self._tail + piece)[-PEEK:]
            self._size += len(piece)
        elif len(self._buffer) + len(piece) > self.max_bytes:
            self._head = (bytes(self._buffer[:PEEK]) + piece[:PEEK])[:PEEK]
            self._tail = (bytes(self._buffer[-PEEK:]) + piece)[-PEEK:]
            self._size = len(self._buffer) + len(piece)
            self._buffer = bytearray()
            self._dropping = True
        else:
            self._buffer += piece

    def end(self) -> bytes | Oversize | None:
        """The unterminated last line at the end of the stream, or None if there is none."""
        if not self._dropping and not self._buffer:
            return None
        return self._line()

    def _line(self) -> bytes | Oversize:
        if self._dropping:
            dropped = Oversize(self._head, self._tail, self._size)
            self._dropping = False
            self._head = self._tail = b""
            self._size = 0
            return dropped
        line, self._buffer = bytes(self._buffer), bytearray()
        return line


_ID = rb'(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")'


@functools.cache
def _patterns(
    keys: tuple[str, ...],
) -> tuple[re.Pattern[bytes], re.Pattern[bytes], re.Pattern[bytes]]:
    names = b"|".join(re.escape(k.encode()) for k in keys)
    head_id = re.compile(
        rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*'
        + _ID
        + rb'\s*,\s*"(?:'
        + names
        + rb')"\s*:'
    )
    head_key = re.compile(rb'^\s*\{\s*"(?:' + names + rb')"\s*:')
    tail_id = re.compile(rb'"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*' + _ID + rb"\s*\}\s*$")
    return head_id, head_key, tail_id


def oversize_id(dropped: Oversize, keys: tuple[str, ...]) -> int | str | None:
    """The JSON-RPC id of a dropped message whose next (or first) member is one of ``keys``.

    ``("result", "error")`` reads a response, ``("method",)`` a request. Two
    shapes are read, the ones the SDKs write: ``{"jsonrpc":"2.0","id":7,"<key>":…``
    (Python) and ``{"<key>":…,"jsonrpc":"2.0","id":7}`` (TypeScript). None when
    neither end shows it unambiguously.
    """
    head_id, head_key, tail_id = _patterns(keys)
    found = head_id.match(dropped.head)
    if found is None and head_key.match(dropped.head):
        found = tail_id.search(dropped.tail)
    if found is None:
        return None
    raw = found.group(1)
    if raw.startswith(b'"'):
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    return int(raw)
