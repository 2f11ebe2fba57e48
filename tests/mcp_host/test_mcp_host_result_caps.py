"""Results over the caps by count, not size (real SDK peer ``servers/many_blocks.py``).

A result of 20,000 four-byte images (under 2 MiB on the wire, far under the message limit)
became 20,000 spool files and a 6.3 MB result (a hundred times ``max_output_bytes``), and a
trusted server's 20,000 links a 0.9 MB one. Now a result keeps 64 attachments and 256 links
and counts the rest, which are never decoded or written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import connect_servers

SENT = 5000
MAX_OUTPUT = 64 * 1024  # the manifest's default max_output_bytes


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
async def test_many_tiny_blocks_cost_a_bounded_result_and_spool(
    make_kernel, state: Path, tmp_path: Path, trusted: bool
) -> None:
    extra = 'trust = "trusted"\n' if trusted else ""
    m = manifest(py_server("many", "many_blocks.py", state=state, extra=extra, reads=("*",)))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        images = await kernel.invoke("mcp.many.images", {"count": SENT})
        links = await kernel.invoke("mcp.many.links", {"count": SENT})
    assert images.error is None and links.error is None
    assert len(images.value["attachments"]) == 64
    assert images.value["attachments_omitted"] == SENT - 64
    assert len(json.dumps(images.value)) < MAX_OUTPUT
    spooled = list((tmp_path / "spool" / "attachments").iterdir())
    assert len(spooled) == 64
    assert len(json.dumps(links.value)) < 2 * MAX_OUTPUT
    if trusted:
        assert len(links.value["links"]) == 256 and links.value["links_omitted"] == SENT - 256
    else:
        assert "links" not in links.value and links.value["truncated"] is True  # in the frame


async def test_a_servers_attachments_are_bounded_by_the_sessions_spool_quota(
    make_kernel, state: Path, tmp_path: Path
) -> None:
    """Each result keeps at most 64 attachments of 32 MiB, but calls multiply them (a
    script's ``parallel`` of 10,000): the session's spool quota bounds what they write
    together. Past it an attachment is described (bytes, digest) and not written.

    Until 2026-12-07 only the per-result count bounded them: 2 GiB a call.
    """
    quota = 100  # 25 of the server's four-byte images
    m = manifest(py_server("many", "many_blocks.py", state=state, reads=("*",)))
    async with make_kernel(spool_quota_bytes=quota) as kernel, connect_servers(kernel, m):
        images = await kernel.invoke("mcp.many.images", {"count": 64})
    assert images.error is None, images.error
    kept = [a for a in images.value["attachments"] if "path" in a]
    refused = [a for a in images.value["attachments"] if "path" not in a]
    assert len(kept) == 25 and len(refused) == 39
    assert all("spool quota" in a["error"] and "sha256" in a for a in refused)
    folder = tmp_path / "spool" / "attachments"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= quota
