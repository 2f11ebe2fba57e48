"""The bridge's wire protocol: framed JSON, sequence numbers, mutual HMAC handshake.

This module is imported by the host (as ``ringfence.bridge._wire``) *and* by
the script runner, which :mod:`ringfence._confine.boot` starts with ``python
-I -S`` (in a container, too) and which imports it from its own package
directory. It therefore uses the standard library only and does no I/O of its own: the host drives it with trio
streams, the runner with a blocking socket.

Frame::

    u32 big-endian length N | N bytes: 32-byte tag | UTF-8 JSON object

Every JSON object carries ``seq``: each direction counts its own messages from
0, and a receiver accepts exactly the next number, so a replayed, dropped or
reordered message is refused. Once the handshake is done, ``tag`` is
HMAC-SHA256 under the session key over a direction label and the body, so a
message reflected back to its sender, or carried over from another run, does
not verify. During the handshake the tag is all zeros and is not checked (the
handshake messages authenticate themselves).

Handshake (the child connects; ``secret`` is 32 random bytes the host handed
the child through an inherited pipe, never argv or the environment)::

    child → host   hello      {protocol, nonce: nc}
    host  → child  challenge  {nonce: nh, proof: HMAC(secret, "host" | nc | nh)}
    child → host   auth       {proof: HMAC(secret, "child" | nc | nh)}
    host  → child  welcome    (first tagged message)

    session key = HMAC(secret, "session" | nc | nh)

Both nonces are fresh 32-byte values from the OS CSPRNG, so neither proof can
be replayed into another handshake, and the labels keep the host's proof from
being used as the child's. Comparisons use :func:`hmac.compare_digest`.

Bounds, checked before anything is parsed: a frame is at most ``max_frame``
bytes (:data:`HANDSHAKE_MAX_FRAME` until the handshake is done, so a peer
without the secret cannot make the host buffer more than that), and a message
nests at most ``max_depth`` arrays/objects (:func:`nesting_exceeds`, a linear
scan done in C by ``bytes`` methods), so :func:`json.loads` never recurses
deeper than that and a deep frame is an ``oversized`` refusal, never a
``RecursionError``. ``encode`` applies the same bounds, so a value that could
not be received is refused on the sending side.

Non-guarantees: frames are not encrypted (the bridge is a Unix socket in a
private directory, or loopback); a peer that never sends keeps its connection
until the host's handshake deadline or the run's timeout.
"""

from __future__ import annotations

import hmac
import json
import os
import struct
from array import array
from itertools import accumulate
from typing import Any

PROTOCOL = "ringfence-bridge/1"
SECRET_BYTES = 32
NONCE_BYTES = 32
TAG_BYTES = 32
HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
# hello, challenge and auth are ~200 bytes: before the handshake a peer gets no more than this.
HANDSHAKE_MAX_FRAME = 4096
# Arrays/objects a message may nest, the message itself included. Well under the interpreter's
# recursion limit, which the kernel's recursive walks (redaction, schema checks) also need.
DEFAULT_MAX_DEPTH = 64

_ZERO_TAG = bytes(TAG_BYTES)
# Made once: json.dumps/json.loads with arguments build a new encoder (or sniff the
# encoding of bytes) on every call, a few µs of each round trip.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_DECODE = json.JSONDecoder().decode
_LABEL_HOST = PROTOCOL.encode() + b" host proof"
_LABEL_CHILD = PROTOCOL.encode() + b" child proof"
_LABEL_SESSION = PROTOCOL.encode() + b" session key"
# Direction labels bound into every tag: a message cannot be reflected back.
TO_HOST = b"child->host"
TO_CHILD = b"host->child"

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME",
    "HANDSHAKE_MAX_FRAME",
    "HEADER",
    "PROTOCOL",
    "SECRET_BYTES",
    "TO_CHILD",
    "TO_HOST",
    "Codec",
    "ProtocolError",
    "child_proof",
    "host_proof",
    "nesting_exceeds",
    "new_nonce",
    "session_key",
]


