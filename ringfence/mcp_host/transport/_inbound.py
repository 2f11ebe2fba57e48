"""The inbound message cap: no JSON-RPC message larger than ``max_message_bytes`` is parsed.

Over stdio each line is bounded before it is decoded (:class:`LineReader`);
over Streamable HTTP a JSON body is bounded while it is read
(:class:`BoundedTransport`); an SSE event is bounded by the SDK's own
event-size cap. The same transport sends a connection's event-stream GETs at most one
per :data:`MIN_STREAM_INTERVAL`, whatever ``retry:`` the server asks for. An oversize *response* whose id can be read from its first or
last bytes becomes a synthesized error for that request (marked with a value
only ringfence knows, so a server cannot forge one); anything else oversize
closes the connection.

:func:`watch_inbound` puts any transport's read stream behind a watcher that
notes when it ends (what the connection pool asks before it reuses a connection).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import trio
from anyio.abc import ObjectReceiveStream
from mcp import types
from mcp.shared.message import SessionMessage

from ...runtime._lines import BoundedLines, Oversize, oversize_id

__all__ = ["BoundedTransport", "InboundLimit", "LineReader", "watch_inbound"]

# Seconds between two event-stream GETs of one connection (the SDK's own default wait).
MIN_STREAM_INTERVAL = 1.0


@dataclass
class InboundLimit:
    """The inbound message cap of one connection, and what happened to it.

    ``marker`` is a random value only ringfence knows: an error ringfence
    synthesizes for an oversize reply carries it, so a server cannot forge one.
    ``closed_for`` says why the transport was closed by the cap, if it was;
    ``ended`` that the transport's read stream ended (nothing more will come:
    the server closed it, or the cap did).
    """

    max_bytes: int
    marker: str = field(default_factory=lambda: secrets.token_hex(12))
    closed_for: str | None = None
    ended: bool = False

    def message(self, who: str, action: str) -> str:
        return (
            f"{who}: the reply to {action} is larger than max_message_bytes "
            f"({self.max_bytes} bytes); it was discarded unread. Raise max_message_bytes for this "
            "server in the manifest if such replies are expected."
        )


def _oversize_reply_id(dropped: Oversize) -> int | str | None:
    """The id of an oversize *response* (``result`` or ``error``), if its ends show it
    unambiguously (:func:`ringfence.runtime._lines.oversize_id`); anything else that is
    too large closes the connection instead."""
    return oversize_id(dropped, ("result", "error"))


def _limit_error(request_id: int | str, limit: InboundLimit) -> SessionMessage:
    error = types.ErrorData(
        code=types.INTERNAL_ERROR,
        message=f"reply larger than max_message_bytes ({limit.max_bytes} bytes)",
        data={"ringfence_inbound_limit": limit.marker},
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


class LineReader:
    """Splits a byte stream into lines of at most ``limit.max_bytes``, never buffering more.

    The splitting is :class:`ringfence.runtime._lines.BoundedLines` (``ringfence
    serve`` reads its clients through it too). ``feed`` returns what to hand to
    the SDK for each finished line: a parsed message, a parse error, a
    synthesized limit error, or ``None`` when the connection must be closed.
    """

    def __init__(self, limit: InboundLimit, encoding: str, errors: str) -> None:
        self.limit = limit
        self.encoding = encoding
        self.errors = errors
        self._lines = BoundedLines(limit.max_bytes)

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception | None]:
        return [self._message(line) for line in self._lines.feed(chunk)]

    def _message(self, line: bytes | Oversize) -> SessionMessage | Exception | None:
        if isinstance(line, Oversize):
            request_id = _oversize_reply_id(line)
            return None if request_id is None else _limit_error(request_id, self.limit)
        try:
            text = line.decode(self.encoding, self.errors)
        except UnicodeDecodeError as exc:
            return exc
        try:
            message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        except ValueError as exc:  # pydantic's ValidationError: the session surfaces it
            return exc
        return SessionMessage(message)


class _Watched(ObjectReceiveStream[Any]):
    """A transport's read stream, noting in ``limit.ended`` when its reader stops.

    Its one reader is the client's receive loop, which runs for the connection's
    life: a receive that raises (the stream ended or was closed, or the loop was
    cancelled because the transport's tasks failed, e.g. a POST that found the
    server gone) ends it, and nothing more will be read from this connection.
    """

    def __init__(self, inner: ObjectReceiveStream[Any], limit: InboundLimit) -> None:
        self._inner = inner
        self._limit = limit

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except BaseException:
            self._limit.ended = True
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # What else a reader asks of the stream (the SDK's per-message ``last_context``).
        return getattr(self._inner, name)


@contextlib.asynccontextmanager
async def watch_inbound(transport: Any, limit: InboundLimit) -> AsyncIterator[tuple[Any, Any]]:
    """``transport`` (an async context manager of ``(read, write)``) with its read stream
    watched: ``limit.ended`` says once the stream has ended."""
    async with transport as (read_stream, write_stream):
        yield _Watched(read_stream, limit), write_stream


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


# What a compressed body may be decoded from: zlib's window bits for each coding.
_CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_DECODE_STEP = 64 * 1024  # decoded bytes produced at a time (never more held per step)


class _DecodedBody(httpx2.AsyncByteStream):
    """A compressed response body decoded here, a step at a time, stopping with a
    StreamError once the *decoded* bytes pass ``limit.max_bytes`` (a gzip body expands
    ~1,000 times: bounding the bytes on the wire bounded nothing). One coding of
    :data:`_CODINGS`; any other, or several, is refused unread."""

    def __init__(self, inner: Any, coding: str, limit: InboundLimit) -> None:
        self._inner = inner
        self._coding = coding
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._coding not in _CODINGS:
            raise httpx2.StreamError(
                f"response body in content-encoding {self._coding[:40]!r}, which ringfence does "
                "not decode (it asks for identity, and reads gzip or deflate bounded)"
            )
        wbits = _CODINGS[self._coding]
        decoder = zlib.decompressobj(wbits)
        produced = 0
        first = True
        async for chunk in self._inner:
            if first and self._coding == "deflate":
                first = False
                try:  # a zlib stream, or (as some servers send it) raw deflate
                    zlib.decompressobj(wbits).decompress(chunk, 1)
                except zlib.error:
                    decoder = zlib.decompressobj(-zlib.MAX_WBITS)
            data = chunk
            while data:
                try:
                    out = decoder.decompress(data, _DECODE_STEP)
                except zlib.error as exc:
                    raise httpx2.DecodingError(
                        f"response body is not valid {self._coding}: {exc}"
                    ) from None
                data = decoder.unconsumed_tail
                produced += len(out)
                if produced > self._limit.max_bytes:
                    raise httpx2.StreamError(
                        f"response body over {self._limit.max_bytes} bytes once decoded "
                        f"[{self._limit.marker}]"
                    )
                if out:
                    yield out
                if not out and not data:
                    break
        rest = decoder.flush()  # all input consumed: what little zlib still buffers
        if produced + len(rest) > self._limit.max_bytes:
            raise httpx2.StreamError(
                f"response body over {self._limit.max_bytes} bytes once decoded "
                f"[{self._limit.marker}]"
            )
        if rest:
            yield rest

    async def aclose(self) -> None:
        await self._inner.aclose()


def _read_as_events(request: httpx2.Request, response: httpx2.Response) -> bool:
    """Whether the SDK reads ``response`` as an event stream, event by event (each bounded by
    its own cap): a 2xx ``text/event-stream`` answer to a GET or POST that asked for one.

    The content type alone is the server's to choose: every other response the SDK reads
    whole with ``aread`` (a redirect it drains before following, a DELETE's answer, the
    OAuth flow's metadata, registration and token replies), and an event-stream type there
    left the body unbounded (a 307 to the same origin with 48 MiB of body was read whole
    under a 1 MiB cap)."""
    return (
        200 <= response.status_code < 300
        and request.method in ("GET", "POST")
        and "text/event-stream" in request.headers.get("accept", "").lower()
        and response.headers.get("content-type", "").lower().startswith("text/event-stream")
    )


class BoundedTransport(httpx2.AsyncBaseTransport):
    """Bounds every response body the SDK reads whole (an event stream it reads event by
    event is bounded by the SDK per event: :func:`_read_as_events`), and every compressed
    body, SSE included, by its decoded bytes (decoded here: httpx never sees its
    ``Content-Encoding``, so nothing decodes it unbounded)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: InboundLimit) -> None:
        self._inner = inner
        self._limit = limit
        self._next_stream: float = -math.inf  # when the next event-stream GET may be sent

    async def _space_stream_opens(self, request: httpx2.Request) -> None:
        """Hold an event-stream GET until :data:`MIN_STREAM_INTERVAL` after the one before.

        The SDK reopens the server's event stream whenever it ends, waiting what the
        stream's ``retry:`` field says: a server answering each GET with ``retry: 0`` and
        an end had the client reconnect at once, for ever (~20 GETs a second, for the whole
        session). Other requests (calls, OAuth metadata) are never held.
        """
        if request.method != "GET" or "text/event-stream" not in request.headers.get("accept", ""):
            return
        slot = max(trio.current_time(), self._next_stream)
        self._next_stream = slot + MIN_STREAM_INTERVAL
        await trio.sleep_until(slot)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await self._space_stream_opens(request)
        response = await self._inner.handle_async_request(request)
        codings = [
            c.strip().lower()
            for c in response.headers.get("content-encoding", "").split(",")
            if c.strip() and c.strip().lower() != "identity"
        ]
        if codings:
            headers = response.headers.copy()
            del headers["content-encoding"]
            headers.pop("content-length", None)
            return httpx2.Response(
                status_code=response.status_code,
                headers=headers,
                stream=_DecodedBody(
                    response.stream,
                    codings[0] if len(codings) == 1 else ",".join(codings),
                    self._limit,
                ),
                extensions=response.extensions,
            )
        if _read_as_events(request, response):
            return response
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedBody(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
