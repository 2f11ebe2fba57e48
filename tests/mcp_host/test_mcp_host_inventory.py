"""Paginated inventories with limits, and registered names."""

from __future__ import annotations

import random

import pytest
import trio
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import ListLimits, connect_servers
from ringfence.mcp_host._inventory import assign_names, list_paginated
from ringfence.mcp_host.manifest._load import sanitize_part


def test_sanitize_part() -> None:
    assert sanitize_part("Read File!") == "read_file"
    assert sanitize_part("get-tiny-image") == "get_tiny_image"
    assert sanitize_part("__weird__  name__") == "weird_name"
    assert sanitize_part("!!!", "tool") == "tool"
    assert sanitize_part("Ünïcode") == "n_code"


def test_names_are_mcp_server_tool() -> None:
    names = assign_names("files", ["Read File!", "write"])
    assert names == {"Read File!": "mcp.files.read_file", "write": "mcp.files.write"}


def test_collisions_are_resolved_deterministically_and_order_free() -> None:
    remote = ["Read File!", "read_file", "read-file", "other"]
    first = assign_names("s", remote)
    for _ in range(5):
        shuffled = remote[:]
        random.shuffle(shuffled)
        assert assign_names("s", shuffled) == first
    assert first["other"] == "mcp.s.other"
    colliding = [first[n] for n in ("Read File!", "read_file", "read-file")]
    assert len(set(colliding)) == 3
    # No member of the group keeps the bare name, so none can silently inherit it.
    assert "mcp.s.read_file" not in colliding
    assert all(n.startswith("mcp.s.read_file_") for n in colliding)


def test_a_new_look_alike_renames_rather_than_hijacks() -> None:
    before = assign_names("s", ["read_file"])
    after = assign_names("s", ["read_file", "Read File"])
    assert before["read_file"] == "mcp.s.read_file"
    assert "mcp.s.read_file" not in after.values()


def test_long_names_fit_the_limit() -> None:
    names = assign_names("server", ["x" * 300, "y" * 300])
    assert all(len(n) <= 128 for n in names.values())
    assert len(set(names.values())) == 2


async def test_list_paginated_limits() -> None:
    async def endless(cursor: str | None) -> tuple[list[int], str | None]:
        n = int(cursor or 0)
        return [n], str(n + 1)

    listing = await list_paginated("tools", endless, ListLimits(max_pages=7, max_items=100))
    assert (
        listing.items == tuple(range(7))
        and not listing.complete
        and "page limit" in listing.problem
    )

    async def loop(cursor: str | None) -> tuple[list[int], str | None]:
        return [1], "same"

    listing = await list_paginated("tools", loop, ListLimits())
    assert listing.pages == 2 and "cursor loop" in listing.problem

    async def flood(cursor: str | None) -> tuple[list[int], str | None]:
        return list(range(1000)), None

    listing = await list_paginated("tools", flood, ListLimits(max_items=10))
    assert len(listing.items) == 10 and "item limit" in listing.problem


async def test_a_paginating_server_is_listed_whole(make_kernel) -> None:
    extra = 'approved_capabilities = ["tools", "prompts", "resources"]'
    async with (
        make_kernel() as kernel,
        connect_servers(
            kernel, manifest(py_server("pages", "paging.py", "normal", extra=extra))
        ) as cs,
    ):
        c = cs["pages"]
        assert c.listings["tools/list"].pages == 5 and c.listings["tools/list"].complete
        assert len(c.tools) == 23
        assert len(c.prompts) == 7 and c.listings["prompts/list"].pages == 2
        assert len(c.resources) == 12 and c.listings["resources/list"].pages == 3
        names = {t.remote_name: t.name for t in c.tools}
        assert names["tool_07"] == "mcp.pages.tool_07"
        group = {names["Read File!"], names["read_file"], names["read-file"]}
        assert len(group) == 3 and all(n.startswith("mcp.pages.read_file_") for n in group)
        out = await kernel.call(names["Read File!"], {})
        assert "called Read File!" in out["text"]  # the exact remote name is what gets called


@pytest.mark.parametrize(
    ("mode", "problem", "count"),
    [("loop", "cursor loop", 2), ("endless", "page limit", 4), ("flood", "item limit", 50)],
)
async def test_a_malformed_server_cannot_grow_discovery(
    make_kernel, mode: str, problem: str, count: int
) -> None:
    limits = ListLimits(max_pages=4, max_items=50)
    async with make_kernel() as kernel:
        with trio.fail_after(20):
            async with connect_servers(
                kernel, manifest(py_server("bad", "paging.py", mode)), limits=limits
            ) as cs:
                c = cs["bad"]
                listing = c.listings["tools/list"]
                assert not listing.complete and problem in listing.problem
                assert len(c.tools) == count
                assert any(problem in f["message"] for f in c.diagnostics.failures)


@pytest.mark.parametrize(("mode", "count"), [("heavy", 5), ("cursors", 17)])
async def test_a_listing_holds_at_most_its_byte_bound(make_kernel, mode: str, count: int) -> None:
    """Pages under the page and item limits can still be huge: 12 pages each listing one tool
    with a 6 MB description were all held (and 100 with 20 MB ones took ``tools list --mcp``
    to 2.1 GB resident); fresh 2 MB cursors were each kept to detect a loop (100 pages:
    200 MB). A listing now stops once its items (as JSON) and cursors pass ``max_bytes``
    (32 MiB by default): the tools that fit are registered, the listing is incomplete and
    the diagnostics say why; cursors are remembered by digest."""
    async with make_kernel() as kernel:
        with trio.fail_after(120):
            async with connect_servers(kernel, manifest(py_server("big", "paging.py", mode))) as cs:
                c = cs["big"]
                listing = c.listings["tools/list"]
                assert not listing.complete and "size limit" in listing.problem, listing
                assert len(c.tools) == count, [t.name for t in c.tools]
                assert any("size limit" in f["message"] for f in c.diagnostics.failures)
                held = sum(len(t.description) for t in c.tools) + sum(
                    len(i.model_dump_json()) for i in listing.items
                )
                assert held < 2 * ListLimits().max_bytes
