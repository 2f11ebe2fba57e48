"""Checkpoints: every change set kept outside the workspace, listable, showable, undoable.

``$RINGFENCE_HOME/checkpoints/<workspace id>/`` holds content-addressed ``blobs/``, ``packs/``
(a shell command's after-images, one pack per command) and one manifest per change set
(``sets/<id>.json``, whole or absent), bounded by :class:`Retention` (count, age, MiB: oldest
first). Blobs are checked against their digest when read, so a torn one is refused, never
restored. This module opens one path string, the store directory (outside every root);
everything below it is reached by descriptor. Over 500 lines on purpose: blobs, packs,
manifests and retention share the store's lock and descriptors.

Layout, retention, durability and who records: docs/design/checkpoint-store.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ...runtime._errors import InvalidArguments, NotFound, ToolError, Unavailable, Unwritable
from ...runtime._files import ringfence_home
from .._names import escape_name
from .._workspace import Workspace
from ._journal import Journal, Recovery, in_flight_anywhere, recover as recover_journals
from ._model import ChangeSet, read_at_most

__all__ = ["CheckpointStore", "PackWriter", "Retention", "workspace_id"]

_PRUNE_EVERY = 32
_PACK_BUFFER = 1 << 20
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")
_HEX = re.compile(r"[0-9a-f]+\Z")
# An unreferenced blob younger than this is kept: a recorder stores blobs before its manifest.
_BLOB_GRACE_SECONDS = 3600
# How the store's files are opened to be read: never through a link, and never waiting on a
# FIFO or a device planted under a stored file's name (its open hung `undo`, and every start's
# recovery and prune, for good); what is not a regular file is then refused as damaged.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A blob (or pack) found already stored is made young again (its mtime) at most this often per
# store object: within this long of the last time it still has most of its grace ahead.
_KEEP_AGAIN_SECONDS = 60.0


@dataclass(frozen=True)
class Retention:
    """How many change sets a store keeps (see the module docstring).

    The command line fills it from ``RINGFENCE_CHECKPOINTS_*`` (``Settings.retention``);
    the library takes what it is given, else these defaults.
    """

    keep: int = 500
    max_age_days: float = 30.0
    max_mib: float = 1024.0
    fsync: bool = False


def workspace_id(workspace: Workspace) -> str:
    """The store's name for a workspace: a digest of its roots' real paths, in order."""
    joined = "\0".join(str(p) for p in workspace.roots)
    return hashlib.sha256(os.fsencode(joined)).hexdigest()[:16]


class CheckpointStore:
    """The change sets of one workspace (thread-safe; see the module docstring)."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        retention: Retention | None = None,
        recover: bool = True,
        at: str | None = None,
    ) -> None:
        """``at``: another store's id, opened for this workspace (the store of the same
        directories under their old path, see :meth:`_recover_moved`)."""
        self.workspace = workspace
        self.retention = retention or Retention()
        self.path = ringfence_home() / "checkpoints" / (at or workspace_id(workspace))
        self._lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._last_us = -1  # the newest id's time (new_id)
        self._ids_mtime = -1  # the sets directory's mtime when new_id last listed it
        self._since_prune = 0
        self._open_lock = threading.Lock()
        self._fds: tuple[int, int, int] | None = None
        # Packed blobs: digest -> (pack name, offset, size), from the .idx files read so far.
        self._packed: dict[str, tuple[str, int, int]] = {}
        self._packs_read: set[str] = set()
        self._packs_mtime = -1
        # What prune read last time (see prune): manifests, blobs and pack indexes.
        self._set_cache: dict[str, tuple[tuple[int, int, int], frozenset[str]]] = {}
        self._blob_cache: dict[str, tuple[int, float]] = {}
        self._index_cache: dict[str, tuple[list[tuple[str, int, int]], float]] = {}
        # Blob files and pack indexes this object made young again, and when (see has).
        self._kept: dict[tuple[str, str], float] = {}
        self._journal_dir: int | None = None
        self.journal = Journal(self)
        self.recovered = Recovery()
        if recover and at is None and not self.exists():
            self._adopt_moved()  # these directories' store under an earlier path: taken over
        if recover and self._open(create=False) is not None:
            # A process killed while it wrote the workspace: its operation rolled back first.
            self.recovered = recover_journals(self)
            self.prune()
        if recover and at is None:
            self._recover_moved()
        if recover:
            # Again each time a writer of this process takes the writers' lock: a process
            # that died since (a recovery killed midway while this one waited) is rolled back
            # before anything is judged or written (see _recover_dead).
            workspace._resolver.on_turn.append(self._recover_dead)

    def _recover_dead(self) -> None:
        """Roll back what a process that died since this store's start left in flight; run
        by the writers' lock (:func:`~.._writelock.writing`) as a writer of this process takes it.

        This store's start passes over a journal another process holds, a live writer's or
        another start's recovery. That recovery killed midway (a second crash) left the tree
        half rolled back, and a write that had waited for its lock meanwhile then judged and
        wrote that tree: its change set took the killed merge's bytes for its before-image,
        the next start left the file to it, and its ``undo`` put the killed merge's bytes
        back. Cheap when there is nothing to do: the journals directory listed, each
        journal tried with a lock that does not wait (a live process's is passed over)."""
        if self.journal_fd_if_any() is None:
            return
        found = recover_journals(self)
        if found.sets or found.unreadable:
            self.recovered = Recovery(
                (*self.recovered.sets, *found.sets),
                self.recovered.journals + found.journals,
                (*self.recovered.unreadable, *found.unreadable),
            )

    def _identity(self) -> str:
        """The roots as directories (device and inode, in order): what a rename keeps."""
        resolver = self.workspace._resolver
        with resolver:
            stats = [os.fstat(root.fd) for root in resolver.roots]
        return "-".join(f"{st.st_dev:x}.{st.st_ino:x}" for st in stats)

    def note_identity(self) -> None:
        """Name this store under its roots' identity (``$RINGFENCE_HOME/checkpoint-roots/
        <identity>``, a link to its id), before its first journal line: a workspace renamed
        or moved after a kill finds the store that holds the killed operation's journal (see
        :meth:`_recover_moved`)."""
        with contextlib.suppress(OSError):
            fd = _open_store(str(_roots_index(self.path)), create=True)
            assert fd is not None
            try:
                name = self._identity()
                with contextlib.suppress(OSError):
                    if os.readlink(name, dir_fd=fd) == self.path.name:
                        return
                temp = f".{secrets.token_hex(6)}"
                os.symlink(self.path.name, temp, dir_fd=fd)
                os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
            finally:
                os.close(fd)

    def _moved_from(self, fd: int) -> str | None:
        """The id of the store that last wrote these directories under another path (``fd``:
        the roots index), or None."""
        try:
            other = os.readlink(self._identity(), dir_fd=fd)
        except OSError:  # never written under another path
            return None
        if other == self.path.name or not re.fullmatch(r"[0-9a-f]{16}", other):
            return None
        return other

    @contextlib.contextmanager
    def _moved_journal(self) -> Iterator[tuple[int, str, int] | None]:
        """The roots index's descriptor, the store that wrote these directories last under
        another path, and that store's journal directory (a descriptor); None when the
        directories never had a store under another path, or nothing of it is left."""
        fd = _open_store(str(_roots_index(self.path)), create=False)
        if fd is None:
            yield None
            return
        try:
            journal_fd = None
            try:
                other = self._moved_from(fd)
                if other is not None:
                    journal_fd = os.open(
                        f"../checkpoints/{other}/journal",
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=fd,
                    )
            except OSError:
                journal_fd = None
            if journal_fd is None or other is None:
                yield None
                return
            try:
                yield fd, other, journal_fd
            finally:
                os.close(journal_fd)
        finally:
            os.close(fd)

    def _adopt_moved(self) -> None:
        """A workspace renamed or moved with no store under its new path: the store of its
        directories under the old path becomes its store (one rename in ``checkpoints/``),
        so ``checkpoints list`` and ``undo`` find the sets made before the move, and a
        killed operation's journal is recovered as this store's own. Not while a process
        holds one of that store's journals (it still writes there)."""
        with self._moved_journal() as found:
            if found is None:
                return
            fd, other, journal_fd = found
            try:
                if not _all_unheld(journal_fd):
                    return
                os.rename(
                    f"../checkpoints/{other}",
                    f"../checkpoints/{self.path.name}",
                    src_dir_fd=fd,
                    dst_dir_fd=fd,
                )
            except OSError:  # gone, or a store made here meanwhile: each keeps its own
                return
        self.note_identity()

    def _recover_moved(self) -> None:
        """Roll back what a process killed in these directories under another path left.

        The store is named by the roots' paths: renamed or moved after a kill, the workspace
        got a store of its own and the killed operation's journal was never read again (the
        tree left mixed for good). The roots' identity names the store that wrote here last;
        its dead journals are recovered against this workspace (the rollback writes only
        where a path holds exactly what the set wrote) and said in :attr:`recovered`."""
        with self._moved_journal() as found:
            if found is None:
                return
            _, other, journal_fd = found
            try:
                if not os.listdir(journal_fd):
                    return
            except OSError:  # nothing of it is left to read
                return
        moved = CheckpointStore(self.workspace, retention=self.retention, at=other)
        try:
            found = moved.recovered
        finally:
            moved.close()
        if found.sets or found.unreadable:
            sets = tuple({**s, "store": str(moved.path)} for s in found.sets)
            self.recovered = Recovery(
                (*self.recovered.sets, *sets),
                self.recovered.journals + found.journals,
                (*self.recovered.unreadable, *found.unreadable),
            )

    def _open(self, *, create: bool) -> tuple[int, int, int] | None:
        """The (blobs, sets, packs) descriptors; the store is made on its first write."""
        with self._open_lock:
            if self._fds is None:
                fd = _open_store(str(self.path), create=create)
                if fd is None:
                    return None
                try:
                    self._fds = (_subdir(fd, "blobs"), _subdir(fd, "sets"), _subdir(fd, "packs"))
                finally:
                    os.close(fd)
            return self._fds

    @property
    def _blobs_fd(self) -> int:
        fds = self._open(create=True)
        assert fds is not None
        return fds[0]

    @property
    def _sets_fd(self) -> int:
        fds = self._open(create=True)
        assert fds is not None
        return fds[1]

    def exists(self) -> bool:
        """Has anything been stored for this workspace yet?"""
        return self._open(create=False) is not None

    @property
    def _packs_fd(self) -> int:
        fds = self._open(create=True)
        assert fds is not None
        return fds[2]

    @property
    def _journal_fd(self) -> int:
        fd = self.journal_fd_if_any(create=True)
        assert fd is not None
        return fd

    def journal_fd_if_any(self, *, create: bool = False) -> int | None:
        """The journal directory (made on the first operation that writes the workspace)."""
        if self._journal_dir is None:
            fds = self._open(create=create)
            if fds is None:
                return None
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fds[1])
            try:
                if not create:
                    try:
                        self._journal_dir = os.open(
                            "journal",
                            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=parent,
                        )
                    except FileNotFoundError:
                        return None
                else:
                    self._journal_dir = _subdir(parent, "journal")
            finally:
                os.close(parent)
        return self._journal_dir

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.workspace._resolver.on_turn.remove(self._recover_dead)
        self.journal.close()
        with self._open_lock:
            for fd in self._fds or ():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds = None
            if self._journal_dir is not None:
                with contextlib.suppress(OSError):
                    os.close(self._journal_dir)
                self._journal_dir = None

    # -- blobs -------------------------------------------------------------------------

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if self.has(digest):
            return digest  # content-addressed: already there
        try:
            _write_atomic(self._blobs_fd, digest, data, sync=self.retention.fsync)
        except OSError as exc:
            raise self.full(exc, len(data)) from None
        return digest

    def adopt(self, dir_fd: int, name: str, digest: str) -> bool:
        """Take the file ``name`` in ``dir_fd`` (whose content hashes to ``digest``) into the
        store by a hard link; False when it cannot (another file system, no permission):
        the caller copies instead.

        Only for a file nothing writes any more (an overlay's upper directory
        after its command): the store then holds the inode's one lasting name.
        Its mode is made 0600 (the store's own files are private).
        """
        if self.has(digest):
            return True  # content-addressed: already there
        try:
            os.link(
                name, digest, src_dir_fd=dir_fd, dst_dir_fd=self._blobs_fd, follow_symlinks=False
            )
        except FileExistsError:
            return True
        except OSError:
            return False
        with contextlib.suppress(OSError):
            os.chmod(digest, 0o600, dir_fd=self._blobs_fd)
        return True

    def put_fd(self, fd: int) -> tuple[str, int]:
        """Copy an open file into the store as it is read (digest, size); no full copy in memory."""
        digest, size, _ = self.put_fd_new(fd)
        return digest, size

    def put_fd_new(self, fd: int) -> tuple[str, int, tuple[int, int] | None]:
        """:meth:`put_fd`, and when the blob is new (no earlier set can name it) the identity
        of the file this call stored (inode, mtime in ns): :meth:`forget_blob` removes that
        file only while no other writer has named it since."""
        temp = f".in.{secrets.token_hex(6)}"
        h, size = hashlib.sha256(), 0
        made: os.stat_result | None = None
        try:
            out = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                0o600,
                dir_fd=self._blobs_fd,
            )
            try:
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
                    size += len(chunk)
                    _write_all(out, chunk)
                if self.retention.fsync:
                    os.fsync(out)
                made = os.fstat(out)  # asked: a later change gets a time of its own
            finally:
                os.close(out)
            digest = h.hexdigest()
            new = not self.has(digest)
            os.replace(temp, digest, src_dir_fd=self._blobs_fd, dst_dir_fd=self._blobs_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._blobs_fd)  # the space is given back at once
            if isinstance(exc, OSError):
                raise self.full(exc, _size_of(fd)) from None
            raise
        return digest, size, ((made.st_ino, made.st_mtime_ns) if new and made else None)

    def get(self, digest: str) -> bytes:
        if not _DIGEST.match(digest):
            raise InvalidArguments(f"{digest!r} is not a sha256 digest", field="digest")
        try:
            fd = os.open(digest, _READ_FLAGS, dir_fd=self._blobs_fd)
        except FileNotFoundError:
            data = self._get_packed(digest)
        except OSError as exc:  # a link planted under a blob's name
            raise self._damaged_file("blob", digest, exc.strerror or str(exc)) from None
        else:
            try:  # its size, then one read (a buffered file object cost five more calls)
                data = read_at_most(fd, _regular_size(fd, self, "blob", digest), sys.maxsize)
                data = data or b""
            finally:
                os.close(fd)
        if hashlib.sha256(data).hexdigest() != digest:
            # Not fsynced by default: after a power loss a blob can be empty or torn.
            raise ToolError(f"blob {digest} in {self.path} is damaged; it is not used")
        return data

    def forget_blob(self, digest: str, made: tuple[int, int]) -> None:
        """Remove a blob file no manifest of this caller names (a failed set's large blob:
        its space back now, not at a prune an hour on), unless another writer named it
        since ``made`` (the stored file's inode and mtime, :meth:`put_fd_new`).

        Another session storing or keeping the same bytes meanwhile (a ``write_file`` over
        a file holding them: its before-image) replaces the file (another inode) or makes it
        young (:meth:`has`: another mtime), and names it in its manifest: removed anyway,
        that set's ``undo`` failed for good with "blob … is missing (pruned?)". Moved out of
        the way first and judged there, as a prune does (:func:`_remove_if_old`): a writer
        keeping it before the move is seen, one after finds it gone and stores it anew."""
        if not _DIGEST.match(digest):
            return
        dir_fd = self._blobs_fd
        aside = f".gone.{digest}.{secrets.token_hex(4)}"
        try:
            os.rename(digest, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            return  # gone already, or cannot be moved: left for a prune
        try:
            st = os.stat(aside, dir_fd=dir_fd, follow_symlinks=False)
            named = (st.st_ino, st.st_mtime_ns) != made
        except OSError:
            return
        with contextlib.suppress(OSError):
            if named:
                os.rename(aside, digest, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            else:
                os.unlink(aside, dir_fd=dir_fd)

    def has(self, digest: str) -> bool:
        """Is a blob with this digest stored (as a file or in a pack)? If so it is kept
        from every prune for the next hour: its file's (or its pack index's) mtime is made
        now, as if it had just been stored.

        Every caller uses a True to name the blob in a manifest it has yet to save instead of
        storing it again (``put``, a pack's blobs held already, the merge's conflict check).
        A blob an hour old that only the sets another session's prune was dropping named
        was removed meanwhile as unreferenced (the new manifest not saved yet): the write
        reported its checkpoint and ``undo`` found its before-image missing. Prune removes
        a blob or a pack only if it is still old once it is out of the way
        (:func:`_remove_if_old`), so a blob kept here is either kept there or stored anew."""
        if not _DIGEST.match(digest):
            return False  # never a name to touch: the mtime it sets is a write
        with self._lock:  # packs first: a shell command's blobs are packed (no system call)
            found = self._packed.get(digest)
        if found is None and self._keep(self._blobs_fd, "blobs", digest):
            return True
        if found is None:
            found = self._where_packed(digest)
        if found is None:
            return False
        if self._keep(self._packs_fd, "packs", f"{found[0]}.idx"):
            return True
        with self._lock:  # its pack was pruned since this object read its index
            for d in [d for d, where in self._packed.items() if where[0] == found[0]]:
                del self._packed[d]
            self._packs_read.discard(f"{found[0]}.idx")
        return False

    def _keep(self, dir_fd: int, where: str, name: str) -> bool:
        """Make the stored file ``name`` (a blob, a pack's index) young again; False if it
        is gone. At most every :data:`_KEEP_AGAIN_SECONDS` per file (one system call)."""
        now = time.monotonic()
        with self._lock:
            last = self._kept.get((where, name))
        if last is not None and now - last < _KEEP_AGAIN_SECONDS:
            return True
        try:
            os.utime(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as exc:  # a store that cannot be written (read-only): named as such
            raise self.full(exc) from None
        with self._lock:
            if len(self._kept) > 100_000:
                self._kept.clear()
            self._kept[(where, name)] = now
        return True

    def pack(self, limit_bytes: int | None = None) -> PackWriter:
        """A new pack for many small blobs (see :class:`PackWriter`); ``limit_bytes``
        bounds what it stores (a shell command's set)."""
        return PackWriter(self, limit_bytes)

    def full(self, exc: OSError, needed: int | None = None) -> Unavailable | Unwritable | OSError:
        """``exc`` as the error a person can act on: a full file system names itself, what
        is free there and what was needed (``unavailable``); a store that cannot be written
        (a read-only file system or mount, permissions) names the store (``unwritable``:
        it was "write_file failed: OSError: [Errno 30] Read-only file system", naming
        nothing); any other error stays."""
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return Unwritable(
                f"the checkpoint store ({self.path}) cannot be written "
                f"({exc.strerror or exc}): nothing was changed; make it writable, or set "
                "$RINGFENCE_HOME to a place that is",
                field="checkpoints",
            )
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return exc
        try:
            vfs = os.statvfs(self.path)
            free = f"; {vfs.f_bavail * vfs.f_frsize:,} bytes are free there"
        except OSError:
            free = ""
        more = f", {needed:,} bytes more were needed" if needed else ""
        what = "quota" if exc.errno == errno.EDQUOT else "file system"
        return Unavailable(
            f"the {what} holding the checkpoint store ({self.path}) is full{more}{free}: "
            "nothing was changed; free space there, or set $RINGFENCE_HOME to a file system "
            "with room",
            needed=needed,
        )

    def _where_packed(self, digest: str, *, sure: bool = False) -> tuple[str, int, int] | None:
        """Where a packed blob is; ``sure``: list the packs even if their directory seems
        unchanged (a reader must not miss a pack committed within the mtime's tick; a
        writer asking only stores a duplicate if it does)."""
        with self._lock:
            found = self._packed.get(digest)
        if found is None and self._read_new_indexes(sure=sure):
            with self._lock:
                found = self._packed.get(digest)
        return found

    def _read_new_indexes(self, *, sure: bool = False) -> bool:
        """Read the .idx files not read yet; True if there were any.

        Listed again only when the packs directory changed since (its mtime):
        a pack's writer asks about each new digest, and most are absent.
        """
        mtime = os.fstat(self._packs_fd).st_mtime_ns
        with self._lock:
            if mtime == self._packs_mtime and not sure:
                return False
            self._packs_mtime = mtime
        new = False
        for name in os.listdir(self._packs_fd):
            if not name.endswith(".idx") or name.startswith(".") or name in self._packs_read:
                continue
            with contextlib.suppress(OSError, ValueError):
                entries = _read_index(self._packs_fd, name)
                with self._lock:
                    for digest, offset, size in entries:
                        self._packed.setdefault(digest, (name[:-4], offset, size))
                    self._packs_read.add(name)
                new = True
        return new

    def _get_packed(self, digest: str) -> bytes:
        found = self._where_packed(digest, sure=True)
        if found is None:
            raise NotFound(f"blob {digest} is missing from {self.path} (pruned?)")
        pack, offset, size = found
        try:
            fd = os.open(f"{pack}.pack", _READ_FLAGS, dir_fd=self._packs_fd)
        except FileNotFoundError:
            raise NotFound(f"blob {digest} is missing from {self.path} (pruned?)") from None
        except OSError as exc:  # a link planted under a pack's name
            raise self._damaged_file("pack", pack, exc.strerror or str(exc)) from None
        try:
            _regular_size(fd, self, "pack", pack)
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)

    def _damaged_file(self, what: str, name: str, why: str) -> ToolError:
        return ToolError(
            f"{what} {name} in {self.path} is damaged ({why}); it is not used", damaged=name
        )

    # -- change sets -------------------------------------------------------------------

    def new_id(self) -> str:
        """A new set's id: its time in µs (ids sort by age: ``undo --last``, retention), past
        every id the store holds. A clock stepped back (NTP, a resumed VM) gave a new set an
        id older than the last one, so ``undo`` undid an earlier set instead of it."""
        now = time.time_ns() // 1000
        with self._id_lock:
            fds = self._open(create=False)
            mtime = os.fstat(fds[1]).st_mtime_ns if fds is not None else 0
            if self._last_us < 0 or mtime != self._ids_mtime:
                # Listed again whenever a set was saved since (by this process or another):
                # read once per store object, a long session's ids were past only its own,
                # and a set another session saved meanwhile with a clock ahead (or its own
                # clock before a step back) stayed newer than this session's next set, so
                # ``undo --last`` undid that older set instead of the last one.
                self._ids_mtime = mtime
                self._last_us = max(
                    self._last_us,
                    max(
                        (int(i[:14], 16) for i in self.ids() if len(i) >= 14 and _HEX.match(i)),
                        default=0,
                    ),
                )
            now = max(now, self._last_us + 1)
            self._last_us = now
        return f"{now:014x}{secrets.token_hex(3)}"

    def save(self, cs: ChangeSet) -> None:
        data = cs.encode()  # a 10,000-file manifest: a few ms, where json took tens
        try:
            _write_atomic(self._sets_fd, f"{cs.id}.json", data, sync=self.retention.fsync)
        except OSError as exc:
            raise self.full(exc, len(data)) from None
        st = os.stat(f"{cs.id}.json", dir_fd=self._sets_fd)
        with self._lock:
            # Known now, so prune need not read it back.
            self._set_cache[cs.id] = (_file_key(st), cs.digests())
            self._since_prune += 1
            # The check costs a stat per set: spaced by the store's size, its share per save
            # stays constant (~2 us of a 1 ms write_file, where every 32 it grew to ~35 us).
            due = self._since_prune >= max(_PRUNE_EVERY, len(self._set_cache) // 4)
        if due:
            self.prune()

    def drop(self, set_id: str) -> None:
        if not self.exists():
            return
        self._set_cache.pop(set_id, None)  # (prune holds the lock; a dict pop is atomic)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{set_id}.json", dir_fd=self._sets_fd)

    def ids(self) -> list[str]:
        """Every change set's id, oldest first."""
        if not self.exists():
            return []
        return sorted(n[:-5] for n in os.listdir(self._sets_fd) if n.endswith(".json"))

    def load(self, set_id: str) -> ChangeSet:
        if not set_id or not set_id.isalnum():
            raise InvalidArguments(f"{set_id!r} is not a change set id", field="id")
        if not self.exists():
            raise NotFound(
                f"no change set {set_id}: nothing is stored for this workspace", field="id"
            )
        try:
            fd = os.open(
                f"{set_id}.json",
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                dir_fd=self._sets_fd,
            )
        except FileNotFoundError:
            raise NotFound(
                f"no change set {set_id} (see `ringfence checkpoints list`)", field="id"
            ) from None
        except OSError as exc:  # a link or a special file planted under a manifest's name
            raise self._damaged(set_id, exc.strerror or str(exc)) from None
        try:
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise self._damaged(set_id, "not a regular file")
                return ChangeSet.from_json(orjson.loads(f.read()))
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            # Torn (not fsynced, then a power loss), cut short, or of another shape.
            raise self._damaged(set_id, f"{type(exc).__name__}: {exc}") from None

    def _damaged(self, set_id: str, why: str) -> ToolError:
        return ToolError(
            f"change set {set_id} cannot be read: its manifest {self.path}/sets/{set_id}.json "
            f"is damaged ({why}); the other change sets are unaffected",
            damaged=set_id,
        )

    def list(self) -> list[dict[str, Any]]:
        """A summary of each change set, newest first: id, created, tool, paths, undone_by.

        A damaged manifest is listed as what it is (``damaged``: why), never hiding the
        others; ``undo --last`` passes over it."""
        sets: list[ChangeSet] = []
        damaged: list[dict[str, Any]] = []
        for i in self.ids():
            try:
                sets.append(self.load(i))
            except (ToolError, InvalidArguments) as exc:
                created = int(i[:14], 16) / 1e6 if len(i) >= 14 and _HEX.match(i) else 0.0
                damaged.append({"id": i, "created": created, "tool": "(damaged)", "paths": [],
                                "undoes": None, "undone_by": None, "staged": False,
                                "damaged": exc.message})  # fmt: skip
            except NotFound:
                continue  # dropped meanwhile (a prune, another process)
        undone = {s.undoes: s.id for s in sets if s.undoes}
        listed = [
            {
                "id": s.id,
                "created": s.created,
                "tool": s.tool,
                "paths": sorted({escape_name(c.path) for c in s.changes}),
                "undoes": s.undoes,
                "undone_by": undone.get(s.id),
                "staged": s.staged,
            }
            for s in sets
        ]
        return sorted([*listed, *damaged], key=lambda s: s["id"], reverse=True)

    def diff(self, set_id: str) -> str:
        """The change set as a person reviews it: every change of kind and mode, and a unified
        diff of the text, through the one renderer (see :mod:`._diff`)."""
        from ._diff import render_changes

        return render_changes(self.load(set_id).changes, self.get)

    # -- retention ---------------------------------------------------------------------

    def prune(self) -> None:
        """Apply the retention policy: oldest change sets first, then unreferenced blobs.

        What it read is cached (a manifest's digests by its file's mtime and
        size, a blob's size and age, a pack's index), so a prune over 500
        sets reads only what changed since the last one (re-reading every
        manifest at each check cost a checkpointed ``write_file`` more than
        the write itself).
        """
        if not self.exists():
            return
        with self._lock:
            self._since_prune = 0
            sets = self._referenced()
            # Listed after the sets: a set listed has its ``B`` line written already.
            busy = in_flight_anywhere(self)
            sizes, young = self._blob_sizes()
            packs = self._pack_indexes(sizes, young)
            self._drop_oldest(sets, sizes, busy)
            for fd in (self._blobs_fd, self._packs_fd, self._sets_fd):
                _remove_leftovers(fd)
            _remove_unindexed_packs(self._packs_fd)
            live = set().union(*sets.values()) if sets else set()
            packed = set().union(*packs.values()) if packs else set()
            for name in sizes:
                if name in packed or name in live or name in young or name.startswith("."):
                    continue
                # The cache may be older than the file (another store kept it): looked again.
                if _remove_if_old(self._blobs_fd, name):
                    self._blob_cache.pop(name, None)
                    self._kept.pop(("blobs", name), None)
            for pack, digests in packs.items():  # a pack goes whole, when it holds nothing live
                if digests & live or f"{pack}.idx" in young:
                    continue
                if not _remove_if_old(self._packs_fd, f"{pack}.idx"):
                    continue  # kept by a writer naming one of its blobs (has) since it was read
                self._kept.pop(("packs", f"{pack}.idx"), None)
                with contextlib.suppress(OSError):
                    os.unlink(f"{pack}.pack", dir_fd=self._packs_fd)
                for d in digests:
                    if self._packed.get(d, ("",))[0] == pack:
                        del self._packed[d]
                self._packs_read.discard(f"{pack}.idx")
                self._index_cache.pop(f"{pack}.idx", None)

    def _referenced(self) -> dict[str, frozenset[str]]:
        """Each change set's id -> the digests it names (manifests re-read only when changed)."""
        out: dict[str, frozenset[str]] = {}
        cache: dict[str, tuple[tuple[int, int, int], frozenset[str]]] = {}
        for i in self.ids():
            with contextlib.suppress(Exception):
                st = os.stat(f"{i}.json", dir_fd=self._sets_fd)
                key = _file_key(st)
                known = self._set_cache.get(i)
                if known is not None and known[0] == key:
                    digests = known[1]
                else:
                    digests = self.load(i).digests()
                out[i] = digests
                cache[i] = (key, digests)
        self._set_cache = cache
        return out

    def _blob_sizes(self) -> tuple[dict[str, int], set[str]]:
        """(every blob's size by name, the names stored in the last hour)."""
        sizes: dict[str, int] = {}
        young: set[str] = set()  # stored in the last hour: maybe a manifest still to come
        since = _young_since()
        cache: dict[str, tuple[int, float]] = {}
        for name in os.listdir(self._blobs_fd):
            known = self._blob_cache.get(name)  # a blob never changes under its name
            if known is None:
                try:
                    st = os.stat(name, dir_fd=self._blobs_fd)
                except OSError:
                    continue
                known = (st.st_size, st.st_mtime)
            cache[name] = known
            sizes[name] = known[0]
            if known[1] > since:
                young.add(name)
        self._blob_cache = cache
        return sizes, young

    def _pack_indexes(self, sizes: dict[str, int], young: set[str]) -> dict[str, set[str]]:
        """Each pack's name -> its digests (``sizes`` and ``young`` hear of them too)."""
        packs: dict[str, set[str]] = {}
        since = _young_since()
        cache: dict[str, tuple[list[tuple[str, int, int]], float]] = {}
        for name in os.listdir(self._packs_fd):
            if not name.endswith(".idx") or name.startswith("."):
                continue
            known = self._index_cache.get(name)  # a pack is written once, never changed
            if known is None:
                try:
                    entries = _read_index(self._packs_fd, name)
                    known = (entries, os.stat(name, dir_fd=self._packs_fd).st_mtime)
                except (OSError, ValueError):
                    continue
            cache[name] = known
            entries, mtime = known
            packs[name[:-4]] = {d for d, _, _ in entries}
            if mtime > since:
                young.add(name)
            for d, _, size in entries:
                sizes.setdefault(d, size)
        self._index_cache = cache
        return packs

    def _drop_oldest(
        self, sets: dict[str, frozenset[str]], sizes: dict[str, int], busy: set[str]
    ) -> None:
        """Drop change sets, oldest first, while one of the limits is exceeded (``sets`` too).

        The newest set is always kept, and so is every set in flight in a journal (``busy``):
        another session's merge, dropped as it ran (a newer staged set made it the older),
        was then killed and its next start found no manifest to roll back from — the
        workspace half-merged for good — or finished with nothing to undo it. Ids sort by
        age, so once one set is within every limit, all younger ones are too: the loop stops
        there.
        """
        users: dict[str, int] = {}  # digest -> how many sets name it
        for digests in sets.values():
            for d in digests:
                users[d] = users.get(d, 0) + 1
        live_bytes = sum(sizes.get(d, 0) for d in users)
        limit = self.retention.max_mib * (1 << 20)
        oldest_kept = (time.time() - self.retention.max_age_days * 86400) * 1e6
        for i in sorted(sets)[:-1]:
            too_old = int(i[:14], 16) < oldest_kept
            if not (len(sets) > self.retention.keep or too_old or live_bytes > limit):
                break
            if i in busy:
                continue  # its bytes count, and it is kept
            for d in sets.pop(i):
                users[d] -= 1
                if not users[d]:
                    live_bytes -= sizes.get(d, 0)
            self.drop(i)


def _all_unheld(journal_fd: int) -> bool:
    """No live process holds a journal file in this journal directory (one that cannot be
    read counts as held: the cautious answer)."""
    for name in os.listdir(journal_fd):
        if name.startswith("."):
            return False  # a journal being made
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=journal_fd)  # fmt: skip
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return False
        finally:
            os.close(fd)
    return True


def _remove_if_old(dir_fd: int, name: str) -> bool:
    """Remove the blob or pack index ``name`` unless it is young; True if it was removed.

    Moved out of the way first and judged there: a writer that keeps it
    (:meth:`CheckpointStore.has`) before the move makes it young, so it is put back; one
    after finds it gone and stores the bytes anew. Judged in place, a writer's keep landing
    between the look and the unlink was lost."""
    aside = f".gone.{name}.{secrets.token_hex(4)}"
    try:
        os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        return False  # gone already, or cannot be moved: left
    try:
        young = os.stat(aside, dir_fd=dir_fd, follow_symlinks=False).st_mtime > _young_since()
    except OSError:
        young = True
    try:
        if young:
            os.rename(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return False
        os.unlink(aside, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def _remove_leftovers(dir_fd: int) -> None:
    """Remove what killed writers left in a store directory: their temporary files (a blob
    streamed in, a pack, a manifest, an index, each named with a leading dot), once an hour
    old (a live writer's is newer: it writes as it goes). Every kill left one for good, the
    bytes it had copied (a 32 MiB ``write_file`` killed mid-copy, 32 MiB a kill), outside
    the store's limit. A blob or index a killed prune had moved aside (:func:`_remove_if_old`)
    and a writer kept goes back under its name."""
    since = _young_since()
    for name in os.listdir(dir_fd):
        if not name.startswith("."):
            continue
        try:
            young = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime > since
            if not young:
                os.unlink(name, dir_fd=dir_fd)
            elif name.startswith(".gone.") and len(name) > 15:
                kept = name[6:-9]  # .gone.<name>.<8 hex digits>
                if kept and not kept.startswith("."):
                    os.rename(name, kept, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            continue  # gone meanwhile, or not a file this process may remove


def _remove_unindexed_packs(dir_fd: int) -> None:
    """Remove a pack without its index once an hour old: a writer killed between naming its
    pack and its index (:meth:`PackWriter.commit`) left one no prune looked at (they go by
    their indexes), its bytes kept for good. A live writer names the index at once."""
    names = set(os.listdir(dir_fd))
    since = _young_since()
    for name in names:
        if name.startswith(".") or not name.endswith(".pack") or f"{name[:-5]}.idx" in names:
            continue
        with contextlib.suppress(OSError):
            if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime <= since:
                os.unlink(name, dir_fd=dir_fd)


def _roots_index(store: Path) -> Path:
    """``$RINGFENCE_HOME/checkpoint-roots``: each store's name under its roots' identity."""
    return store.parent.parent / "checkpoint-roots"


def _file_key(st: os.stat_result) -> tuple[int, int, int]:
    """A manifest file's identity: a rewrite renames a new inode into place."""
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _young_since() -> float:
    """The mtime after which a blob or pack counts as just stored (see _BLOB_GRACE_SECONDS)."""
    return time.time() - _BLOB_GRACE_SECONDS


class PackWriter:
    """Many small blobs appended to one new pack file (one file in the store, not one each).

    :meth:`add` (or ``put``: a pack is a :class:`~._model.Blobs`) stores
    ``data`` unless this pack or an earlier one has it and returns its digest;
    :meth:`commit` makes the pack's blobs readable (the pack and
    then its index renamed into place, the index last, so an index never
    names bytes that are not there). Until then :meth:`add`'s digests are
    not in the store: commit before the manifest naming them is saved.
    Dropped without commit (:meth:`abort`), nothing is left behind. A pack
    is written once and never changed, like every blob.
    """

    def __init__(self, store: CheckpointStore, limit_bytes: int | None = None) -> None:
        self._store = store
        self._limit = limit_bytes
        self.stored = 0  # bytes this pack stored (its own and its large blobs')
        # Large blobs this pack stored as files of their own, each with its file's identity.
        self._blobs: list[tuple[str, tuple[int, int]]] = []
        self._dir = store._packs_fd
        self.name = f"{store.new_id()}"
        self._temp = f".{self.name}.pack.tmp"
        self._fd = -1  # opened by the first blob: a pack of nothing costs no file
        self._offset = 0
        self._entries: dict[str, tuple[int, int]] = {}
        self._committed = False  # committed: a manifest may name its blobs from now on
        self._buffer = bytearray()  # written out in 1 MiB pieces, not a write per blob
        # The packed blobs the store holds, looked up once (a stat per blob cost a 10,000-file
        # command 10,000 system calls). A blob the store holds as a file of its own is stored
        # again here: that costs only bytes.
        store._read_new_indexes(sure=True)
        with store._lock:
            self._held = dict(store._packed)  # digest -> (pack, offset, size)
        # The held packs this writer made young (``has``'s keep of their index), and when
        # (monotonic): a blob of one is named again without a ``has`` each (~5 µs; a
        # reinstall's 10,000 files are all held) until the store would keep it again
        # (_KEEP_AGAIN_SECONDS), as ``has`` itself does.
        self._kept: dict[str, float] = {}

    def _held_now(self, digest: str) -> bool:
        """Is ``digest`` in a pack the store holds, that pack kept from a prune (``has``)?"""
        where = self._held.get(digest)
        if where is None:
            return False
        pack, now = where[0], time.monotonic()
        kept = self._kept.get(pack)
        if kept is not None and now - kept < _KEEP_AGAIN_SECONDS:
            return True
        store = self._store
        if store._keep(store._packs_fd, "packs", f"{pack}.idx"):
            self._kept[pack] = now
            return True
        return store.has(digest)  # its pack pruned since: has forgets it, or finds it elsewhere

    def add(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._entries:
            return digest
        if digest in self._held and self._held_now(digest):  # kept from a prune (has)
            return digest
        self._count(len(data))
        self._buffer += data
        if len(self._buffer) >= _PACK_BUFFER:
            self._flush()
        self._entries[digest] = (self._offset, len(data))
        self._offset += len(data)
        return digest

    def _count(self, size: int) -> None:
        self.stored += size
        if self._limit is not None and self.stored > self._limit:
            mib = self._limit / (1 << 20)
            raise Unavailable(
                f"the change set is larger than the checkpoint store keeps ({mib:g} MiB, "
                "$RINGFENCE_CHECKPOINTS_MIB): it was refused whole, nothing was merged or "
                "staged; write less in one command or raise the limit",
                limit_bytes=self._limit,
            )

    def _flush(self) -> None:
        try:
            if self._fd < 0:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                self._fd = os.open(self._temp, flags, 0o600, dir_fd=self._dir)
            _write_all(self._fd, self._buffer)
        except OSError as exc:
            raise self._store.full(exc, len(self._buffer)) from None
        self._buffer.clear()

    # The Blobs protocol, so a pack can stand in for the store while a set is read.
    put = add

    def put_fd(self, fd: int) -> tuple[str, int]:
        self._count(_size_of(fd))  # refused before a byte is copied
        digest, size, made = self._store.put_fd_new(fd)  # large: a blob of its own, streamed
        if made is not None:
            self._blobs.append((digest, made))
        return digest, size

    def get(self, digest: str) -> bytes:
        return self._store.get(digest)

    def commit(self) -> None:
        if not self._entries:
            self._committed = True  # its large blobs are a manifest's to name now
            return  # nothing added (or committed already)
        self._flush()
        try:
            if self._store.retention.fsync:
                os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
        os.replace(self._temp, f"{self.name}.pack", src_dir_fd=self._dir, dst_dir_fd=self._dir)
        index = "".join(f"{d} {o} {n}\n" for d, (o, n) in self._entries.items()).encode()
        try:
            _write_atomic(self._dir, f"{self.name}.idx", index, sync=self._store.retention.fsync)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(f"{self.name}.pack", dir_fd=self._dir)  # no index: no use
            raise self._store.full(exc, len(index)) from None
        self._entries = {}
        self._committed = True

    def abort(self) -> None:
        """Drop what this pack wrote (its file, and its large blobs when no manifest names
        them yet): a failed set gives its space back at once. Idempotent.

        Its large blobs go whenever it was not committed: a set of large files alone (no
        small one packed) kept them (2 MB a refused command, for an hour, outside the
        store's limit: a command refused again and again could fill the disk)."""
        self._buffer.clear()
        if not self._committed:  # the large blobs are this pack's alone
            for digest, made in self._blobs:
                self._store.forget_blob(digest, made)
        self._blobs = []
        self._entries = {}  # a commit after this stores nothing
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            with contextlib.suppress(OSError):
                os.unlink(self._temp, dir_fd=self._dir)


def _read_index(dir_fd: int, name: str) -> list[tuple[str, int, int]]:
    """A pack's index: (digest, offset, size) per line; ValueError if malformed (or not a
    regular file: a FIFO under an index's name hung every start's prune on its open)."""
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        out = []
        for line in f.read().decode("ascii").splitlines():
            digest, offset, size = line.split(" ")
            if not _DIGEST.match(digest):
                raise ValueError(digest)
            out.append((digest, int(offset), int(size)))
        return out


def _regular_size(fd: int, store: CheckpointStore, what: str, name: str) -> int:
    """The size of the stored file open at ``fd``; damaged unless it is a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise store._damaged_file(what, name, "not a regular file")
    return st.st_size


def _open_store(path: str, *, create: bool) -> int | None:
    """The store directory (outside every root), made 0700 if missing and ``create``."""
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _subdir(fd: int, name: str) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=fd)
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    """Write all of ``data``; on an error no view of it is left (its buffer can be cleared)."""
    with memoryview(data) as whole:
        done = 0
        while done < len(whole):
            done += os.write(fd, whole[done:])


def _size_of(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def _write_atomic(dir_fd: int, name: str, data: bytes, *, sync: bool) -> None:
    temp = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
