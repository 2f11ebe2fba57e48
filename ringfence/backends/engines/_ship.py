"""Shipping a workspace root to a remote engine, and a command's upper directory back.

Host side only (no docker SDK here): :class:`ShippedRoot` remembers what was
shipped of one root (a :class:`Shipped` per path: kind, mode, the stat
signature it was read with, the content's sha256) and :meth:`ShippedRoot.sync`
walks the root again (by descriptor, ``O_NOFOLLOW``: a link is shipped as a
link, never followed) and returns what changed since as a :class:`Sync`: a
tar of the new or changed entries and the paths to delete first. A file whose
stat signature is unchanged is not read again; one whose signature changed
is read and hashed, and shipped only if its content or mode changed.

:func:`rebuild_upper` turns the tar of an overlay upper directory that the
sandbox sent back into the same upper directory on the host, in overlayfs's
encoding (whiteouts as character devices 0:0, opaque directories marked with
``user.overlay.opaque``), so :func:`ringfence.workspace.changes_from_upper`
reads it exactly as it reads a local overlay's. The tar is checked against the
sha256 the sandbox computed before a single entry is written, every member
name is checked (relative, no ``..``), and everything is created by
descriptor below the target directory.

Not shipped: FIFOs, sockets and devices (a sandbox never needs them from the
host), what lies on a kernel-state file system mounted in a root (a chroot's ``proc``,
a bind-mounted ``/proc/<pid>/environ``: another process's secrets, and a ``pagemap``
read whole is hundreds of GiB), files ringfence cannot read, and with ``ship_git="skip"`` every entry named ``.git`` (any case) and
what is below it. Not guaranteed: a file changed *while* it is read is shipped
as read (its digest is of those bytes); the tar is built in memory (a very
large workspace costs its size in memory once, at the first ship).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from ...runtime._errors import ToolError, Unavailable
from ...workspace._resolver import pseudo_filesystem

__all__ = ["OPAQUE_XATTR", "ShipGit", "Shipped", "ShippedRoot", "Sync", "rebuild_upper"]

ShipGit = Literal["readonly", "skip"]
SHIP_GIT: tuple[ShipGit, ...] = ("readonly", "skip")
OPAQUE_XATTR = "user.overlay.opaque"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_KEPT_DIRS = 64  # rebuild_upper's open directories (see _DirCache)


@dataclass(frozen=True)
class Shipped:
    """What the sandbox's copy of one path is: kind, mode, and the content it was shipped with."""

    kind: str  # "file", "symlink" or "dir"
    mode: int
    signature: tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode as read
    digest: str = ""  # sha256 of a file's bytes, a link's target; "" for a directory


@dataclass
class Sync:
    """One sync: delete ``deletions`` (sorted, no path below another), then extract ``tar``."""

    deletions: list[str] = field(default_factory=list)
    wipe: bool = False  # delete everything in the copy first (the record was lost)
    tar: bytes = b""
    entries: int = 0
    size: int = 0

    @property
    def empty(self) -> bool:
        return not self.deletions and not self.entries and not self.wipe


def _kind(st: os.stat_result) -> str | None:
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return None  # FIFOs, sockets, devices: never shipped


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


