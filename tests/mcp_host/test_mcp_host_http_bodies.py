"""A remote server's body the SDK reads whole is bounded whatever its content type says.

The bound on a response's body (``max_message_bytes``) passed over every ``text/event-stream``
response, since the SDK reads an event stream event by event, each under its own cap. But
the content type is the server's to choose, and the SDK reads some responses whole with
``aread``: a redirect it drains before following it, a DELETE's answer, the OAuth flow's
metadata, registration and token replies. A server answering ``initialize`` with a
same-origin ``307`` whose 48 MiB body said ``text/event-stream`` had it read whole under a
1 MiB cap (real SDK client; stdlib peer ``servers/redirect_body.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio
from mcp_host_helpers import manifest, stdlib_peers

from ringfence.mcp_host import connect_servers

SIZE = 48 * 1024 * 1024
CAP = 1024 * 1024


@pytest.fixture
async def redirect_server(state: Path) -> AsyncIterator[Callable[[], object]]:
    async with stdlib_peers("redirect_body.py", state) as start:
        yield lambda: start(SIZE)


async def test_a_redirects_event_stream_body_is_read_no_further_than_the_cap(
    make_kernel, redirect_server, state: Path
) -> None:
    url = await redirect_server()
    block = (
        f'[[server]]\nname = "rd"\ntransport = "http"\nurl = "{url}"\n'
        f"max_message_bytes = {CAP}\nconnect_timeout_seconds = 60\n"
    )
    with trio.fail_after(120):
        async with make_kernel() as kernel, connect_servers(kernel, manifest(block)) as cs:
            assert not any(s.name.startswith("mcp.rd.") for s in kernel.tools())
            failure = cs.failures["rd"]
    assert failure.field == "max_message_bytes", failure
    assert f"larger than max_message_bytes ({CAP} bytes)" in failure.message
    # What the client took off the wire: the cap and what the sockets buffer, not 48 MiB.
    sent = int((state / "sent").read_text()) if (state / "sent").exists() else 0
    assert sent < SIZE // 2, (sent, failure.message)
