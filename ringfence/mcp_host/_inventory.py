"""Inventories: bounded paginated listing, filtering and registered names.

A malformed or hostile server must not be able to grow discovery without
bound, so every listing stops at the first of: the end of the list, a cursor
seen before (a loop), ``max_pages`` pages, ``max_items`` items, ``max_bytes``
of items and cursors held (each item counted as its JSON), or ``seconds`` since it
began (the server's ``call_timeout_seconds``: a page answered just inside the deadline,
100 times, held a session's start 100 deadlines, 100 minutes by default). Hitting a limit keeps
what was gathered (every item that fit) and records why the listing is
incomplete. Cursors seen are held as digests, not as the server's strings.
Without the byte bound a server whose 100 pages each carried one tool with a
20 MB description was held whole (2.1 GB resident for ``tools list --mcp``).

Registered names are ``mcp.<server>.<tool>``, each part sanitized to
``[a-z0-9_]`` (``"Read File!"`` → ``read_file``). When two remote names
sanitize to the same part, *every* member of that group gets a suffix derived
from a hash of its own remote name after two underscores (``read_file__3f2a9c``), which no
sanitized name holds, so no tool can be listed under another's suffixed name. The result does not
depend on listing order, and a name never silently moves to a different remote
tool: a newly appearing look-alike renames the old tool instead of taking over
its name (and any rule or grant that named it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Generic, TypeVar

import trio

from .manifest._load import sanitize_part

__all__ = [
    "ListLimits",
    "Listing",
    "assign_names",
    "filter_names",
    "list_paginated",
]

T = TypeVar("T")

MAX_NAME = 128  # MCP's and the registry's limit on a tool name


@dataclass(frozen=True)
class ListLimits:
    """Bounds on one listing (tools, prompts, resources or templates)."""

    max_pages: int = 100
    max_items: int = 5000
    # What one listing's items (as JSON) and cursors may hold together: what one message may.
    max_bytes: int = 32 * 1024 * 1024


DEFAULT_LIMITS = ListLimits()


@dataclass(frozen=True)
class Listing(Generic[T]):
    items: tuple[T, ...]
    pages: int
    complete: bool
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": len(self.items),
            "pages": self.pages,
            "complete": self.complete,
            "problem": self.problem,
        }


def item_size(item: object) -> int:
    """What an item holds, counted as its JSON (an SDK model's own serialization)."""
    dump = getattr(item, "model_dump_json", None)
    if callable(dump):
        return len(dump(by_alias=True, exclude_none=True))
    return len(json.dumps(item, default=str))


async def list_paginated(
    kind: str,
    fetch: Callable[[str | None], Awaitable[tuple[Sequence[T], str | None]]],
    limits: ListLimits = DEFAULT_LIMITS,
    size: Callable[[T], int] = item_size,
    seconds: float = math.inf,
) -> Listing[T]:
    """Follow ``next_cursor`` from the first page, within ``limits`` and ``seconds``.

    ``fetch(cursor)`` returns ``(items, next_cursor)``. Errors from ``fetch``
    propagate (the caller translates them). ``size(item)``: what an item counts
    against ``max_bytes``. ``seconds``: how long the whole listing may take; the
    first page is bounded by ``fetch`` itself (its own deadline, an error when it
    passes), every later one by what is left, and the listing stops there keeping
    what it has.
    """
    deadline = trio.current_time() + seconds
    items: list[T] = []
    seen: set[bytes] = set()
    cursor: str | None = None
    pages = 0
    held = 0

    def stopped(why: str) -> Listing[T]:
        return Listing(tuple(items), pages, False, f"{kind}: {why}")

    while True:
        if pages >= limits.max_pages:
            return stopped(f"stopped after {pages} pages (page limit)")
        if pages == 0:
            page, next_cursor = await fetch(cursor)
        else:
            fetched = None
            with trio.move_on_at(deadline):
                fetched = await fetch(cursor)
            if fetched is None:
                return stopped(
                    f"stopped after {pages} pages: the listing took longer than {seconds:g}s "
                    "(time limit, call_timeout_seconds)"
                )
            page, next_cursor = fetched
        pages += 1
        room = limits.max_items - len(items)
        for item in page[:room]:
            held += size(item)
            if held > limits.max_bytes:
                return stopped(f"stopped at {limits.max_bytes:,} bytes of items (size limit)")
            items.append(item)
        if len(page) > room:
            return stopped(f"stopped at {limits.max_items} items (item limit)")
        if not next_cursor:
            return Listing(tuple(items), pages, True)
        held += len(next_cursor)
        if held > limits.max_bytes:
            return stopped(
                f"stopped at {limits.max_bytes:,} bytes of items and cursors (size limit)"
            )
        digest = hashlib.sha256(next_cursor.encode("utf-8", "surrogatepass")).digest()
        if digest in seen:
            return Listing(
                tuple(items),
                pages,
                False,
                f"{kind}: the server repeated a cursor after {pages} pages (cursor loop)",
            )
        seen.add(digest)
        cursor = next_cursor


def filter_names(
    names: Iterable[str], allow: Sequence[str] | None, deny: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Split ``names`` into (kept, dropped) by glob lists. Deny wins; ``allow=()`` keeps nothing."""
    kept: list[str] = []
    dropped: list[str] = []
    for name in names:
        denied = any(fnmatchcase(name, p) for p in deny)
        allowed = allow is None or any(fnmatchcase(name, p) for p in allow)
        (kept if allowed and not denied else dropped).append(name)
    return kept, dropped


def _tails(remote: str) -> Iterator[str]:
    """The suffixes a look-alike may get, in order, never one twice and never ending.

    ``__`` and 6, 8, ... 64 hex digits of its name's SHA-256; then ``__<6 digits>_1``,
    ``_2``, .... Two underscores: no sanitized name holds them (runs of ``_`` are
    collapsed), so no tool the server lists can be named as another's suffix and take that
    name (and the rules naming it) over, nor push the other along: with one underscore, a
    tool listed as ``delete_all_<its 6 digits>`` took the name ``delete_all`` had, and a
    server listing all 30 such names made the search go round for ever (the kernel's loop
    held for good at connect). Each count is new, so the search ends in any case.
    """
    digest = hashlib.sha256(remote.encode("utf-8")).hexdigest()
    for length in range(6, len(digest) + 1, 2):
        yield "__" + digest[:length]
    for n in itertools.count(1):
        yield f"__{digest[:6]}_{n}"


def assign_names(
    server_part: str, remote_names: Iterable[str], reserved: Iterable[str] = ()
) -> dict[str, str]:
    """Map each remote name to its registered name ``mcp.<server_part>.<part>``.

    Deterministic and order-independent; see the module docstring for collisions.
    ``reserved`` parts (``__read_resource``) are never produced for a remote tool.
    """
    prefix = f"mcp.{server_part}."
    room = MAX_NAME - len(prefix)
    unique = sorted(set(remote_names))
    base: dict[str, str] = {}
    for remote in unique:
        part = sanitize_part(remote, "tool")
        base[remote] = part
    groups: dict[str, list[str]] = {}
    for remote, part in base.items():
        groups.setdefault(part, []).append(remote)
    taken = set(reserved)
    out: dict[str, str] = {}
    for part, members in sorted(groups.items()):
        if len(members) == 1 and len(part) <= room and part not in taken:
            out[members[0]] = part
            taken.add(part)
    for part, members in sorted(groups.items()):
        for remote in members:
            if remote in out:
                continue
            # Ends: each tail is new and ``taken`` is finite (at most one try per name taken).
            for tail in _tails(remote):
                candidate = part[: max(0, room - len(tail))] + tail
                if candidate not in taken:
                    break
            out[remote] = candidate
            taken.add(candidate)
    return {remote: prefix + part for remote, part in out.items()}
