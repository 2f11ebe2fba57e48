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
from ringfence.runtime import Posture

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


async def test_a_prompt_of_many_one_block_messages_costs_a_bounded_result_and_spool(
    make_kernel, state: Path, tmp_path: Path
) -> None:
    """A prompt's blocks come one per message, and each message was rendered as a result of
    its own: its own 64 attachments, its own cap, its own frame. So 5,000 messages of one
    four-byte image each were 5,000 spool files and a result far past ``max_output_bytes``,
    and 5,000 two-character texts 5,000 frames (~1 MB). Now the prompt's messages share one
    result's bounds: 64 attachments in all, the rest counted, the text capped once."""
    m = manifest(py_server("many", "many_blocks.py", state=state, reads=("*",)))
    async with make_kernel(posture=Posture.ALLOW_ALL) as kernel, connect_servers(kernel, m):
        images = await kernel.invoke(
            "mcp.many.__get_prompt", {"name": "images", "arguments": {"count": str(SENT)}}
        )
        texts = await kernel.invoke(
            "mcp.many.__get_prompt", {"name": "texts", "arguments": {"count": str(SENT)}}
        )
    assert images.error is None and texts.error is None, (images.error, texts.error)
    spool = tmp_path / "spool" / "attachments"
    spooled = list(spool.iterdir()) if spool.exists() else []
    assert len(spooled) <= 64, len(spooled)
    assert len(json.dumps(images.value)) < 2 * MAX_OUTPUT, len(json.dumps(images.value))
    assert len(json.dumps(texts.value)) < 2 * MAX_OUTPUT, len(json.dumps(texts.value))
    # What the model reads still holds the first messages, their role and the count omitted.
    first = texts.value["messages"][0]
    assert "t0" in first["text"] and first["role"] == "user"
    assert len(texts.value["messages"]) + texts.value["messages_omitted"] == SENT
    kept = [a for m in images.value["messages"] for a in m.get("attachments", [])]
    assert 0 < len(kept) <= 64
    omitted = sum(m.get("attachments_omitted", 0) for m in images.value["messages"])
    assert len(kept) + omitted + images.value.get("messages_omitted", 0) == SENT


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


async def test_a_trusted_servers_fat_links_and_blob_uris_cost_a_bounded_result(
    make_kernel, state: Path
) -> None:
    """A trusted server's links sit beside its capped text, and only their number was bounded:
    100 links of four 50,000-character texts each made a 20 MB result, and 64 embedded blobs
    with 100,000-character URIs a 4.2 MB one (``max_output_bytes`` 64 KiB). Now a link's texts
    are cut, the links together fit ``max_output_bytes``, and a URI past 4,096 characters is
    not kept (counted, or said in ``uri_omitted``)."""
    extra = 'trust = "trusted"\n'
    m = manifest(py_server("many", "many_blocks.py", state=state, extra=extra, reads=("*",)))
    async with make_kernel() as kernel, connect_servers(kernel, m):
        huge = await kernel.invoke("mcp.many.fat_links", {"count": 100, "size": 50_000})
        fat = await kernel.invoke("mcp.many.fat_links", {"count": 200, "size": 3_000})
        blobs = await kernel.invoke("mcp.many.fat_blob_uris", {"count": 64, "size": 100_000})
    assert huge.error is None and fat.error is None and blobs.error is None
    assert len(json.dumps(huge.value)) < 2 * MAX_OUTPUT
    assert "links" not in huge.value and huge.value["links_omitted"] == 100  # URIs too long
    assert len(json.dumps(fat.value)) < 2 * MAX_OUTPUT
    kept = fat.value["links"]
    assert 0 < len(kept) < 200 and len(kept) + fat.value["links_omitted"] == 200
    first = kept[0]  # whole URI, texts cut
    assert first["uri"] == "file:///r/0/" + "u" * 3_000
    assert len(first["description"]) == 1024 and first["description"].endswith("…")
    assert len(json.dumps(blobs.value)) < 2 * MAX_OUTPUT
    assert len(blobs.value["attachments"]) == 64
    assert all("uri" not in a and "uri_omitted" in a for a in blobs.value["attachments"])
