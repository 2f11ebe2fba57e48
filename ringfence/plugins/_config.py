"""``$RINGFENCE_HOME/plugins.toml``: which plugins are added, where they are, which are trusted.

::

    [[plugin]]
    name = "guard"
    path = "/home/me/plugins/guard"       # or: package = "ringfence-guard" (an installed one)
    trusted_sha256 = "…"                  # written by `ringfence plugin trust`; absent: untrusted

The file lives beside the user policy, outside every workspace root
(``refuse_home_inside_roots``), so no session's tools can trust a plugin.
Edited in place with ``tomlkit`` (comments and other entries kept byte for
byte as tomlkit keeps them), replaced atomically; a file that does not load
is refused, never repaired. Reading it needs only ``tomllib``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime._errors import InvalidArguments
from ..runtime._files import atomic_write, ringfence_home
from ._manifest import PLUGIN_NAME

__all__ = [
    "PluginEntry",
    "add_entry",
    "load_entries",
    "plugins_path",
    "remove_entry",
    "set_trust",
]

_KEYS = {"name", "path", "package", "trusted_sha256"}
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class PluginEntry:
    """One added plugin: its name, where it is (a folder or a distribution), its pinned digest."""

    name: str
    path: str | None = None
    package: str | None = None
    trusted_sha256: str | None = None
    origin: str = ""  # "file:line", for messages

    @property
    def source(self) -> str:
        return self.path if self.path is not None else f"package {self.package}"


def plugins_path() -> Path:
    """The plugins file: ``$RINGFENCE_HOME/plugins.toml``."""
    return ringfence_home() / "plugins.toml"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError:
        raise InvalidArguments(f"{path}: not UTF-8 text", field="file", file=str(path)) from None
    except OSError as exc:
        raise InvalidArguments(
            f"{path}: cannot be read ({exc.strerror or exc})", field="file", file=str(path)
        ) from None


def parse_entries(text: str, path: Path) -> list[PluginEntry]:
    """The entries of a plugins file's text; InvalidArguments naming file:line: key otherwise."""
    import tomllib  # here: a session with no plugins file parses no TOML

    from ..runtime._tomllines import line_of, load_toml, toml_error_line, toml_key_lines

    try:
        data = load_toml(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = toml_error_line(exc)
        raise _fail(path, line, "toml", message) from None
    lines = toml_key_lines(text)
    for key in data:
        if key != "plugin":
            raise _fail(path, lines.get((key,)), key, "unknown key (plugins are [[plugin]] tables)")
    tables = data.get("plugin", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise _fail(path, lines.get(("plugin",)), "plugin", "plugins are [[plugin]] tables")
    out: list[PluginEntry] = []
    for i, t in enumerate(tables):

        def bad(key: str, message: str, i: int = i) -> InvalidArguments:
            return _fail(path, line_of(lines, ("plugin", i, key)), f"plugin[{i}].{key}", message)

        for key in t:
            if key not in _KEYS:
                raise bad(key, f"unknown key (a plugin has {', '.join(sorted(_KEYS))})")
        name = t.get("name")
        if not isinstance(name, str) or not PLUGIN_NAME.match(name):
            raise bad("name", "must be a plugin name (a-z, 0-9, _ and -, at most 24)")
        if name in (e.name for e in out):
            raise bad("name", f"a second plugin named {name!r}")
        where = [k for k in ("path", "package") if k in t]
        if len(where) != 1 or not isinstance(t[where[0]], str) or not t[where[0]]:
            raise bad("path", "give exactly one of path (a folder) or package (an installed one)")
        digest = t.get("trusted_sha256")
        if digest is not None and (not isinstance(digest, str) or not _SHA256.match(digest)):
            raise bad("trusted_sha256", "must be 64 lower-case hex digits")
        header = lines.get(("plugin", i))
        out.append(
            PluginEntry(
                name,
                t.get("path"),
                t.get("package"),
                digest,
                f"{path}:{header}" if header else str(path),
            )
        )
    return out


def load_entries(path: str | os.PathLike[str] | None = None) -> list[PluginEntry]:
    """Every added plugin (none when the file does not exist)."""
    p = Path(path) if path is not None else plugins_path()
    text = _read(p)
    return parse_entries(text, p) if text else []


def _edit(path: Path, change: Callable[[Any], None]) -> list[PluginEntry]:
    import tomlkit
    from tomlkit.items import AoT

    text = _read(path)
    parse_entries(text, path)  # refuse to edit a file that does not load
    doc = tomlkit.parse(text)
    if "plugin" not in doc:
        if not text.strip():
            doc.add(tomlkit.comment("ringfence plugins: ringfence plugin add|trust|remove"))
        doc.append("plugin", tomlkit.aot())
    elif not isinstance(doc["plugin"], AoT):
        raise InvalidArguments(
            f"{path}: plugins are written inline; only [[plugin]] tables are edited in place",
            field="plugin",
        )
    change(doc["plugin"])
    new = tomlkit.dumps(doc)
    entries = parse_entries(new, path)  # and to write one that would not
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, new.encode("utf-8"))
    return entries


def _index(aot: Any, name: str, path: Path) -> int:
    for i, table in enumerate(aot):
        if table.get("name") == name:
            return i
    raise InvalidArguments(
        f"no plugin named {name!r} in {path} (ringfence plugin list)", field="name", name=name
    )


def add_entry(entry: PluginEntry, path: str | os.PathLike[str] | None = None) -> list[PluginEntry]:
    """Add ``entry`` (untrusted); a plugin of the same name is refused (remove it first)."""
    import tomlkit

    p = Path(path) if path is not None else plugins_path()

    def change(aot: Any) -> None:
        if any(t.get("name") == entry.name for t in aot):
            raise InvalidArguments(
                f"a plugin named {entry.name!r} is added already (ringfence plugin remove "
                f"{entry.name}, then add it again)",
                field="name",
            )
        table = tomlkit.table()
        table["name"] = entry.name
        if entry.path is not None:
            table["path"] = entry.path
        else:
            table["package"] = entry.package
        aot.append(table)

    return _edit(p, change)


def set_trust(
    name: str, sha256: str | None, path: str | os.PathLike[str] | None = None
) -> list[PluginEntry]:
    """Pin ``sha256`` as the plugin's trusted digest (None: withdraw the trust)."""
    p = Path(path) if path is not None else plugins_path()

    def change(aot: Any) -> None:
        table = aot[_index(aot, name, p)]
        if sha256 is None:
            table.pop("trusted_sha256", None)
        else:
            table["trusted_sha256"] = sha256

    return _edit(p, change)


def remove_entry(name: str, path: str | os.PathLike[str] | None = None) -> list[PluginEntry]:
    """Remove the plugin ``name`` (and with it its trust)."""
    p = Path(path) if path is not None else plugins_path()

    def change(aot: Any) -> None:
        del aot[_index(aot, name, p)]

    return _edit(p, change)


def _fail(path: Path, line: int | None, key: str, message: str) -> InvalidArguments:
    where = f"{path}:{line}" if line else str(path)
    return InvalidArguments(f"{where}: {key}: {message}", field=key, file=str(path), line=line)