class ProtocolError(Exception):
    """A frame or message the protocol refuses: bad length, tag, JSON, sequence or proof.

    ``reason`` is a short stable word for the event stream (``bad_tag``,
    ``out_of_order``, ``oversized``, ``malformed``, ``bad_proof``,
    ``unexpected``, ``closed``). ``oversized`` covers both limits, bytes and
    nesting depth; the message names the one that was passed.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_FOLD_BRACES = bytes.maketrans(b"{}", b"[]")
_SIGN = bytes.maketrans(b"[]", b"\x01\xff")  # as signed bytes: +1, -1
_PASSES = 8


def nesting_exceeds(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` may nest more than ``limit`` arrays/objects.

    Exact for valid JSON; for invalid JSON it may say ``True`` (a refusal
    either way), but never ``False`` where :func:`json.loads` would recurse
    deeper than ``limit`` before finding the error. Linear, in C loops
    (``bytes`` methods, :func:`itertools.accumulate`): ~0.3 µs for a typical
    message, ~1 s at worst for 16 MiB of crafted brackets (which take
    :func:`json.loads` several seconds).
    """
    if body.count(b"[") + body.count(b"{") <= limit:  # nearly every message: done
        return False
    if b"\\" in body:
        # Backslashes pair left to right, as JSON reads them: drop escaped backslashes, then
        # escaped quotes, so every '"' left delimits a string. (Outside strings a backslash is
        # a JSON error, after which json.loads reads nothing more.)
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    text = body.translate(_FOLD_BRACES, _NOT_STRUCTURE)  # only '[', ']' and '"' remain
    if b'"' in text:
        text = b"".join(text.split(b'"')[::2])  # the even pieces are outside strings
    if b"[" * (limit + 1) in text:
        return True
    # A few passes each remove the innermost pairs, lowering the depth by exactly one (for
    # balanced text; by at most one otherwise): ordinary data is empty after them.
    passes = 0
    while text and passes < _PASSES:
        shorter = text.replace(b"[]", b"")
        if len(shorter) == len(text):  # non-empty with no innermost pair: unbalanced
            return True
        text, passes = shorter, passes + 1
    if not text:
        return passes > limit  # emptied by the n-th pass: the depth was exactly n
    # What is left: the running depth, summed by C iterators (~40 ns a bracket).
    steps = array("b", text.translate(_SIGN))
    return max(accumulate(steps)) > limit - passes


def new_nonce() -> bytes:
    # os.urandom is what secrets.token_bytes calls; importing secrets would cost the child
    # (random, base64, …) at every start.
    return os.urandom(NONCE_BYTES)


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.digest(key, b"".join(parts), "sha256")


def _tag(keyed: Any, body: bytes) -> bytes:
    """A frame's tag: ``keyed`` (an HMAC already fed its key and label) over ``body``."""
    mac = keyed.copy()
    mac.update(body)
    return mac.digest()  # type: ignore[no-any-return]


def host_proof(secret: bytes, nc: bytes, nh: bytes) -> bytes:
    return _mac(secret, _LABEL_HOST, nc, nh)


def child_proof(secret: bytes, nc: bytes, nh: bytes) -> bytes:
    return _mac(secret, _LABEL_CHILD, nc, nh)


def session_key(secret: bytes, nc: bytes, nh: bytes) -> bytes:
    return _mac(secret, _LABEL_SESSION, nc, nh)


def check_proof(expected: bytes, claimed: Any) -> None:
    """Raise ``bad_proof`` unless ``claimed`` (hex) equals ``expected``, in constant time."""
    try:
        raw = bytes.fromhex(claimed) if isinstance(claimed, str) else b""
    except ValueError:
        raw = b""
    if not hmac.compare_digest(raw, expected):
        raise ProtocolError("bad_proof", "the peer's handshake proof does not verify")


def decode_nonce(value: Any) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != NONCE_BYTES:
        raise ProtocolError("malformed", f"a handshake nonce must be {NONCE_BYTES} bytes of hex")
    return raw


