"""The wire protocol: framing, sequence numbers, tags, and the mutual handshake."""

from __future__ import annotations

import hmac
import json
import random
import socket

import pytest
import trio
import trio.testing
from bridge_helpers import WRONG, RawClient

from ringfence.bridge._channel import Channel
from ringfence.bridge._wire import (
    HANDSHAKE_MAX_FRAME,
    HEADER,
    TAG_BYTES,
    TO_CHILD,
    TO_HOST,
    Codec,
    ProtocolError,
    check_proof,
    child_proof,
    host_proof,
    nesting_exceeds,
    new_nonce,
    session_key,
)

KEY = b"k" * 32


def pair() -> tuple[Codec, Codec]:
    child, host = Codec(TO_HOST, TO_CHILD), Codec(TO_CHILD, TO_HOST)
    child.key = host.key = KEY
    return child, host


def payload(frame: bytes) -> bytes:
    (n,) = HEADER.unpack(frame[: HEADER.size])
    assert len(frame) == HEADER.size + n
    return frame[HEADER.size :]


def test_round_trip_counts_each_direction() -> None:
    child, host = pair()
    for i in range(3):
        msg = host.decode(payload(child.encode({"type": "call", "i": i})))
        assert msg == {"type": "call", "i": i, "seq": i}
    assert host.decode(payload(child.encode({"type": "done"})))["seq"] == 3
    assert child.decode(payload(host.encode({"type": "reply"})))["seq"] == 0


def test_every_tag_is_hmac_sha256_of_the_direction_label_and_the_body() -> None:
    """Pinned to the documented construction, frame after frame (the keyed state each tag
    starts from is reused, never advanced), and a new key replaces the old one."""
    child, _ = pair()
    for i in range(3):
        tagged = payload(child.encode({"type": "call", "i": i}))
        tag, body = tagged[:TAG_BYTES], tagged[TAG_BYTES:]
        assert tag == hmac.digest(KEY, TO_HOST + body, "sha256")
    other = b"o" * 32
    child.key = other
    tagged = payload(child.encode({"type": "call"}))
    assert tagged[:TAG_BYTES] == hmac.digest(other, TO_HOST + tagged[TAG_BYTES:], "sha256")
    child.key = None
    assert payload(child.encode({"type": "hello"}))[:TAG_BYTES] == bytes(TAG_BYTES)


def test_replayed_message_is_refused() -> None:
    child, host = pair()
    frame = child.encode({"type": "call"})
    host.decode(payload(frame))
    with pytest.raises(ProtocolError) as info:
        host.decode(payload(frame))
    assert info.value.reason == "out_of_order"


def test_out_of_order_message_is_refused() -> None:
    child, host = pair()
    first, second = child.encode({"type": "a"}), child.encode({"type": "b"})
    with pytest.raises(ProtocolError) as info:
        host.decode(payload(second))
    assert info.value.reason == "out_of_order"
    assert "expected 0" in info.value.message
    assert host.decode(payload(first))["type"] == "a"  # the refusal consumed nothing


def test_tampered_body_fails_the_tag() -> None:
    child, host = pair()
    data = bytearray(payload(child.encode({"type": "call", "tool": "peek"})))
    data[-3] ^= 0x01
    with pytest.raises(ProtocolError) as info:
        host.decode(bytes(data))
    assert info.value.reason == "bad_tag"


def test_reflected_message_fails_the_tag() -> None:
    """A host message sent back to the host does not verify (direction is in the tag)."""
    _child, host = pair()
    other = Codec(TO_CHILD, TO_HOST)
    other.key = KEY
    with pytest.raises(ProtocolError) as info:
        host.decode(payload(other.encode({"type": "call"})))
    assert info.value.reason == "bad_tag"


def test_message_from_another_session_fails_the_tag() -> None:
    child, host = pair()
    host.key = b"x" * 32
    with pytest.raises(ProtocolError) as info:
        host.decode(payload(child.encode({"type": "call"})))
    assert info.value.reason == "bad_tag"


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"not json", "malformed"), (b"[1, 2]", "malformed"), (b'{"seq": 0}', "malformed")],
)
def test_malformed_bodies(body: bytes, reason: str) -> None:
    host = Codec(TO_CHILD, TO_HOST)
    with pytest.raises(ProtocolError) as info:
        host.decode(bytes(TAG_BYTES) + body)
    assert info.value.reason == reason


