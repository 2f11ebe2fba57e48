"""A plugin's bundle: every file of its folder read once, its digest, and a copy of exactly that.

Trust pins :attr:`Bundle.sha256`; a session runs what it copied from the
very bytes it hashed (:meth:`Bundle.write`), never the folder itself, so a
change made to the folder after the digest was taken (by an editor, by a
session's own tools when the folder lies in a workspace) cannot reach what
runs: it makes the next read's digest differ, and the plugin untrusted.

What the digest covers: every regular file's path, content and whether it
is executable, every directory, every symbolic link's path and target.
What is left out (and not copied either, so it cannot matter): ``.git``
directories and Python's ``__pycache__``. Refused (``invalid_arguments``,
naming the path): a link whose target leaves the bundle, a FIFO, socket or
device, more than :data:`MAX_FILES` entries, :data:`MAX_BYTES` bytes or
:data:`MAX_DEPTH` levels.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from ..runtime._canonical import canonical_json
from ..runtime._errors import InvalidArguments
from ..runtime._files import read_all

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_FILES", "Bundle", "read_bundle", "resolve_inside"]

MAX_FILES = 10_000
MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 32
_LEFT_OUT = frozenset({".git", "__pycache__"})


@dataclass(frozen=True)
class Entry:
    """One entry below the bundle: a file (its bytes, executable or not), a directory or a link."""

    kind: str  # "file", "dir", "link"
    data: bytes = b""
    executable: bool = False
    target: str = ""


@dataclass(frozen=True)
class Bundle:
    """A plugin folder as read: where it was, every entry by its relative path, the digest."""

    root: Path
    entries: Mapping[str, Entry] = field(repr=False)
    sha256: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))

    def text(self, name: str) -> str:
        """The file ``name`` (relative) as UTF-8 text; InvalidArguments naming it otherwise."""
        entry = self.entries.get(name)
        where = self.root / name
        if entry is None or entry.kind != "file":
            raise InvalidArguments(f"{where}: no such file in the plugin", field=name)
        try:
            return entry.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArguments(f"{where}: not UTF-8 ({exc.reason})", field=name) from None

    def below(self, directory: str) -> dict[str, Entry]:
        """The entries below ``directory`` (relative), by their path relative to it."""
        prefix = directory.rstrip("/") + "/"
        return {k[len(prefix) :]: e for k, e in self.entries.items() if k.startswith(prefix)}

    def write(self, destination: Path) -> None:
        """Write exactly the entries read into ``destination`` (made; must not exist).

        Files are read-only (``0o555`` if executable, else ``0o444``), directories ``0o755``.
        """
        destination.mkdir(mode=0o700, parents=False)
        for name in sorted(self.entries):  # a directory's entry comes before its children
            entry = self.entries[name]
            path = destination / name
            if entry.kind == "dir":
                path.mkdir(mode=0o755)
            elif entry.kind == "link":
                os.symlink(entry.target, path)
            else:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    view = memoryview(entry.data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchmod(fd, 0o555 if entry.executable else 0o444)
                finally:
                    os.close(fd)
        os.chmod(destination, 0o755)


def _digest(entries: Mapping[str, Entry]) -> str:
    listing = []
    for name in sorted(entries):
        e = entries[name]
        if e.kind == "file":
            listing.append([name, "file", e.executable, hashlib.sha256(e.data).hexdigest()])
        elif e.kind == "link":
            listing.append([name, "link", e.target])
        else:
            listing.append([name, "dir"])
    return hashlib.sha256(
        canonical_json({"ringfence-plugin-bundle": 1, "entries": listing})
    ).hexdigest()


def read_bundle(root: str | os.PathLike[str]) -> Bundle:
    """Read the folder ``root`` whole (links are never followed) and take its digest.

    Raises InvalidArguments naming the folder or the entry: missing, not a
    directory, a link leaving it, a special file, over a limit.
    """
    where = Path(os.path.realpath(root))
    if not _is_utf8(str(where)):  # plugins.toml records the folder as text
        raise InvalidArguments(
            f"{where}: a plugin folder's path must be UTF-8 text (plugins.toml records it)",
            field="path",
        )
    if not where.is_dir():
        raise InvalidArguments(f"{root}: not a plugin folder (no such directory)", field="path")
    entries: dict[str, Entry] = {}
    total = 0

    def refuse(name: str, why: str) -> InvalidArguments:
        return InvalidArguments(f"{where / name}: {why}", field="path", path=str(where / name))

    def walk(fd: int, prefix: str, depth: int) -> None:
        nonlocal total
        if depth > MAX_DEPTH:
            raise refuse(prefix, f"nested more than {MAX_DEPTH} levels deep")
        for name in sorted(os.listdir(fd)):
            if name in _LEFT_OUT:
                continue
            rel = f"{prefix}{name}"
            if not _is_utf8(name):  # the digest is of UTF-8 names: one that is not failed it
                raise refuse(rel, "a name that is not UTF-8 (a plugin's names are text)")
            if len(entries) >= MAX_FILES:
                raise refuse(rel, f"the plugin has more than {MAX_FILES} entries")
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=fd)
                if not _is_utf8(target):
                    raise refuse(rel, "a link whose target is not UTF-8")
                if posixpath.isabs(target):
                    raise refuse(rel, f"a link to {target!r}, outside the plugin")
                entries[rel] = Entry("link", target=target)
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = Entry("dir")
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                try:
                    walk(sub, rel + "/", depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > MAX_BYTES:
                    raise refuse(rel, f"the plugin holds more than {MAX_BYTES} bytes")
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                try:
                    data = read_all(ffd, MAX_BYTES - total + st.st_size + 1)
                finally:
                    os.close(ffd)
                if len(data) != st.st_size:
                    total += len(data) - st.st_size
                    if total > MAX_BYTES:
                        raise refuse(rel, f"the plugin holds more than {MAX_BYTES} bytes")
                entries[rel] = Entry("file", data, bool(st.st_mode & 0o111))
            else:
                raise refuse(rel, "not a file, directory or link (a plugin holds no special files)")

    try:
        top = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise InvalidArguments(
            f"{root}: cannot be read ({exc.strerror or exc})", field="path"
        ) from None
    try:
        walk(top, "", 0)
    except OSError as exc:
        raise InvalidArguments(
            f"{where}: cannot be read whole ({exc.strerror or exc}: {exc.filename or ''})",
            field="path",
        ) from None
    finally:
        os.close(top)
    for name, entry in entries.items():
        if entry.kind == "link" and not _stays_inside(name, entries):
            raise refuse(name, f"a link to {entry.target!r}, which leads outside the plugin")
    return Bundle(where, entries, _digest(entries))


def _is_utf8(name: str) -> bool:
    """Whether a name ``os.listdir`` gave is UTF-8 text (not bytes it carried as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup


def _stays_inside(link: str, entries: Mapping[str, Entry]) -> bool:
    """Whether resolving ``link`` as the kernel would (every link on the way followed, in the
    bundle as read) never leaves the bundle's root. A dangling end is inside."""
    parent = link.rsplit("/", 1)[0] if "/" in link else ""
    target = entries[link].target
    if posixpath.isabs(target):
        return False
    return resolve_inside(f"{parent}/{target}" if parent else target, entries) is not None


def resolve_inside(rel: str, entries: Mapping[str, Entry]) -> str | None:
    """The entry ``rel`` (relative to the bundle's root) names once resolved as the kernel
    resolves it: every link on the way followed where it stands, so ``..`` after a link
    climbs from the link's target, not from the link (``posixpath.normpath`` reads
    ``d/up/../x`` as ``d/x`` even when ``d/up`` leads to the root, which the kernel reads as
    the folder above the root's ``x``). None when the resolution leaves the root, meets an
    absolute link or follows more than 40 links. A name that does not exist resolves to
    itself (the part of it that does not exist is taken as written)."""
    if posixpath.isabs(rel):
        return None
    followed = 0
    stack: list[str] = []
    pending = [p for p in rel.split("/") if p not in ("", ".")]
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not stack:
                return None
            stack.pop()
            continue
        here = "/".join([*stack, part])
        entry = entries.get(here)
        if entry is not None and entry.kind == "link":
            followed += 1
            if followed > _MAX_LINKS or posixpath.isabs(entry.target):
                return None
            pending = [p for p in entry.target.split("/") if p not in ("", ".")] + pending
            continue
        stack.append(part)
    return "/".join(stack)
