"""Change sets: what a call did to the workspace (the model and a path's current image).

A :class:`ChangeSet` lists, per path below a root, the before-image (or its
absence) and the after-image (or a deletion). An :class:`Image` is a file, a
symlink or a directory with its permission bits and, for files and links, the
sha256 of its content (a link's content is its target); the bytes live in a
content-addressed blob store (:mod:`._store`). A directory rename is
its file-level changes: every entry deleted under the old name and created
under the new one. Changes are applied in order and undone in reverse order,
so a set creates a directory before its files and deletes it after them.

The guarded writer that merges a change set is :mod:`._merge`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import orjson

from .._names import escape_name, unescape_path

if TYPE_CHECKING:
    from ..git._snapshot import DirState

__all__ = [
    "KINDS",
    "Blobs",
    "Change",
    "ChangeSet",
    "Image",
    "UpperSource",
    "UpperTree",
    "file_identity",
    "image_and_identity",
    "image_at",
    "read_at_most",
    "same_state",
]

# The kinds a change set may describe. Only the first three can be merged; the others
# exist so that an overlay's upper directory can be described faithfully and refused.
KINDS = ("file", "symlink", "dir", "fifo", "device", "socket")
# Fields of the named tuples, for loops that run in C: Change.path, .before, .after; Image.digest.
_PATH_OF, _BEFORE_OF, _AFTER_OF, _DIGEST_OF = (itemgetter(i) for i in (1, 2, 3, 2))
_SMALL = 1 << 20  # before-images up to this size are read whole, larger ones streamed


class Image(NamedTuple):
    """One state of one path: its kind, permission bits and (file, symlink) content digest.

    A named tuple, not a frozen dataclass, like :class:`Change`: a 10,000-file
    command makes one of each per file, at half a dataclass's cost. Compare
    images with images only (a tuple of the same fields would be equal).
    """

    kind: str
    mode: int
    digest: str | None = None
    size: int = 0

    def to_json(self) -> list[Any]:
        """``[kind, mode, digest, size]``: a manifest holds one per image (10,000 for a big
        command), so positions, not keys (half the bytes and the encoding time)."""
        return list(self)

    @classmethod
    def from_json(cls, value: list[Any] | dict[str, Any]) -> Image:
        if isinstance(value, dict):  # manifests of earlier versions were keyed
            return cls(value["kind"], int(value["mode"]), value.get("digest"), int(value["size"]))
        kind, mode, digest, size = value
        return cls(kind, int(mode), digest, int(size))


class Change(NamedTuple):
    """``path`` (below root ``root``, ``/``-separated) went from ``before`` to ``after``.

    ``None`` is absence: ``before=None`` creates, ``after=None`` deletes. (A
    named tuple: see :class:`Image`.)
    """

    root: int
    path: str
    before: Image | None
    after: Image | None

    def inverse(self) -> Change:
        return Change(self.root, self.path, self.after, self.before)

    def to_json(self) -> list[Any]:
        """``[root, path, before, after]`` (escaped path; images as :meth:`Image.to_json`)."""
        root, path, before, after = self
        # list(image) is Image.to_json, without a call per image.
        return [root, escape_name(path), before and list(before), after and list(after)]

    @classmethod
    def from_json(cls, value: list[Any] | dict[str, Any]) -> Change:
        if isinstance(value, dict):  # the keyed form of earlier manifests
            root, path, before, after = (value["root"], value["path"], value.get("before"),
                                         value.get("after"))  # fmt: skip
        else:
            root, path, before, after = value
        return cls(
            int(root),
            unescape_path(path),
            Image.from_json(before) if before else None,
            Image.from_json(after) if after else None,
        )


@dataclass(frozen=True)
class ChangeSet:
    """One call's changes, in the order they were (or are to be) applied.

    ``staged``: made by a dry run and not applied (``plan apply`` merges it
    through the ``apply_changes`` tool); ``undo --last`` passes over it.
    """

    id: str
    created: float
    tool: str
    changes: tuple[Change, ...]
    call_id: str | None = None
    undoes: str | None = None  # set on the change set an undo made
    staged: bool = False

    def inverse_changes(self) -> tuple[Change, ...]:
        """The changes that take every path back to its before-image, in undo order."""
        return tuple(c.inverse() for c in reversed(self.changes))

    def to_json(self) -> dict[str, Any]:
        return {**self._head(), "changes": self._changes_json()}

    def encode(self) -> bytes:
        """:meth:`to_json` encoded (a manifest's bytes). A set whose paths need no escaping
        goes to orjson as its named tuples (``default=tuple``: the same arrays, without
        building 10,000 lists first)."""
        changes = self.changes
        paths = "".join(map(_PATH_OF, changes))
        if "\\" in paths or not paths.isascii():  # some name needs escaping
            return orjson.dumps(self.to_json())
        return orjson.dumps({**self._head(), "changes": changes}, default=tuple)

    def _head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created": self.created,
            "tool": self.tool,
            "call_id": self.call_id,
            "undoes": self.undoes,
            **({"staged": True} if self.staged else {}),
        }

    def digests(self) -> frozenset[str]:
        """Every blob the set names (its images' digests)."""
        changes = self.changes  # C-level loops over the named tuples
        images = [*filter(None, map(_BEFORE_OF, changes)), *filter(None, map(_AFTER_OF, changes))]
        return frozenset(filter(None, map(_DIGEST_OF, images)))

    def _changes_json(self) -> list[list[Any]]:
        """Every :meth:`Change.to_json`, built inline: a big command's set has 10,000."""
        changes = self.changes
        paths = "".join(map(_PATH_OF, changes))
        if "\\" in paths or not paths.isascii():  # some name needs escaping
            return [c.to_json() for c in changes]
        return [
            [root, path, before and list(before), after and list(after)]
            for root, path, before, after in changes
        ]

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ChangeSet:
        return cls(
            id=value["id"],
            created=float(value["created"]),
            tool=value["tool"],
            changes=tuple(Change.from_json(c) for c in value["changes"]),
            call_id=value.get("call_id"),
            undoes=value.get("undoes"),
            staged=bool(value.get("staged", False)),
        )


class UpperSource(NamedTuple):
    """An overlay upper directory's file that holds a change's after-image (see ``changes._upper``).

    ``path`` below the upper directory; the merge may rename that file into
    the workspace instead of writing a copy, but only while it is still the
    inode read (``ino``, ``size``, ``mtime_ns``) and has one name. (A named
    tuple, not a frozen dataclass: one is made per file read, 10,000 for a
    big command, at half the cost.)
    """

    path: str
    ino: int
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class UpperTree:
    """A new directory of an overlay upper directory that a merge may rename whole.

    ``path`` below the upper directory, inode ``ino``. The read found it fit
    to move as it is: it had no lower directory, and every entry below it is
    a file with one name, a link or a directory, without extended
    attributes, owned by ``owner`` (uid, gid), none of its directories a git
    directory. ``changes``: how many changes the read made below it (a merge
    renames it only when it accepts exactly those); ``longest``: the bytes
    of its longest path below the root. ``scan``: the directory as a scan of
    the workspace records it (:class:`~..git._snapshot.DirState`), handed to
    the scan once it was moved inside a moved tree (see ``merge_changes``).
    """

    path: str
    ino: int
    owner: tuple[int, int]
    changes: int
    longest: int
    scan: DirState | None = None


class Blobs(Protocol):
    """Where the bytes of images live (the checkpoint store)."""

    def get(self, digest: str) -> bytes: ...

    def put(self, data: bytes) -> str: ...

    def put_fd(self, fd: int) -> tuple[str, int]: ...


def read_at_most(fd: int, size: int, limit: int) -> bytes | None:
    """All of the open file ``fd`` from its offset, or None once it holds more than ``limit``.

    ``size`` is what stat said: the buffer is that big (plus one byte to see
    the end), not ``limit``; a 1 MiB buffer per small file cost an mmap and
    munmap each, a fifth of a 10,000-file capture.
    """
    if size > limit:
        return None
    data = os.read(fd, size + 1)
    if len(data) <= size:
        return data  # a regular file's read is short only at its end: no second read
    while len(data) <= limit and (more := os.read(fd, max(size, 1 << 16))):
        data += more  # grew since its stat
    return data if len(data) <= limit else None


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What changes whenever a file does: device, inode, size, mtime and ctime.

    A write, truncate, chmod, chown or rename moves ctime, which no
    unprivileged program can set back; a file whose identity is the same
    as when it was hashed still has that content. With coarse timestamps
    only a same-size change within the clock tick of the stat could slip
    by (since Linux 6.13 ext4, xfs, btrfs and tmpfs give a file that was
    just stat-ed a fine-grained time on its next change).
    """
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def image_at(dir_fd: int, name: str, blobs: Blobs | None) -> Image | None:
    """The current image of ``name`` in ``dir_fd`` (None if absent); content stored in ``blobs``.

    With ``blobs=None`` the digest is computed but nothing is stored.
    """
    return _image_at(dir_fd, name, blobs, identify=False)[0]


def image_and_identity(
    dir_fd: int, name: str, blobs: Blobs | None
) -> tuple[Image | None, tuple[int, ...] | None]:
    """:func:`image_at`, and for a regular file that did not change while it was read its
    :func:`file_identity` (else None): while a later stat finds that identity, the
    image still holds and need not be read again."""
    return _image_at(dir_fd, name, blobs, identify=True)


def _image_at(
    dir_fd: int, name: str, blobs: Blobs | None, *, identify: bool
) -> tuple[Image | None, tuple[int, ...] | None]:
    """Both of the above; the fstat that proves a file stable only when ``identify``."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return Image("dir", mode), None
    if stat.S_ISLNK(st.st_mode):
        data = os.fsencode(os.readlink(name, dir_fd=dir_fd))
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            small = read_at_most(fd, st.st_size, _SMALL)
            if small is not None:
                size = len(small)
                # put() skips a blob it already has
                digest = (
                    blobs.put(small) if blobs is not None else hashlib.sha256(small).hexdigest()
                )
            elif blobs is not None:
                os.lseek(fd, 0, os.SEEK_SET)
                # Streamed: a large image is copied into the store, never held in memory.
                digest, size = blobs.put_fd(fd)
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                h, size = hashlib.sha256(), 0
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
                    size += len(chunk)
                digest = h.hexdigest()
            identity = file_identity(st) if identify else None
            if identify and file_identity(os.fstat(fd)) != identity:
                identity = None  # another file now, or changed while it was read
        finally:
            os.close(fd)
        return Image("file", mode, digest, size), identity
    else:
        kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "socket"
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            kind = "device"
        return Image(kind, mode), None
    digest = blobs.put(data) if blobs is not None else hashlib.sha256(data).hexdigest()
    return Image("symlink", mode, digest, len(data)), None


def same_state(current: Image | None, wanted: Image | None) -> bool:
    """Does the path's current image match ``wanted``? Kind and content; modes are not compared."""
    if current is None or wanted is None:
        return current is wanted
    if current.kind != wanted.kind:
        return False
    if current.kind == "dir":
        return True  # a directory's content is its entries, each a change of its own
    return current.digest == wanted.digest