class Codec:
    """Encodes and checks the frames of one side of one connection. No I/O.

    ``send_label`` / ``recv_label`` are :data:`TO_HOST` / :data:`TO_CHILD`
    (swapped on the other side). :attr:`key` is ``None`` until the handshake
    sets the session key; from then on every frame must carry a valid tag.
    Until then frames are limited to :data:`HANDSHAKE_MAX_FRAME` bytes.

    Receiving is h11-style: the caller hands over whatever it read
    (:meth:`receive_data`) and asks for :meth:`next_message` until it says
    ``None`` (more bytes needed; :attr:`missing` says at least how many). A
    frame's header is checked as soon as it is complete, so an oversized
    frame is refused before more than one read of its payload is buffered,
    and a frame is decoded only when asked for, so a key set by the handshake
    applies to every frame after it even if its bytes arrived early.
    """

    def __init__(
        self,
        send_label: bytes,
        recv_label: bytes,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self.send_label = send_label
        self.recv_label = recv_label
        self.max_frame = max_frame
        self.max_depth = max_depth
        self._key: bytes | None = None
        # HMAC states keyed and fed the direction label once, copied for each tag (the
        # key's pads are not hashed again per message): HMAC(key, label | body) as before.
        self._send_mac: Any = None
        self._recv_mac: Any = None
        self.sent = 0
        self.received = 0
        self.received_bytes = 0  # of every message decoded (tag and body)
        self._buffer = bytearray()

    @property
    def key(self) -> bytes | None:
        """The session key (None until the handshake sets it); setting it arms the tags."""
        return self._key

    @key.setter
    def key(self, key: bytes | None) -> None:
        self._key = key
        if key is None:
            self._send_mac = self._recv_mac = None
        else:
            self._send_mac = hmac.new(key, self.send_label, "sha256")
            self._recv_mac = hmac.new(key, self.recv_label, "sha256")

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the peer (any amount; nothing is parsed yet)."""
        self._buffer += data

    def next_message(self) -> dict[str, Any] | None:
        """The next whole message, checked (:meth:`decode`), or None until more bytes arrive.

        Raises :class:`ProtocolError` for a refused header or frame; the
        connection is then unusable (its sequence is broken).
        """
        buffer = self._buffer
        if len(buffer) < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(buffer)
        self._check_length(length)
        end = HEADER.size + length
        if len(buffer) < end:
            return None
        payload = bytes(buffer[HEADER.size : end])
        del buffer[:end]
        return self.decode(payload)

    @property
    def missing(self) -> int:
        """At least how many more bytes :meth:`next_message` needs (a hint for the read size)."""
        have = len(self._buffer)
        if have < HEADER.size:
            return HEADER.size - have
        (length,) = HEADER.unpack(self._buffer[: HEADER.size])
        return max(HEADER.size + length - have, 0)

    def encode(self, message: dict[str, Any]) -> bytes:
        """One frame for ``message`` (a dict; ``seq`` is added). Raises ProtocolError when too big.

        A message that cannot be encoded (not JSON: TypeError/ValueError; too
        large or too deep: ProtocolError) uses no sequence number.
        """
        message["seq"] = self.sent
        body = self._body(message)
        tag = _ZERO_TAG if self._send_mac is None else _tag(self._send_mac, body)
        self.sent += 1
        return b"".join((HEADER.pack(len(body) + TAG_BYTES), tag, body))

    def measure(self, message: dict[str, Any]) -> int:
        """The size of the frame :meth:`encode` would make of ``message``, with its checks.

        Raises what :meth:`encode` would; uses no sequence number.
        """
        return HEADER.size + TAG_BYTES + len(self._body({**message, "seq": self.sent}))

    def _body(self, message: dict[str, Any]) -> bytes:
        body = _ENCODE(message).encode()
        if len(body) + TAG_BYTES > self.limit:
            raise ProtocolError(
                "oversized",
                f"a message of {len(body)} bytes exceeds the {self.limit}-byte frame limit",
            )
        self._check_depth(body)
        return body

    @property
    def limit(self) -> int:
        """The frame size allowed now: :data:`HANDSHAKE_MAX_FRAME` until the session key is set."""
        return self.max_frame if self._key is not None else min(self.max_frame, HANDSHAKE_MAX_FRAME)

    def _check_depth(self, body: bytes) -> None:
        if nesting_exceeds(body, self.max_depth):
            raise ProtocolError(
                "oversized",
                f"a message nests arrays/objects deeper than the {self.max_depth}-level limit",
            )

    def frame_length(self, header: bytes) -> int:
        """The payload length announced by a 4-byte header; refuses short or oversized frames.

        Called before a byte of the payload is read, so an oversized frame costs nothing.
        """
        (length,) = HEADER.unpack(header)
        self._check_length(length)
        return length

    def _check_length(self, length: int) -> None:
        if length < TAG_BYTES + 2:
            raise ProtocolError("malformed", f"a frame of {length} bytes is too short")
        if length > self.limit:
            stage = "" if self._key is not None else " before the handshake"
            raise ProtocolError(
                "oversized", f"a frame of {length} bytes exceeds the {self.limit}-byte limit{stage}"
            )

    def decode(self, payload: bytes) -> dict[str, Any]:
        """Check the size, tag, nesting and sequence number of one frame's payload; parse it.

        The nesting bound is checked before :func:`json.loads` sees the body.
        """
        if len(payload) > self.limit:
            raise ProtocolError(
                "oversized", f"a frame of {len(payload)} bytes exceeds the {self.limit}-byte limit"
            )
        tag, body = payload[:TAG_BYTES], payload[TAG_BYTES:]
        if self._recv_mac is not None and not hmac.compare_digest(tag, _tag(self._recv_mac, body)):
            raise ProtocolError("bad_tag", "a message's tag does not verify under the session key")
        self._check_depth(body)
        try:
            message = _DECODE(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError("malformed", "a message is not UTF-8 JSON") from None
        except RecursionError:  # unreachable after the depth check; kept as a last fence
            raise ProtocolError("oversized", "a message nests too deeply to parse") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise ProtocolError("malformed", "a message must be a JSON object with a 'type'")
        seq = message.get("seq")
        if type(seq) is not int or seq != self.received:
            raise ProtocolError(
                "out_of_order",
                f"message seq {seq!r} refused: expected {self.received} (replayed or out of order)",
            )
        self.received += 1
        self.received_bytes += len(payload)
        return message

    @staticmethod
    def expect(message: dict[str, Any], kind: str) -> dict[str, Any]:
        if message.get("type") != kind:
            raise ProtocolError(
                "unexpected", f"expected a {kind!r} message, got {message.get('type')!r}"
            )
        return message
