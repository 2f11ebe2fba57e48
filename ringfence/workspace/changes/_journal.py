"""The write journal: an operation that writes the workspace says so first; a killed one is rolled back.

Every operation that writes the workspace through the store — a shell
command's merge, ``undo``, ``apply_changes`` (``plan apply``), a checkpointed
``write_file``/``edit_file`` — appends ``B <set id>`` to its store's journal
before anything of it is written (its change set's manifest included), and
``E <set id>`` after its last write and the manifest's final form. The set's
manifest holds every before-image, so the journal itself is two short lines. An
undo of several sets is one operation (:meth:`Journal.grouped`): each set's ``B``
line as it begins, and one ``E <id> <id> …`` line after the last, so a kill
anywhere in it has every set rolled back, never the last alone.

Each :class:`~._store.CheckpointStore` object writes one journal file of
its own, ``<store>/journal/<pid>-<random>.log``, held with an exclusive
``flock`` while it lives (made as ``.<pid>-<random>.new`` and renamed once locked, so
recovery never sees it unlocked): a file nobody holds belongs to a process that is
gone (a lock dies with its process, whatever killed it). Appends go to an
open descriptor (no file made per operation): a killed process cannot lose
them; against power loss they are fsynced when the store's writes are
(``RINGFENCE_CHECKPOINTS_FSYNC=1``).

Writers of one workspace take turns: an operation holds the store's ``writer.lock``
(``flock``) from its ``B`` line to its ``E`` line, as a recovery does while it rolls back,
so two ringfence processes never interleave their writes (an undo's put-back of its first
file after a second process undid the same set left it half undone). Threads of one store
object share its turn; another process waits for it, at most :data:`TURN_WAIT_SECONDS`,
then is ``unavailable`` with nothing written.

:func:`recover` (every store's start, ``ringfence recover``) reads each journal
nobody holds. A set begun and not ended is **rolled back** (several: newest first),
the same for every operation: each of its changes, newest first, whose path holds the after-image
gets its before-image back (``merge_changes``' own writer); a path in neither
state is left and reported. A manifest is data read back from the store: each
change a rollback would make is judged by the merge's own rules first (no git
metadata, no link leaving the roots, no special file or set-id bit, only the
physical path the set names, never through a link planted on it since), and
one refused is left and reported with its reason, never written. Then the ``.ringfence-*.tmp`` files ringfence's
writers leave are removed from the directories the set touched, and the set's
record is made true: a shell command's set is kept as ``staged`` (what it wrote
is not lost: ``apply_changes`` merges it again), as is an MCP server's; a file
tool's, an undo's or an apply's is dropped (its write did not happen, or is undone). The journal file goes last.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...runtime._errors import RingfenceError, ToolTimeout, Unavailable
from .._deadline import Deadline, current_deadline
from .._writelock import writing

if TYPE_CHECKING:
    from ._store import CheckpointStore

__all__ = ["Journal", "Recovery", "in_flight_anywhere", "pending", "recover"]

# A journal this long with nothing in flight starts again empty (its lines are spent).
_RESET_BYTES = 1 << 20
_NAME = re.compile(r"[0-9]+-[0-9a-f]{12}\.log\Z")
_MAKING = re.compile(r"\.[0-9]+-[0-9a-f]{12}\.new\Z")  # a journal file not yet locked and named
_SET_ID = re.compile(r"[0-9a-f]{1,64}\Z")
# Sets whose content lives on elsewhere (the call's arguments, the set undone or applied):
# rolled back, they are dropped; any other set (a shell command's, an MCP server's) is kept.
_REDONE_BY_THEIR_CALLER = frozenset({"write_file", "edit_file", "undo", "apply_changes"})
_TURN = "writer.lock"  # held by the one process writing the workspace (see the docstring)
# How long an operation waits for another process's to end before it is refused.
TURN_WAIT_SECONDS = 60.0
# How long a start waits for a live writer's operation before it leaves a dead one's rollback
# to the next writer's turn (:func:`recover`).
START_WAIT_SECONDS = 5.0


class Journal:
    """One store object's journal file (made on its first operation). Thread-safe."""

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._fd = -1
        self._name = ""
        self._open_ops = 0
        self._turn_fd = -1
        self._turns = 0  # operations and recoveries of this object holding the turn
        self._begun: dict[str, int] = {}  # each open operation's B line: where it starts

    def _file(self) -> int:
        """The journal file, made locked: it is made under a name recovery does not read
        (``.<pid>-<random>.new``), locked, and only then renamed to its ``.log`` name. Made
        under that name at once, a recovery starting in between found it unlocked and empty
        and removed it, and this process wrote its ``B`` lines into a file nobody would read
        after a kill (the half-merged set never rolled back)."""
        if self._fd < 0:
            self._store.note_identity()  # found again if the workspace moves (_recover_moved)
            dir_fd = self._store._journal_fd
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            for _ in range(8):
                stem = f"{os.getpid()}-{secrets.token_hex(6)}"
                fd = os.open(f".{stem}.new", flags, 0o600, dir_fd=dir_fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.rename(f".{stem}.new", f"{stem}.log", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except FileNotFoundError:  # a recovery removed it as a killed process's: again
                    os.close(fd)
                    continue
                except BaseException:
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        os.unlink(f".{stem}.new", dir_fd=dir_fd)
                    raise
                self._fd, self._name = fd, f"{stem}.log"
                break
            else:
                raise OSError(errno.EAGAIN, "the journal file kept being removed as it was made")
        return self._fd

    def _append(self, line: bytes, *, sync: bool) -> int:
        """Append ``line`` whole (caller holds ``_lock``); where it starts in the file.

        A file system that fills midway writes part of it and says so by the count alone
        (a line across a page boundary on a full tmpfs or ext4): the part is cut off again
        and the write is ``ENOSPC``, never half a line that joins the next one into a line no
        version can read."""
        fd = self._file()
        written = os.write(fd, line)  # O_APPEND: at the end, whatever else appended
        end = os.lseek(fd, 0, os.SEEK_CUR)
        if written < len(line):
            os.ftruncate(fd, end - written)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if sync or self._store.retention.fsync:
            os.fsync(fd)
        return end - written

    def _take_turn(self) -> None:
        """Hold the workspace's writer lock (caller holds ``_lock``); see the docstring.

        Waits for another process's operation to end (polled: a clock jump cannot stretch
        it, ``monotonic``), at most :data:`TURN_WAIT_SECONDS`."""
        if self._turns == 0:
            if self._turn_fd < 0:
                flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                # Beside the journal directory (whose listing is the journals alone).
                try:
                    self._turn_fd = os.open(
                        f"../{_TURN}", flags, 0o600, dir_fd=self._store._sets_fd
                    )
                except OSError as exc:  # a full store, a link or worse planted there
                    full = self._store.full(exc)
                    if isinstance(full, RingfenceError):
                        raise full from None
                    raise Unavailable(
                        f"cannot open the workspace's writer lock {self._store.path}/{_TURN} "
                        f"({exc.strerror or exc}): nothing was changed; remove it if it is "
                        "not a plain file",
                    ) from None
            deadline = time.monotonic() + TURN_WAIT_SECONDS
            pause = 0.002
            while True:
                try:
                    fcntl.flock(self._turn_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        "another ringfence process has been writing this workspace for "
                        f"{TURN_WAIT_SECONDS:g} s (it holds {self._store.path}/{_TURN}); "
                        "writers of one workspace take turns, so nothing was changed: try "
                        "again when it is done",
                        busy=True,
                    )
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        self._turns += 1

    def _give_turn(self) -> None:
        """Let go of the writer lock when this object's last holder is done (``_lock`` held)."""
        self._turns -= 1
        if self._turns == 0 and self._turn_fd >= 0:
            fcntl.flock(self._turn_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """The workspace's writer lock around a block (a recovery's rollbacks)."""
        with self._lock:
            self._take_turn()
        try:
            yield
        finally:
            with self._lock:
                self._give_turn()

    def begin(self, set_id: str, *, sync: bool = False) -> None:
        """Before the operation's first write (its manifest's first save included); takes
        the workspace's writer turn, held until :meth:`end`.

        A full file system under the store is ``unavailable`` naming it (nothing of the
        operation is written yet), like every other write of the store's."""
        line = f"B {set_id}\n".encode()
        with self._lock:
            self._take_turn()
            try:
                self._begun[set_id] = self._append(line, sync=sync)
            except OSError as exc:
                self._give_turn()
                raise self._store.full(exc, len(line)) from None
            except BaseException:
                self._give_turn()
                raise
            self._open_ops += 1

    def end(self, *set_ids: str) -> None:
        """After its last write and its manifest's final form (or after it failed cleanly).

        Several ids: the operations of one group (:meth:`grouped`), ended by one line
        ``E <id> <id> …``: a line counts only once its newline is written, so a kill as it
        is written ends all of them or none (separate lines, cut between two by the kill,
        left a multi-set undo half rolled back).

        On a file system that filled since the ``B`` line the ``E`` line may not fit: the
        ``B`` line is then taken back instead, which needs no new space (the file cut
        there when no other operation of this object is open, every line after it spent;
        else its ``B`` overwritten in place by an ``E``). Before, the operation, done and
        recorded, answered "failed: OSError: [Errno 28]" (an ``undo`` that had undone),
        and its journal still named it in flight. Only when that fails too is the
        operation left in flight, said as ``unavailable``: the next start rolls it back."""
        if not set_ids:
            return
        with self._lock:
            offsets = [self._begun.pop(set_id, None) for set_id in set_ids]
            try:
                self._append(f"E {' '.join(set_ids)}\n".encode(), sync=False)
            except OSError as exc:
                if not self._take_back(offsets):
                    for _ in set_ids:
                        self._give_turn()  # still open: the journal is kept past close()
                    raise Unavailable(
                        f"the operation writing change set {set_ids[-1]} is done, but the "
                        f"journal of {self._store.path} could not record its end "
                        f"({exc.strerror or exc}): the next start of this workspace rolls "
                        "it back; free space there",
                        rolling_back=set_ids[-1],
                    ) from None
            self._open_ops -= len(set_ids)
            for _ in set_ids:
                self._give_turn()
            if self._open_ops == 0 and os.fstat(self._fd).st_size > _RESET_BYTES:
                os.ftruncate(self._fd, 0)  # every line in it is spent

    def _take_back(self, offsets: list[int | None]) -> bool:
        """Undo the ``B`` lines at ``offsets`` without new space (see :meth:`end`; caller
        holds ``_lock``); False when it cannot. Several (a group) only by one cut of the
        file, when they are the only operations open: overwritten one by one, a kill
        between two would end some of the group and leave the rest in flight."""
        if not offsets or None in offsets:
            return False
        try:
            if self._open_ops == len(offsets):  # only these: every line after the first is spent
                os.ftruncate(self._fd, min(o for o in offsets if o is not None))
                return True
            if len(offsets) > 1:
                return False
            # Not through the O_APPEND descriptor: Linux appends a pwrite there.
            fd = os.open(
                self._name,
                os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=self._store._journal_fd,
            )
            try:
                return os.pwrite(fd, b"E", offsets[0]) == 1  # type: ignore[arg-type]
            finally:
                os.close(fd)
        except OSError:
            return False

    @contextlib.contextmanager
    def grouped(self) -> Iterator[list[str]]:
        """Operations begun inside the block (``writing(…, group=ids)``) end together, with
        one line, when the block ends: until then all stay in flight, so a kill anywhere in
        the block has the next start roll every one back, newest first (``undo --last N``,
        several ids: the sets undone before the kill stayed undone, the tree neither before
        nor after). A block ending in a merge's ``half_written`` error ends none of them:
        the next start rolls them all back. The caller holds the writers' lock
        (:func:`~.._writelock.writing`) across the block: the journal's turn is held
        throughout, and the writers' lock is taken before it, never after."""
        ids: list[str] = []
        try:
            yield ids
        except RingfenceError as exc:
            if not exc.details.get("half_written"):
                self.end(*ids)
            raise
        except BaseException:
            self.end(*ids)
            raise
        else:
            self.end(*ids)

    @contextlib.contextmanager
    def writing(
        self, set_id: str, *, sync: bool = False, group: list[str] | None = None
    ) -> Iterator[None]:
        """``begin`` … ``end`` around an operation (``end`` also when it raises), unless it
        raises a merge's ``half_written`` error: the workspace is then part-way, and the set
        stays open (its journal file kept past :meth:`close`) for the next start to roll back.
        ``group`` (from :meth:`grouped`): its end is left to the group's."""
        self.begin(set_id, sync=sync)
        finish = group.append if group is not None else self.end
        try:
            yield
        except RingfenceError as exc:
            if exc.details.get("half_written"):
                raise  # no E: still in flight, as a killed process would have left it
            finish(set_id)
            raise
        except BaseException:
            finish(set_id)
            raise
        else:
            finish(set_id)

    def close(self) -> None:
        """Remove the journal (nothing in flight) and let go of it and of the writer lock.
        Idempotent."""
        with self._lock:
            if self._turn_fd >= 0:
                os.close(self._turn_fd)  # a set still open is the next start's to roll back
                self._turn_fd, self._turns = -1, 0
            if self._fd < 0:
                return
            if self._open_ops == 0:
                with contextlib.suppress(OSError):
                    os.unlink(self._name, dir_fd=self._store._journal_fd)
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover` did: per set rolled back, its id, how many changes were undone,
    the paths left in neither state, and what became of its record (``staged``, ``dropped``)."""

    sets: tuple[dict[str, Any], ...] = field(default=())
    journals: int = 0
    # Journals with lines this version cannot read (another version's, or damaged): kept,
    # each named with its first such lines, at every start until a person looks.
    unreadable: tuple[dict[str, Any], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"journals": self.journals, "sets": list(self.sets)}
        if self.unreadable:
            out["unreadable"] = list(self.unreadable)
        return out


def _unheld(dir_fd: int, pattern: re.Pattern[str] = _NAME) -> Iterator[tuple[str, int]]:
    """The journal files nobody holds, each opened and locked (the caller closes it).

    One that is no longer in the directory once locked was recovered (and removed) by
    another process meanwhile: passed over, never rolled back a second time."""
    for name in sorted(os.listdir(dir_fd)):
        if not pattern.match(name):
            continue
        try:
            # Non-blocking: a FIFO planted under a journal's name must not hang every start.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                continue  # a live process's
            raise
        if os.fstat(fd).st_nlink == 0:
            os.close(fd)
            continue  # recovered by another process since it was listed
        yield name, fd


def _in_flight(fd: int) -> list[str]:
    return _read(fd)[0]


def _read(fd: int) -> tuple[list[str], list[str]]:
    """(the sets begun and not ended, in the order begun; the lines that are neither
    ``B <id>`` nor ``E <id> …``).

    A last line without its newline is a write cut short (power loss): its operation had
    not begun. Any other line this version cannot read (a journal of another version, a
    damaged one) may hide an operation in flight: returned, so the journal is kept and
    named rather than removed as if nothing were in it."""
    begun: dict[str, None] = {}
    bad: list[str] = []
    with os.fdopen(os.dup(fd), "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1]:
        lines.pop()  # cut short: no newline yet
    for raw in lines:
        if not raw:
            continue
        line = raw.decode("ascii", "replace")
        kind, _, rest = line.partition(" ")
        ids = rest.split(" ")
        if kind not in ("B", "E") or not all(_SET_ID.match(i) for i in ids):
            bad.append(line[:200])
        elif kind == "B" and len(ids) == 1:
            begun[ids[0]] = None
        elif kind == "E":  # one id, or a group's (Journal.grouped): all end at once
            for set_id in ids:
                begun.pop(set_id, None)
        else:
            bad.append(line[:200])
    return list(begun), bad


def in_flight_anywhere(store: CheckpointStore) -> set[str]:
    """Every set some journal has begun and not ended, held by a live process or not.

    Retention must never drop one: its manifest is what a rollback of that operation reads
    (a merge in flight in another session, a dead process's set another recovery is rolling
    back) and, for a live merge, the only record of what it writes. Read without a lock (a
    journal only grows, by whole short lines, or is emptied with nothing in flight); a file
    under a journal's name that is not a plain file holds no writer's lines."""
    dir_fd = store.journal_fd_if_any()
    if dir_fd is None:
        return set()
    out: set[str] = set()
    for name in os.listdir(dir_fd):
        if not _NAME.match(name):
            continue
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError:
            continue  # removed since it was listed: its operations are over
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                out.update(_read(fd)[0])
        finally:
            os.close(fd)
    return out


def pending(store: CheckpointStore) -> list[str]:
    """The sets a dead process left in flight (what :func:`recover` would roll back)."""
    dir_fd = store.journal_fd_if_any()
    if dir_fd is None:
        return []
    out: list[str] = []
    for _, fd in _unheld(dir_fd):
        try:
            out += _in_flight(fd)
        finally:
            os.close(fd)
    return out


def recover(store: CheckpointStore) -> Recovery:
    """Roll back every operation a dead process left in flight (see the module docstring)."""
    dir_fd = store.journal_fd_if_any()
    if dir_fd is None:
        return Recovery()
    for name, fd in _unheld(dir_fd, _MAKING):  # killed before it was named: it holds nothing
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        os.close(fd)
    # A dead journal is taken (locked) only under the writers' lock: a recovery that locked
    # it first and the writers' lock after held it in between with no turn, and another
    # process's start passed it over as a live one's while its write, taking the writers'
    # lock first, wrote the half-merged tree. Asked without a lock first (any journal naming
    # a set in flight, a live one's too), so a start with nothing to roll back waits for no one.
    if not in_flight_anywhere(store):
        return _recover(store, dir_fd, locked=False)
    try:
        # A start waits for a live writer's operation at most START_WAIT_SECONDS (a writer
        # already holding the lock, whose turn this is, does not wait): past it, what is
        # dead is left to the next writer, which rolls it back under its lock first.
        waited = current_deadline() is None
        limit = Deadline(time.monotonic() + START_WAIT_SECONDS, START_WAIT_SECONDS, "recovery")
        with limit.active() if waited else contextlib.nullcontext():
            lock = writing(store.workspace._resolver)
            lock.__enter__()
    except ToolTimeout:
        return _recover(store, dir_fd, locked=False)
    try:
        with store.journal.turn():
            return _recover(store, dir_fd, locked=True)
    finally:
        lock.__exit__(None, None, None)


def _recover(store: CheckpointStore, dir_fd: int, *, locked: bool) -> Recovery:
    """:func:`recover`'s pass over the journals nobody holds; ``locked``: under the writers'
    lock and this store's turn. Unlocked, a journal naming a set in flight (a writer that
    died since the look without a lock) is left for the next writer, which recovers under
    its lock (:meth:`CheckpointStore._recover_dead`), or the next start."""
    done: list[dict[str, Any]] = []
    unreadable: list[dict[str, Any]] = []
    journals = 0
    for name, fd in _unheld(dir_fd):
        try:
            in_flight, bad = _read(fd)
            if in_flight:
                if not locked:
                    continue
                # Newest first: the sets of one group (an undo of several) were written
                # in that order, each over the tree the one before it left.
                for set_id in reversed(in_flight):
                    done.append(_roll_back(store, set_id))
            journals += 1
            if bad:  # kept: what it holds may be an operation this version cannot see
                unreadable.append({
                    "journal": f"{store.path}/journal/{name}",
                    "lines": bad[:3],
                    "message": "this journal has lines this version of ringfence cannot read "
                    "(written by another version, or damaged): it may name an operation "
                    "left half-written; it is kept, and named at every start, until it is "
                    "read by the version that wrote it or removed by hand",
                })  # fmt: skip
                continue
            os.unlink(name, dir_fd=dir_fd)  # last: a recovery killed midway is done again
        finally:
            os.close(fd)
    return Recovery(tuple(done), journals, tuple(unreadable))


def _roll_back(store: CheckpointStore, set_id: str) -> dict[str, Any]:
    from ._merge import roll_back  # the guarded writer, loaded by the first recovery

    try:
        cs = store.load(set_id)
    except RingfenceError as exc:  # never saved (killed before its manifest), or damaged
        record = "damaged" if exc.details.get("damaged") else "none"
        out = {"id": set_id, "undone": 0, "left": [], "refused": [], "record": record}
        return {**out, "message": exc.message} if record == "damaged" else out
    try:
        undone, left, refused = roll_back(store.workspace, cs.changes, store)
    except RingfenceError as exc:  # a full file system, most often: said as what it is
        raise exc.with_(
            message=f"ringfence could not roll back change set {set_id}, which a killed or "
            f"failed write left half-written in the workspace: {exc.message}; nothing else "
            "runs in this workspace until it can (free space there, or fix that path, then "
            "any start, or `ringfence recover`, tries again)",
            details={**exc.details, "rolling_back": set_id},
        ) from exc.__cause__
    if cs.staged:
        record = "staged"
    elif cs.tool in _REDONE_BY_THEIR_CALLER:
        store.drop(cs.id)  # its write did not happen, or is undone: a call to make again
        record = "dropped"
    else:  # a command's or a server's writes, which exist nowhere else now: kept
        store.save(replace(cs, staged=True))  # apply_changes can merge it again
        record = "staged"
    return {"id": set_id, "undone": undone, "left": left, "refused": refused, "record": record}
