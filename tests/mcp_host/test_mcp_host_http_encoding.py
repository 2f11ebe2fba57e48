"""A remote server's compressed answer is bounded by what it decodes to, not by its bytes.

``max_message_bytes`` bounded a Streamable HTTP body as it came off the wire, and httpx
(which asks for ``gzip, deflate`` by default) decoded it afterwards, unbounded, for the SDK
to read whole: a server answering ``tools/list`` with 200 KB of gzip had 200 MB parsed under
a 1 MiB cap (1.1 GB resident for ``mcp inspect``), and 32 MiB of gzip decodes to ~32 GB.
Now ringfence asks for ``identity`` and decodes what a server compresses anyway itself, a
step at a time, refusing the reply once the decoded bytes pass the cap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from mcp_host_helpers import manifest, stdlib_peers

from ringfence.mcp_host import connect_servers


@pytest.fixture
async def gzip_server(state: Path) -> AsyncIterator[Callable[[int], object]]:
    async with stdlib_peers("gzip_http.py", state) as start:
        yield start


def _block(url: str) -> str:
    return (
        f'[[server]]\nname = "gz"\ntransport = "http"\nurl = "{url}"\nmax_message_bytes = 1048576\n'
    )


async def test_a_gzip_bomb_is_refused_at_the_decoded_cap(
    make_kernel, gzip_server, state: Path
) -> None:
    url = await gzip_server(64 * 1024 * 1024)  # ~64 KB on the wire, 64 MiB decoded
    async with make_kernel() as kernel, connect_servers(kernel, manifest(_block(url))) as cs:
        assert not any(s.name.startswith("mcp.gz.") for s in kernel.tools())
        failure = cs.failures["gz"]
    assert failure.field == "max_message_bytes", failure
    assert "larger than max_message_bytes (1048576 bytes)" in failure.message
    # Every request asked for the body as it is.
    assert set((state / "encodings").read_text().split()) == {"identity"}


async def test_a_small_gzipped_reply_is_decoded(make_kernel, gzip_server) -> None:
    url = await gzip_server(1000)
    async with make_kernel() as kernel, connect_servers(kernel, manifest(_block(url))) as cs:
        assert not cs.failures, {k: v.message for k, v in cs.failures.items()}
        (spec,) = [s for s in kernel.tools() if s.name.startswith("mcp.gz.")]
        assert "a" * 100 in spec.description
