"""The stdio wire's fast path: no thread hop per message on a pipe, and never a blocked trio thread.

Real pipes and files; a spy around ``trio.to_thread.run_sync`` counts the hops
(it still runs the real worker).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from ringfence.serve._stdio import LineReader, WireWriter


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


async def test_lines_from_a_pipe_without_a_hop(pipe: tuple[int, int], hops: list[str]) -> None:
    r, w = pipe
    reader = LineReader(r)
    os.write(w, b'{"a": 1}\n{"b":')
    assert await reader.__anext__() == '{"a": 1}\n'
    os.write(w, b' "\xc3\xa9"}\n\xff tail')
    assert await reader.__anext__() == '{"b": "é"}\n'
    os.close(w)
    assert await reader.__anext__() == "\ufffd tail"  # the last line, undecodable byte replaced
    with pytest.raises(StopAsyncIteration):
        await reader.__anext__()
    assert hops == []


async def test_a_waiting_read_is_cancelled_at_once(pipe: tuple[int, int], hops: list[str]) -> None:
    r, _w = pipe
    reader = LineReader(r)
    with trio.move_on_after(0.05) as scope:
        await reader.__anext__()
    assert scope.cancelled_caught
    assert hops == []  # nothing left blocked in a thread


async def test_small_messages_go_out_without_a_hop(pipe: tuple[int, int], hops: list[str]) -> None:
    r, w = pipe
    writer = WireWriter(w)
    await writer.write('{"id": 1}\n')
    await writer.flush()
    assert os.read(r, 100) == b'{"id": 1}\n'
    big = "x" * (select.PIPE_BUF * 4) + "\n"
    async with trio.open_nursery() as nursery:
        got = bytearray()

        async def drain() -> None:
            while len(got) < len(big):
                await trio.lowlevel.wait_readable(r)
                got.extend(os.read(r, 65536))

        nursery.start_soon(drain)
        await writer.write(big)
        await writer.flush()
    assert got == big.encode()
    assert hops == ["_write_all"]  # only the large message hopped


async def test_a_full_pipe_never_blocks_the_trio_thread(
    pipe: tuple[int, int], hops: list[str]
) -> None:
    r, w = pipe
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    filled = 0
    try:
        while True:
            filled += os.write(w, b"f" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(w, fcntl.F_SETFL, flags)  # blocking again, as the wire is
    writer = WireWriter(w)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.005)

    got = bytearray()

    async def drain_later() -> None:
        await trio.sleep(0.1)  # the flush waits this long for room, in its worker
        while not got.endswith(b'{"id": 2}\n'):
            await trio.lowlevel.wait_readable(r)
            got.extend(os.read(r, 65536))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        nursery.start_soon(drain_later)
        await writer.write('{"id": 2}\n')
        with trio.fail_after(10):
            await writer.flush()
        assert ticks >= 5  # the loop ran while the write waited
        nursery.cancel_scope.cancel()
    assert len(got) == filled + len('{"id": 2}\n')
    assert hops == ["_write_all"]


async def test_a_regular_file_is_still_served(tmp_path: Path, hops: list[str]) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"one\ntwo\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = LineReader(fd)  # epoll cannot wait on a file: a thread per read
        assert [line async for line in reader] == ["one\n", "two\n"]
    finally:
        os.close(fd)
    out = os.open(tmp_path / "out.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
    writer = WireWriter(out)
    await writer.write("three\n")
    await writer.flush()
    writer.close()
    assert (tmp_path / "out.jsonl").read_text() == "three\n"
    assert hops == ["_read_chunk", "_read_chunk", "_write_all"]  # both lines, then the end