def test_frame_length_limits() -> None:
    codec = Codec(TO_CHILD, TO_HOST, max_frame=1024)
    with pytest.raises(ProtocolError) as info:
        codec.frame_length(HEADER.pack(1025))
    assert info.value.reason == "oversized"
    with pytest.raises(ProtocolError):
        codec.frame_length(HEADER.pack(3))
    with pytest.raises(ProtocolError) as info:
        codec.encode({"type": "x", "blob": "a" * 2000})
    assert info.value.reason == "oversized"
    assert codec.sent == 0  # a refused message uses no sequence number


def test_non_json_values_are_refused_before_a_sequence_number_is_used() -> None:
    codec = Codec(TO_HOST, TO_CHILD)
    with pytest.raises(TypeError):
        codec.encode({"type": "call", "arguments": {"x": object()}})
    assert codec.sent == 0
    assert json.loads(payload(codec.encode({"type": "ok"}))[TAG_BYTES:])["seq"] == 0


def test_proofs_are_bound_to_role_and_nonces() -> None:
    secret, nc, nh = b"s" * 32, new_nonce(), new_nonce()
    assert host_proof(secret, nc, nh) != child_proof(secret, nc, nh)
    assert host_proof(secret, nc, nh) != host_proof(secret, nh, nc)
    assert session_key(secret, nc, nh) not in (
        host_proof(secret, nc, nh),
        child_proof(secret, nc, nh),
    )
    check_proof(child_proof(secret, nc, nh), child_proof(secret, nc, nh).hex())
    for claimed in (host_proof(secret, nc, nh).hex(), "zz", None, "", 5):
        with pytest.raises(ProtocolError):
            check_proof(child_proof(secret, nc, nh), claimed)


async def _host_and_client(secret_host: bytes, secret_client: bytes):
    a, b_sock = socket.socketpair()
    a.setblocking(False)
    b = trio.SocketStream(trio.socket.from_stdlib_socket(b_sock))
    host = Channel(a, 1 << 20)
    client = RawClient(b)
    result: dict = {}

    async def host_side() -> None:
        try:
            await host.handshake(secret_host)
            result["host"] = "ok"
        except ProtocolError as exc:
            result["host"] = exc.reason
            host.close()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host_side)
            try:
                result["client"] = await client.handshake(secret_client)
            except ProtocolError as exc:
                result["client"] = exc.reason
                await b.aclose()
    finally:
        host.close()
        await b.aclose()
    return host, client, result


async def test_handshake_agrees_on_a_session_key() -> None:
    secret = b"s" * 32
    host, client, result = await _host_and_client(secret, secret)
    assert result["host"] == "ok"
    assert result["client"]["type"] == "welcome"
    assert host.codec.key == client.codec.key is not None


async def test_handshake_with_the_wrong_secret_is_refused_by_the_host() -> None:
    _host, _client, result = await _host_and_client(b"s" * 32, WRONG)
    assert result["host"] == "bad_proof"
    assert result["client"] is None  # closed, no welcome


async def test_child_refuses_a_host_without_the_secret() -> None:
    """Mutual: a listener that does not know the secret cannot pass as the host."""
    _host, _client, result = await _host_and_client(b"h" * 32, b"s" * 32)
    assert result["client"] == "bad_proof"