class ShippedRoot:
    """The host's record of one root's copy in the sandbox. Not thread-safe: one sync at a time."""

    def __init__(self, root: str, owner: tuple[int, int], ship_git: ShipGit = "readonly") -> None:
        self.root = root
        self.owner = owner
        self.ship_git = ship_git
        self.shipped: dict[str, Shipped] = {}
        self._wipe = False
        # (the sandbox user's ids, the root owner's), set by each sync (see _sandbox_may)
        self._ids = (owner, owner)

    def sync(self) -> Sync:
        """What the sandbox needs to match the root now (blocking). Updates the record.

        The record is updated as if the sync was applied: a caller whose
        sync fails must :meth:`forget` before trying again.
        """
        seen: dict[str, Shipped] = {}
        out = io.BytesIO()
        sync = Sync(wipe=self._wipe)
        self._wipe = False
        with tarfile.open(
            fileobj=out, mode="w", format=tarfile.GNU_FORMAT, errors="surrogateescape"
        ) as tar:
            try:
                root_fd = os.open(self.root, _DIR)
            except OSError as exc:
                raise ToolError(
                    f"cannot read workspace root {self.root} to ship it ({exc.strerror or exc})"
                ) from None
            try:
                root = os.fstat(root_fd)
                self._ids = (self.owner, (root.st_uid, root.st_gid))
                for path, entry, data in self._walk(root_fd, ""):
                    seen[path] = entry
                    old = self.shipped.get(path)
                    if old is not None and old.kind == entry.kind:
                        if old.digest == entry.digest and old.mode == entry.mode:
                            continue  # same content and mode: nothing to send
                    elif old is not None:
                        sync.deletions.append(path)  # a directory became a file, or back
                    self._add(tar, path, entry, data)
                    sync.entries += 1
                    sync.size += entry.signature[0] if entry.kind == "file" else 0
            finally:
                os.close(root_fd)
        gone = sorted(p for p in self.shipped if p not in seen)
        sync.deletions = _outermost(sorted(set(sync.deletions) | set(gone)))
        sync.tar = out.getvalue() if sync.entries else b""
        self.shipped = seen
        return sync

    def forget(self) -> None:
        """Empty the copy and ship everything next time (after a sync that did not arrive)."""
        self.shipped = {}
        self._wipe = True

    def _walk(self, dir_fd: int, prefix: str) -> Iterator[tuple[str, Shipped, bytes | None]]:
        with os.scandir(dir_fd) as it:
            names = sorted(e.name for e in it)
        for name in names:
            if self.ship_git == "skip" and name.lower() == ".git":
                continue
            path = f"{prefix}{name}"
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone while walking
            kind = _kind(st)
            if kind is None:
                continue
            if kind != "symlink" and not self._sandbox_may(st, 0o5 if kind == "dir" else 0o4):
                continue  # what the sandbox's user could not read where the root is mounted
            mode = stat.S_IMODE(st.st_mode)
            if kind == "dir":
                try:
                    sub = os.open(name, _DIR, dir_fd=dir_fd)
                except OSError:
                    sub = -1  # replaced or unreadable: its entries are not shipped
                if sub >= 0 and pseudo_filesystem(sub) is not None:
                    os.close(sub)  # the kernel's state mounted here (a chroot's proc)
                    continue
                yield path, Shipped("dir", mode, _signature(st)), None
                if sub < 0:
                    continue
                try:
                    yield from self._walk(sub, f"{path}/")
                finally:
                    os.close(sub)
            elif kind == "symlink":
                try:
                    target = os.readlink(name, dir_fd=dir_fd)
                except OSError:
                    continue  # replaced while walking: the next sync sees what it became
                yield path, Shipped("symlink", 0o777, _signature(st), target), None
            else:
                old = self.shipped.get(path)
                if old is not None and old.kind == "file" and old.signature == _signature(st):
                    yield path, Shipped("file", mode, old.signature, old.digest), None
                    continue
                try:
                    data, st = _read(dir_fd, name)
                except OSError:
                    continue  # unreadable to us (or gone): the sandbox's user could not either
                digest = hashlib.sha256(data).hexdigest()
                yield path, Shipped("file", stat.S_IMODE(st.st_mode), _signature(st), digest), data

    def _sandbox_may(self, st: os.stat_result, bits: int) -> bool:
        """Whether the sandbox's user may read (``0o4``), or list and enter (``0o5``), this
        entry where the root is bind-mounted: always when the entry is that user's or the
        root owner's (a local session maps the one to the other; an owner may chmod), else
        by its group's bits (the same ids) or everyone's. The copy makes every entry the
        sandbox user's, so what it could not read there is not shipped at all (ringfence, as
        root, can read it: a file of root's 0600 in a user's workspace was readable in every
        shipped session)."""
        (uid, gid), (root_uid, root_gid) = self._ids
        if st.st_uid in (uid, root_uid):
            return True  # its owner may chmod it (a 000 file of its own is readable so)
        granted = st.st_mode >> 3 if st.st_gid in (gid, root_gid) else st.st_mode
        return granted & bits == bits

    def _add(self, tar: tarfile.TarFile, path: str, entry: Shipped, data: bytes | None) -> None:
        info = tarfile.TarInfo(path)
        info.uid, info.gid = self.owner
        info.mode = entry.mode
        if entry.kind == "dir":
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        elif entry.kind == "symlink":
            info.type = tarfile.SYMTYPE
            info.linkname = entry.digest
            tar.addfile(info)
        else:
            if data is None:  # unchanged bytes, changed mode: read again
                data = _read_at(self.root, path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _read(dir_fd: int, name: str) -> tuple[bytes, os.stat_result]:
    """A file's bytes and its stat, read by descriptor; OSError for a file on a kernel-state
    file system (proc, sysfs, … bind-mounted into a root: not a workspace file, see
    :func:`ringfence.workspace._resolver.pseudo_filesystem`), which is never read."""
    fd = os.open(name, _FILE, dir_fd=dir_fd)
    try:
        kind = pseudo_filesystem(fd)
        if kind is not None:
            raise OSError(f"{name} is on a {kind} file system (the kernel's state)")
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _read_at(root: str, path: str) -> bytes:
    parts = path.split("/")
    fd = os.open(root, _DIR)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return _read(fd, parts[-1])[0]
    finally:
        os.close(fd)


def _outermost(paths: list[str]) -> list[str]:
    """Drop every path below another one of the list (deleting the parent deletes it)."""
    out: list[str] = []
    for path in paths:  # sorted: a parent comes before its entries
        if out and (path == out[-1] or path.startswith(out[-1] + "/")):
            continue
        out.append(path)
    return out


# -- the way back: an upper directory from the sandbox's tar ----------------------------------


def _member_parts(name: str) -> list[str] | None:
    """The components of a member name (``./a/b`` → ``[a, b]``; ``.`` → ``[]``), or None if bad."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or any(p == ".." or "\0" in p for p in parts):
        return None
    return parts


def rebuild_upper(
    data: bytes | Path,
    digest: str,
    target: str,
    opaque: list[str],
    *,
    engine: str,
    owner: tuple[int, int] | None = None,
) -> None:
    """Recreate the sandbox's upper directory from its tar in ``target`` (empty, ours). Blocking.

    ``data`` is the tar's bytes or a file holding it (read a chunk at a time: a fetched set
    is spooled there, never held whole).

    Needs root, or Linux 5.8 or newer (an unprivileged whiteout), and user
    extended attributes on ``target``'s file system (the opaque mark).

    ``digest`` is the sha256 the sandbox computed over the tar as it wrote
    it; a mismatch (a cut or altered stream) is ``Unavailable`` naming
    ``engine`` before anything is written; then every header is read
    (:func:`_check_headers`: no PAX header, which tarfile parses in quadratic
    time and memory) before tarfile parses one. ``opaque`` lists the directories
    (relative paths) the sandbox found opaque. A member that is not a
    directory, file (not sparse), link, hard link, FIFO or whiteout (a device), or whose
    name leaves the target, or that cannot be made (a name repeated), is a
    ToolError: the change set is refused whole. Every entry is given to
    ``owner`` (the container user, who owns a local overlay's upper too), so
    a setuid bit a command set never sits on a root-owned file here.
    """
    with contextlib.ExitStack() as stack:
        if isinstance(data, Path):  # a spooled tar: read a chunk at a time, never whole
            source: BinaryIO = stack.enter_context(data.open("rb"))
        else:
            source = io.BytesIO(data)
        _rebuild(source, digest, target, opaque, engine=engine, owner=owner)


def _rebuild(
    source: BinaryIO,
    digest: str,
    target: str,
    opaque: list[str],
    *,
    engine: str,
    owner: tuple[int, int] | None,
) -> None:
    """:func:`rebuild_upper` from a seekable tar."""
    hasher = hashlib.sha256()
    size = 0
    while chunk := source.read(1 << 20):
        hasher.update(chunk)
        size += len(chunk)
    source.seek(0)
    got = hasher.hexdigest()
    if got != digest:
        raise Unavailable(
            f"the change set from engine {engine} did not arrive whole ({size} bytes, "
            f"sha256 {got[:12]}…, the sandbox sent {digest[:12] or 'nothing'}…); "
            "the workspace is unchanged"
        )
    _check_headers(source, engine)  # before tarfile reads one: see _check_headers
    source.seek(0)
    if os.geteuid() != 0:
        owner = None  # only root gives entries away; ours are ringfence's user's then
    # Directories by path, not by descriptor: a set's directories are many (a command's
    # 30,000 would have taken this process's every descriptor, its other work's too).
    # Their modes are applied last (a 000 directory blocks its entries), deepest first.
    dirs: list[tuple[tuple[str, ...], int]] = []
    made: set[tuple[str, ...]] = {()}
    opened = _DirCache(target)
    try:
        with tarfile.open(fileobj=source, mode="r:") as tar:
            for member in tar:
                parts = _member_parts(member.name)
                if parts is None:
                    raise ToolError(f"the sandbox's change set names {member.name!r}: refused")
                if not parts:
                    continue
                if member.issparse():
                    # A few bytes of tar that are a file of any size here (the sandbox's tar
                    # makes none): the fetch's bound on what is sent would not bound the disk.
                    raise ToolError(
                        f"the sandbox's change set holds {member.name!r} as a sparse member "
                        f"({member.size} bytes from a few): refused"
                    )
                if tuple(parts[:-1]) not in made:
                    raise ToolError(f"the sandbox's change set has {member.name!r} before its dir")
                parent = opened.fd(tuple(parts[:-1]))
                leaf = parts[-1]
                mode = stat.S_IMODE(member.mode)
                if member.isdir():
                    os.mkdir(leaf, 0o700, dir_fd=parent)
                    made.add(tuple(parts))
                    dirs.append((tuple(parts), mode))
                elif member.isreg():
                    src = tar.extractfile(member)
                    assert src is not None
                    fd = os.open(
                        leaf,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                        0o600,
                        dir_fd=parent,
                    )
                    try:
                        while chunk := src.read(1 << 20):
                            os.write(fd, chunk)
                        os.fchmod(fd, mode)
                    finally:
                        os.close(fd)
                elif member.issym():
                    os.symlink(member.linkname, leaf, dir_fd=parent)
                elif member.islnk():
                    src_parts = _member_parts(member.linkname)
                    if not src_parts or tuple(src_parts[:-1]) not in made:
                        raise ToolError(f"the sandbox's change set links to {member.linkname!r}")
                    # A descriptor of its own: opening the parent may close the cache's.
                    src_dir = os.dup(opened.fd(tuple(src_parts[:-1])))
                    try:
                        parent = opened.fd(tuple(parts[:-1]))
                        os.link(
                            src_parts[-1],
                            leaf,
                            src_dir_fd=src_dir,
                            dst_dir_fd=parent,
                            follow_symlinks=False,
                        )
                    finally:
                        os.close(src_dir)
                elif member.isfifo():
                    os.mkfifo(leaf, 0o600, dir_fd=parent)
                    os.chmod(leaf, mode, dir_fd=parent)
                elif member.ischr() and member.devmajor == 0 and member.devminor == 0:
                    _whiteout(leaf, parent)
                else:
                    raise ToolError(
                        f"the sandbox's change set holds {member.name!r}, a device or unknown "
                        "entry: refused"
                    )
                if owner is not None:
                    os.chown(leaf, *owner, dir_fd=parent, follow_symlinks=False)
                    if member.isreg() and mode & 0o6000:  # chown cleared them
                        os.chmod(leaf, mode, dir_fd=parent)
        known = {"/".join(path): path for path, _ in dirs}
        for name in opaque:
            path = known.get(name)
            if path is None:
                raise ToolError(f"the sandbox reported {name!r} opaque, not a directory it sent")
            os.setxattr(opened.fd(path), OPAQUE_XATTR, b"y")
        for path, mode in reversed(dirs):
            os.fchmod(opened.fd(path), mode)
    except tarfile.TarError as exc:
        raise Unavailable(
            f"the change set from engine {engine} is not a whole tar ({exc}); the workspace is "
            "unchanged"
        ) from None
    except OSError as exc:
        raise ToolError(
            f"the change set from engine {engine} cannot be rebuilt ({exc}); refused whole, the "
            "workspace is unchanged"
        ) from None
    finally:
        opened.close()


# The member types a change set's tar may hold: what GNU and busybox tar write for an upper
# (files, links, directories, FIFOs, whiteouts as character devices; GNU long names).
_MEMBER_TYPES = {
    tarfile.REGTYPE,
    tarfile.AREGTYPE,
    tarfile.LNKTYPE,
    tarfile.SYMTYPE,
    tarfile.CHRTYPE,
    tarfile.DIRTYPE,
    tarfile.FIFOTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
}
_LONG_NAMES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
# The longest GNU long name or link taken (a name far past PATH_MAX: a deep tree's path).
LONG_NAME_LIMIT = 1 << 20
_TYPE_NAMES = {
    tarfile.XHDTYPE: "a PAX extended header",
    tarfile.XGLTYPE: "a PAX global header",
    tarfile.SOLARIS_XHDTYPE: "a Solaris extended header",
}


def _check_headers(source: BinaryIO, engine: str) -> None:
    """Every header of the tar in ``source`` read as :mod:`tarfile` will read it (its public
    ``TarInfo.frombuf``, one 512-byte block each), before tarfile parses a member.

    Only :data:`_MEMBER_TYPES` are taken, and a GNU long name or link of at most
    :data:`LONG_NAME_LIMIT` bytes. A PAX header (``x``, ``g``) is refused whole: tarfile
    keeps each of its records in a dict, which a crafted 80 KB header (records whose
    keywords overlap) made 1.5 GB of this process's memory and seconds of work, quadratic in
    its size; the fetch's tar (GNU format) writes none. A header tarfile would stop at (a bad
    checksum, cut short) is the tar not whole. Reads a block per member, seeks past data."""
    while True:
        offset = source.tell()
        block = source.read(tarfile.BLOCKSIZE)
        if not block.strip(b"\0"):
            return  # the end-of-archive block (or the end of the data): tarfile stops here
        try:
            info = tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
        except tarfile.HeaderError as exc:
            raise Unavailable(
                f"the change set from engine {engine} is not a whole tar ({exc} at byte "
                f"{offset}); the workspace is unchanged"
            ) from None
        if info.type == tarfile.GNUTYPE_SPARSE:  # a file of any size from a few bytes of tar
            raise ToolError(
                f"the sandbox's change set holds {info.name!r} as a sparse member at byte "
                f"{offset}: refused whole, the workspace is unchanged"
            )
        if info.type not in _MEMBER_TYPES:
            what = _TYPE_NAMES.get(info.type, f"a member of type {info.type!r}")
            raise ToolError(
                f"the sandbox's change set holds {what} at byte {offset}, which the fetch's "
                "tar never writes (a device, or headers that cost this host memory and time to "
                "read): refused whole, the workspace is unchanged"
            )
        if info.size < 0:  # base-256 can say so: tarfile would read the archive backwards
            raise Unavailable(
                f"the change set from engine {engine} is not a whole tar (a size of "
                f"{info.size} at byte {offset}); the workspace is unchanged"
            )
        if info.type in _LONG_NAMES and info.size > LONG_NAME_LIMIT:
            raise ToolError(
                f"the sandbox's change set holds a long name of {info.size} bytes at byte "
                f"{offset} (at most {LONG_NAME_LIMIT}): refused whole, the workspace is unchanged"
            )
        if info.isreg() or info.type in _LONG_NAMES:  # what tarfile reads or skips as data
            blocks = -(-info.size // tarfile.BLOCKSIZE)  # its data, padded to whole blocks
            source.seek(offset + (1 + blocks) * tarfile.BLOCKSIZE)


class _DirCache:
    """Descriptors of the rebuilt upper's directories by path, at most :data:`_KEPT_DIRS` open
    (the tar is depth first: its next entries are mostly in the last few). A directory not
    held is opened again from the top, component by component, never through a link."""

    def __init__(self, target: str) -> None:
        self._top = os.open(target, _DIR)
        self._fds: dict[tuple[str, ...], int] = {}

    def fd(self, path: tuple[str, ...]) -> int:
        if not path:
            return self._top
        fd = self._fds.pop(path, None)
        if fd is None:
            # Down from the nearest directory held (a loop: a tree may be deeper than
            # Python's recursion), each step's descriptor closed once the next is open.
            depth = len(path) - 1
            while depth and path[:depth] not in self._fds:
                depth -= 1
            fd = self._fds[path[:depth]] if depth else self._top
            for i in range(depth, len(path)):
                try:
                    sub = os.open(path[i], _DIR, dir_fd=fd)
                finally:
                    if i > depth:
                        os.close(fd)  # ours (the held one at ``depth`` stays held)
                fd = sub
        self._fds[path] = fd  # the most recently used last
        while len(self._fds) > _KEPT_DIRS:
            os.close(self._fds.pop(next(iter(self._fds))))
        return fd

    def close(self) -> None:
        for fd in (*self._fds.values(), self._top):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


def _whiteout(leaf: str, parent: int) -> None:
    """An overlay whiteout (character device 0:0): root, or anyone on Linux 5.8 and newer."""
    try:
        os.mknod(leaf, stat.S_IFCHR, os.makedev(0, 0), dir_fd=parent)
    except PermissionError:
        raise Unavailable(
            "a remote change set's deletions are whiteouts (character devices 0:0), which "
            "this kernel lets only root make (unprivileged whiteouts need Linux 5.8)"
        ) from None
