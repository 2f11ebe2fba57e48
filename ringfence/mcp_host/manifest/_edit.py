"""Editing ``mcp.toml`` in place: :func:`save_server`, :func:`remove_server`, :func:`render_server`.

Contract:

- An edit touches one ``[[server]]`` block and nothing else: every other byte
  of the file (other servers, comments, blank lines, key order, quoting) is
  kept as it was.
- A file that does not load is refused (never "repaired"); so is a result
  that would not load. Either way the file is unchanged.
- The file is replaced atomically (temp file, fsync, rename; mode ``0600``).

How: ``tomlkit`` parses the file and renders each ``[[server]]`` table back to
exactly its own text, so the blocks' spans come from a real TOML parser (a
multi-line string holding ``[[server]]`` is a string, not a table). The new
block is written by ``tomlkit`` too, which escapes what TOML requires (e.g.
``\\x7f``). Comments and blank lines at the end of a block lead into the next
one and stay when the block is removed or replaced.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import tomlkit
from tomlkit.items import AoT, Comment, Table, Whitespace

from ...runtime._errors import InvalidArguments
from ...runtime._files import atomic_write
from ._config import Manifest, ServerConfig, manifest_bytes, manifest_path
from ._model import parse_manifest, server_table

__all__ = ["remove_server", "render_server", "save_server"]


def render_server(config: ServerConfig) -> str:
    """One ``[[server]]`` block: name, transport and the ceiling always; other keys when not default."""
    return tomlkit.dumps({"server": [server_table(config)]})


def _tail(table: Table) -> int:
    """How many characters of comments and blank lines end ``table``'s text (they lead on)."""
    size = 0
    container = table.value
    while True:
        body = container.body
        n = len(body)
        while n and body[n - 1][0] is None and isinstance(body[n - 1][1], Comment | Whitespace):
            size += len(body[n - 1][1].as_string())
            n -= 1
        if n == len(body) and body and isinstance(body[-1][1], Table):
            container = body[-1][1].value  # the last sub-table ([server.env]) ends the block
            continue
        return size


def _alone(table: Table) -> str:
    """``table`` as the text of a ``[[server]]`` table, as its document renders it."""
    doc = tomlkit.document()
    doc.append("server", AoT([table]))
    return doc.as_string()


def _spans(text: str, path: Path) -> list[tuple[int, int, int]]:
    """(start, end, tail) offsets of each ``[[server]]`` block in ``text``."""
    doc = tomlkit.parse(text)
    if "server" not in doc:
        return []
    aot = doc["server"]
    if not isinstance(aot, AoT):
        raise InvalidArguments(
            f"{path}: servers are written as an inline array; only [[server]] tables are "
            "edited in place (rewrite them as [[server]] tables)",
            field="server",
            file=str(path),
        )
    # Each table rendered alone (in a document of its own: tomlkit's public rendering, on a
    # second parse, since moving a table there changes it) is exactly its text; together
    # they end the file.
    blocks = [_alone(t) for t in tomlkit.parse(text)["server"].body]
    start = len(text) - sum(map(len, blocks))
    if start < 0 or text[start:] != "".join(blocks):
        raise InvalidArguments(
            f"{path}: the [[server]] tables cannot be located for an in-place edit "
            "(is something written after them?)",
            field="server",
            file=str(path),
        )
    out = []
    for table, block in zip(aot.body, blocks, strict=True):
        out.append((start, start + len(block), _tail(table)))
        start += len(block)
    return out


def _edit(
    path: Path, edit: Callable[[str, Manifest], str], secret_names: Sequence[str] = ()
) -> Manifest:
    raw = manifest_bytes(path)  # one read: regular files only, bounded
    try:
        text = "" if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArguments(f"{path}: not UTF-8 text", field="toml", file=str(path)) from None
    current = parse_manifest(
        text, str(path), secret_names=secret_names
    )  # refuse to edit a file that does not load
    new_text = edit(text, current)
    result = parse_manifest(
        new_text, str(path), secret_names=secret_names
    )  # and to write one that would not
    atomic_write(path, new_text.encode("utf-8"))
    return result


def save_server(
    config: ServerConfig,
    path: str | os.PathLike[str] | None = None,
    *,
    secret_names: Sequence[str] = (),
) -> Manifest:
    """Add ``config`` to the manifest, replacing a server of the same name in place."""
    p = Path(path) if path is not None else manifest_path()
    block = render_server(config)

    def edit(text: str, current: Manifest) -> str:
        names = [s.name for s in current.servers]
        if config.name in names:
            start, end, tail = _spans(text, p)[names.index(config.name)]
            return text[:start] + block + text[end - tail :]
        if text and not text.endswith("\n"):
            text += "\n"
        return text + ("\n" if text.strip() else "") + block

    return _edit(p, edit, secret_names)


def remove_server(
    name: str, path: str | os.PathLike[str] | None = None, *, secret_names: Sequence[str] = ()
) -> Manifest:
    """Remove the server ``name``; InvalidArguments naming it if it is not there."""
    p = Path(path) if path is not None else manifest_path()

    def edit(text: str, current: Manifest) -> str:
        names = [s.name for s in current.servers]
        if name not in names:
            raise InvalidArguments(f"no MCP server named {name!r} in {p}", field="name")
        start, end, tail = _spans(text, p)[names.index(name)]
        rest = text[end - tail :]
        if not text[:start].strip():
            rest = rest.lstrip("\n")  # no blank lines left at the top of the file
        return text[:start] + rest

    return _edit(p, edit, secret_names)