# -- bounds checked before parsing ----------------------------------------------------------


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _nested(rng: random.Random, depth: int) -> object:
    if depth == 0 or rng.random() < 0.2:
        # strings full of the characters the scan must not be fooled by
        return rng.choice(['a"[\\', 1, 'x]]\\\\"{', "}{", "\\u005b[", None])
    if rng.random() < 0.5:
        return [_nested(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {f'{i}"[{{': _nested(rng, depth - 1) for i in range(rng.randint(0, 3))}


def test_the_nesting_bound_is_exact_for_json() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        value = _nested(rng, rng.randint(0, 16))
        body = json.dumps(value).encode()
        limit = rng.randint(0, 14)
        assert nesting_exceeds(body, limit) == (_depth(value) > limit), (body, limit)


def test_unbalanced_or_hostile_bracket_runs_are_refused_in_linear_time() -> None:
    import time

    for body in (
        b"[" * 100_000,
        b"[[]" * 1_000_000,  # never empties
        b"]" * 70 + b"[" * 70,
        b'["' + b"[" * 1_000_000 + b'"]',  # brackets inside a string: shallow, fine
    ):
        started = time.perf_counter()
        refused = nesting_exceeds(body, 64)
        assert time.perf_counter() - started < 1.0
        assert refused is (not body.startswith(b'["'))


def test_a_deep_frame_is_refused_before_it_is_parsed() -> None:
    """100,000 levels, correctly tagged: an ``oversized`` refusal, never a RecursionError."""
    child, host = pair()
    child.max_depth = 10**9  # a sender that ignores the bound (escaped code in the runner)
    deep = {"type": "call", "arguments": {"x": json.loads("[" * 900 + "]" * 900)}}
    frame = payload(child.encode(deep))
    body = frame[TAG_BYTES:].replace(b"[" * 900, b"[" * 100_000).replace(b"]" * 900, b"]" * 100_000)
    tag = hmac.digest(KEY, TO_HOST + body, "sha256")
    with pytest.raises(ProtocolError) as info:
        host.decode(tag + body)
    assert info.value.reason == "oversized"
    assert "64-level limit" in info.value.message
    assert host.received == 0  # nothing was consumed


def test_the_depth_limit_boundary_and_the_sending_side() -> None:
    child, host = pair()

    def nest(levels: int) -> object:
        value: object = 0
        for _ in range(levels):
            value = [value]
        return value

    # the message itself is one level, "arguments" another
    ok = host.decode(payload(child.encode({"type": "call", "arguments": {"x": nest(62)}})))
    assert _depth(ok) == 64
    with pytest.raises(ProtocolError) as info:
        child.encode({"type": "call", "arguments": {"x": nest(63)}})
    assert info.value.reason == "oversized"  # the runner turns this into invalid_arguments
    assert child.sent == 1  # the refused message used no sequence number


def test_handshake_frames_are_limited_to_4_kib() -> None:
    """Before the session key, a peer cannot make the host read (or buffer) a big frame."""
    codec = Codec(TO_CHILD, TO_HOST)  # 16 MiB after the handshake
    assert codec.frame_length(HEADER.pack(HANDSHAKE_MAX_FRAME)) == HANDSHAKE_MAX_FRAME
    for size in (HANDSHAKE_MAX_FRAME + 1, 12 * 1024 * 1024):
        with pytest.raises(ProtocolError) as info:
            codec.frame_length(HEADER.pack(size))
        assert info.value.reason == "oversized" and "before the handshake" in info.value.message
    with pytest.raises(ProtocolError):
        codec.decode(bytes(TAG_BYTES) + b'{"type":"hello","x":"' + b"a" * 5000 + b'"}')
    codec.key = KEY
    assert codec.frame_length(HEADER.pack(12 * 1024 * 1024)) == 12 * 1024 * 1024


# -- receiving: the codec buffers, the caller only reads ------------------------------------


def test_frames_arriving_in_any_pieces_come_out_whole_and_in_order() -> None:
    child, host = pair()
    data = b"".join(child.encode({"type": "call", "id": i, "pad": "x" * i * 50}) for i in range(5))
    got = []
    for i in range(len(data)):  # one byte at a time: the worst split there is
        host.receive_data(data[i : i + 1])
        while (message := host.next_message()) is not None:
            got.append(message["id"])
    assert got == [0, 1, 2, 3, 4]
    assert host.next_message() is None and host.missing == HEADER.size


def test_an_oversized_header_is_refused_before_its_payload_arrives() -> None:
    host = Codec(TO_CHILD, TO_HOST)  # before the handshake: 4 KiB at most
    host.receive_data(HEADER.pack(12 * 1024 * 1024))
    with pytest.raises(ProtocolError) as info:
        host.next_message()
    assert info.value.reason == "oversized"


def test_a_key_set_after_a_frame_arrived_applies_to_it() -> None:
    """The handshake sets the key between two frames whose bytes came in one read."""
    child, host = Codec(TO_HOST, TO_CHILD), Codec(TO_CHILD, TO_HOST)
    first = child.encode({"type": "auth"})
    child.key = KEY
    host.receive_data(first + child.encode({"type": "call"}))
    assert host.next_message()["type"] == "auth"
    host.key = KEY
    assert host.next_message()["type"] == "call"  # verified under the key set just now
