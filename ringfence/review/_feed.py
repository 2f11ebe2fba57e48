"""The event stream the page shows: its lines, their fold, and whether the chain holds.

An :class:`EventFeed` collects the lines of one stream, exactly as written:

- a live kernel's (:meth:`EventFeed.__call__` is an event observer: the
  kernel hands it each line as its sink writes it, from any thread; the lines
  already in the kernel's event file are read first, by
  :meth:`EventFeed.read_existing`, so the feed holds what the file will);
- or a file another process writes (:meth:`EventFeed.tail`, polled).

Adding a line only appends it (the kernel's path pays a list append and, once
per batch, a wake-up); the page folds new lines into its :class:`Timeline`
when it reads (:meth:`EventFeed.timeline`). :meth:`EventFeed.watch_integrity`
verifies the whole chain again (``verify_chain`` with ``allow_open``, in a
worker thread, at most once per :data:`VERIFY_EVERY_SECONDS`) whenever lines
were added, and keeps the verdict as an :class:`Integrity`.

Bounded: the feed holds at most :data:`MAX_HELD_BYTES` of lines, each line
counted as its bytes plus :data:`LINE_COST` (what holding and folding a line
costs beyond its bytes: its object, its slot, at most one call's row), so many
short lines cost what they take. Past that
it drops the oldest lines (down to three quarters of the limit, so the fold of
what is left is redone rarely) and counts them (:attr:`EventFeed.dropped`); a
line longer than :data:`MAX_LINE_BYTES` is held as a stand-in, never its bytes
(:attr:`EventFeed.clipped`). Until 2026-12-07 a line counted its bytes alone: 64 MiB
of 22-byte records was 3 million calls folded (2 GB of the page's memory, a minute of
its thread), and blank lines counted nothing, held however many came. A file is read :data:`READ_CHUNK_BYTES` at a time.
The page says what it does not hold. Once it holds less than the whole stream,
the chain is verified from the file, line by line, not from memory, up to
:data:`MAX_VERIFIED_FILE_BYTES` (the check itself keeps a session's calls); a
larger file, or a stream with no file (a session's in memory), is shown as
``partial``, saying why and how to verify it whole.

Not promised: a watched file rewritten in place at the same size between two
polls is not noticed by the tail (its chain is verified from the file's lines
as read; the next verification of a grown file reads them again).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import trio

from ..runtime._lines import BoundedLines, Oversize
from ..runtime._timeline import Timeline
from ..runtime._verify import verify_chain

__all__ = ["EventFeed", "Integrity"]

VERIFY_EVERY_SECONDS = 1.0
TAIL_EVERY_SECONDS = 0.25
MAX_SHOWN_PROBLEMS = 20
FOLD_SLICE = 2_000
# What the page holds of a stream: the newest lines, this many bytes at most (older ones are
# dropped, counted, and said so); a line over MAX_LINE_BYTES is never held (a stand-in is).
MAX_HELD_BYTES = 64 << 20
MAX_LINE_BYTES = 4 << 20
# What a held line counts beyond its bytes: its bytes object and list slot, and what its
# fold keeps besides texts of its own bytes (at most one call's row, session's or set's).
LINE_COST = 512
# A file is read this much at a time (the rest at the next step), never whole.
READ_CHUNK_BYTES = 4 << 20
# Verifying a file line by line: a line over this is a problem, not read into memory whole.
MAX_VERIFIED_LINE_BYTES = 256 << 20
# The largest file the page verifies once it holds less than the whole stream: the check keeps
# every call of a session (tool, arguments) until it ends, so its memory grows with the file.
# Larger: the page says so, and `ringfence events verify FILE` checks it.
MAX_VERIFIED_FILE_BYTES = 2 * MAX_HELD_BYTES
# The deepest a record the page folds may nest (orjson's encoder's own bound, which
# :func:`_record` asks): deeper is shown as not a record.
MAX_RECORD_NESTING = 254


@dataclass(frozen=True)
class Integrity:
    """The chain's state as the page shows it.

    ``state``: ``empty``, ``checking``, ``partial`` (not verifiable whole: ``why``),
    ``intact`` (every session sealed and verified), ``open`` (consistent; the last session not sealed yet, or it
    ended without a seal: ``unauthenticated`` names its lines no checkpoint
    vouches for) or ``tampered`` (``problems`` name the lines).
    """

    state: str
    records: int = 0
    sealed_sessions: int = 0
    unsealed_sessions: int = 0
    problems: tuple[str, ...] = ()
    more_problems: int = 0
    unauthenticated: tuple[int, int] | None = None
    checked_at: float = 0.0
    # Why the chain could not be verified whole (state ``partial``): the page dropped lines of
    # a stream that has no file to read them again from.
    why: str = ""
    # The fingerprint of each session's key, in file order (``ChainReport.session_keys``):
    # "intact" proves each session signed by its own key, not whose key that is.
    keys: tuple[str, ...] = ()


class EventFeed:
    """One stream's lines (see the module docstring). ``label`` says where they come from."""

    def __init__(self, label: str, *, live: bool, path: Path | None = None) -> None:
        self.label = label
        self.live = live  # a kernel in this process writes it (else a file we watch)
        self.path = path  # the file to follow when not live
        self.next_observer: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._lines: list[bytes | None] = []  # None: a line over MAX_LINE_BYTES (not held)
        self._held = 0  # what _lines costs: each line's bytes and LINE_COST (_cost)
        self._folded = 0
        self._refold = False  # lines were dropped: fold the held ones again, from the first
        self.dropped = 0  # the oldest lines no longer held (line numbers 1..dropped)
        self.dropped_bytes = 0
        self.clipped = 0  # lines over MAX_LINE_BYTES, held as a stand-in
        self.source: Path | None = path  # the file the lines are in, to verify them from
        self._timeline = Timeline()
        self.version = 0
        self.integrity = Integrity("empty")
        self._token: trio.lowlevel.TrioToken | None = None
        self._changed = trio.Event()
        self._wake_pending = False
        self._listeners: list[Callable[[], None]] = []
        self.replaced = 0  # how often a watched file shrank or was replaced (read again)
        # Why the watched file cannot be followed now (a directory or a pipe in its place, no
        # permission); None while it can. What was read stays shown.
        self.unreadable: str | None = None

    # -- lines in ----------------------------------------------------------------------

    def __call__(self, line: str) -> None:
        """The event observer: the kernel's sink wrote ``line`` (any thread)."""
        if self.next_observer is not None:
            self.next_observer(line)
        data = line.encode("utf-8", "surrogateescape")
        self._add([data if len(data) <= MAX_LINE_BYTES else None])

    def close(self) -> None:
        close = getattr(self.next_observer, "close", None)
        if close is not None:
            close()

    def read_existing(self, path: str | os.PathLike[str]) -> None:
        """The whole lines already in ``path`` (missing: none), before a kernel appends.

        Read a chunk at a time, so what is held stays within MAX_HELD_BYTES."""
        self.source = Path(path)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            return
        splitter = BoundedLines(MAX_LINE_BYTES)
        with f:
            while chunk := f.read(READ_CHUNK_BYTES):
                self._add(_held(splitter.feed(chunk)))
        # a cut last line (left in the splitter) is not a record yet

    def _add_chunk(self, splitter: BoundedLines, data: bytes) -> None:
        """The lines ``data`` completes, added (any thread)."""
        self._add(_held(splitter.feed(data)))

    def _add(self, lines: list[bytes | None]) -> None:
        if not lines:
            return
        with self._lock:
            self._lines.extend(lines)
            self._held += _costs(lines)
            self.clipped += sum(1 for line in lines if line is None)
            if self._held > MAX_HELD_BYTES:
                self._drop_oldest()
            self.version += 1
            schedule = self._token is not None and not self._wake_pending
            if schedule:
                self._wake_pending = True
        if schedule:
            assert self._token is not None
            with contextlib.suppress(trio.RunFinishedError):  # the page's run is over
                self._token.run_sync_soon(self._wake)

    def _drop_oldest(self) -> None:
        """Drop the oldest lines down to 3/4 of MAX_HELD_BYTES (under the lock)."""
        keep = MAX_HELD_BYTES * 3 // 4
        # No more than keep // LINE_COST lines fit in keep: the older ones go at once (a
        # chunk of millions of blank lines is not walked one by one), then one by one.
        cut = max(0, len(self._lines) - keep // LINE_COST)
        freed = _costs(self._lines[:cut])
        while self._held - freed > keep and cut < len(self._lines):
            freed += _costs(self._lines[cut : cut + 1])
            cut += 1
        del self._lines[:cut]
        self._held -= freed
        self.dropped += cut
        self.dropped_bytes += freed - cut * LINE_COST
        self._folded = 0
        self._refold = True

    def _wake(self) -> None:
        with self._lock:
            self._wake_pending = False
        self._changed.set()
        self._changed = trio.Event()
        for listener in list(self._listeners):
            listener()

    def attach(self) -> None:
        """Start waking the page (call from the trio thread that serves it)."""
        self._token = trio.lowlevel.current_trio_token()

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    async def changed(self) -> None:
        """Return at the next batch of lines."""
        await self._changed.wait()

    # -- lines out ---------------------------------------------------------------------

    @property
    def line_count(self) -> int:
        """Lines read so far (those dropped included)."""
        return self.dropped + len(self._lines)

    @property
    def held_bytes(self) -> int:
        return self._held

    @property
    def partial(self) -> bool:
        """Whether the page holds less than the whole stream (lines dropped or clipped)."""
        return bool(self.dropped or self.clipped)

    def timeline(self) -> Timeline:
        """The fold of every line so far (new lines folded now; the trio thread only)."""
        self._fold(None)
        return self._timeline

    def _fold(self, limit: int | None) -> bool:
        """Fold up to ``limit`` new lines (all: None); whether lines are left to fold."""
        with self._lock:
            if self._refold:  # the oldest lines were dropped: so go their calls
                self._refold = False
                self._timeline = Timeline()
            start = self._folded
            end = len(self._lines) if limit is None else min(len(self._lines), start + limit)
            pending = self._lines[start:end]
            self._folded = end
            left = end < len(self._lines)
            first = self.dropped + start + 1  # line numbers count the dropped lines
        add = self._timeline.add
        for offset, raw in enumerate(pending, first):
            if raw is None:  # over MAX_LINE_BYTES: not held, shown as not a record
                add(None, offset)
                continue
            try:
                record = _record(raw)
            except orjson.JSONDecodeError:
                if not raw.strip():
                    continue
                record = None  # not a record: the integrity check names its line
            add(record, offset)
        return left

    async def fold_as_lines_come(self) -> None:
        """Fold new lines in the background, a slice at a time, so a view finds them folded."""
        while True:
            while self._fold(FOLD_SLICE):
                await trio.sleep(0)  # let requests through between slices
            await self.changed()

    def _snapshot(self) -> list[bytes | None]:
        with self._lock:
            return list(self._lines)

    # -- the chain -----------------------------------------------------------------------

    async def watch_integrity(self) -> None:
        """Verify the chain after every change, at most once per VERIFY_EVERY_SECONDS."""
        checked = -1
        while True:
            if self.version == checked:
                await self.changed()
            checked = self.version
            started = trio.current_time()
            if not self.partial:
                lines = self._snapshot()
                if not lines:
                    self.integrity = Integrity("empty")
                else:
                    if self.integrity.state == "empty":
                        self.integrity = Integrity("checking")
                    self.integrity = await trio.to_thread.run_sync(_verify, lines)
            elif self.source is None:
                self.integrity = Integrity(
                    "partial",
                    why=f"the page holds only the newest {MAX_HELD_BYTES >> 20} MiB of this "
                    "stream, which has no file: it cannot be verified whole",
                )
            else:
                self.integrity = await self._verify_file(self.source)
            self._notify()
            # a whole file read again costs: wait at least twice as long as that took
            await trio.sleep(max(VERIFY_EVERY_SECONDS, 2 * (trio.current_time() - started)))

    async def _verify_file(self, source: Path) -> Integrity:
        """The chain of ``source`` checked line by line, or why not (too large, unreadable)."""
        try:
            size = await trio.to_thread.run_sync(lambda: source.stat().st_size)
            if size > MAX_VERIFIED_FILE_BYTES:
                return Integrity(
                    "partial",
                    why=f"{source} holds {size:,} bytes, over the "
                    f"{MAX_VERIFIED_FILE_BYTES >> 20} MiB the page verifies: "
                    f"`ringfence events verify {source}` checks it whole",
                )
            return await trio.to_thread.run_sync(
                _verify, _file_lines(source), abandon_on_cancel=True
            )
        except OSError as exc:  # unreadable now (a watched file: the tail says so too)
            return Integrity("partial", why=f"{source} cannot be read now ({exc.strerror or exc})")

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    async def tail(self, path: str | os.PathLike[str]) -> None:
        """Follow ``path`` (another process appends to it): new whole lines as they come."""
        offset = 0
        identity: tuple[int, int] | None = None
        splitter = BoundedLines(MAX_LINE_BYTES)
        while True:
            try:
                read = await trio.to_thread.run_sync(_read_from, Path(path), offset, identity)
            except OSError as exc:
                if self.unreadable is None:
                    self.unreadable = f"{path} cannot be read now ({exc.strerror or exc})"
                    self._wake()
                await trio.sleep(TAIL_EVERY_SECONDS)
                continue
            if self.unreadable is not None:
                self.unreadable = None
                self._wake()
            if read is not None:
                new_identity, data, reset = read
                if reset:
                    with self._lock:
                        self._lines.clear()
                        self._held = self._folded = 0
                        self.dropped = self.dropped_bytes = self.clipped = 0
                        self._refold = False
                        self.version += 1
                    self._timeline = Timeline()
                    self.replaced += 1
                    splitter, offset = BoundedLines(MAX_LINE_BYTES), 0
                    if not data:
                        self._wake()
                identity = new_identity
                offset += len(data)
                # Split and counted in a worker thread (``_add`` is thread-safe): a chunk of
                # millions of short lines does not hold the page's loop meanwhile.
                await trio.to_thread.run_sync(self._add_chunk, splitter, data)
                if len(data) == READ_CHUNK_BYTES:
                    await trio.sleep(0)  # more to read: at once, letting requests through
                    continue
            await trio.sleep(TAIL_EVERY_SECONDS)


def _read_from(
    path: Path, offset: int, identity: tuple[int, int] | None
) -> tuple[tuple[int, int], bytes, bool] | None:
    """(identity, bytes from ``offset`` or from 0 when replaced, whether it was) or None.

    OSError when ``path`` is there but no regular file (a directory, or a pipe: opened
    without waiting for a writer, so no thread blocks on it) or cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        now = (st.st_dev, st.st_ino)
        reset = identity is not None and (now != identity or st.st_size < offset)
        start = 0 if reset else offset
        if st.st_size == start and not reset:
            return (now, b"", False) if identity is None else None
        f.seek(start)
        return now, f.read(READ_CHUNK_BYTES), reset


def _record(raw: bytes) -> object:
    """The record a line holds (orjson.JSONDecodeError when it holds none), or None when it
    nests deeper than :data:`MAX_RECORD_NESTING`: no record the kernel writes does (its
    arguments nest at most ``MAX_NESTING``), and every view draws a record's values with
    recursive encoders (``json.dumps``, ``repr``). Until 2026-12-07 a watched line of
    1,020 nested lists raised RecursionError in the fold and took the page down with its
    session (``ringfence review --watch`` exited with "unexpected error")."""
    record = orjson.loads(raw)
    if raw.count(b"[") + raw.count(b"{") > MAX_RECORD_NESTING:  # cheap: only then walk it
        try:
            orjson.dumps(record)  # refuses past MAX_RECORD_NESTING levels, in C
        except orjson.JSONEncodeError:
            return None
    return record


def _costs(lines: list[bytes | None]) -> int:
    """What held lines count against :data:`MAX_HELD_BYTES`: their bytes (a stand-in None:
    none) and :data:`LINE_COST` each; summed in C (millions of blank lines a chunk)."""
    return sum(map(len, filter(None, lines))) + LINE_COST * len(lines)


def _held(lines: list[bytes | Oversize]) -> list[bytes | None]:
    """Lines as the feed holds them: one over MAX_LINE_BYTES as None."""
    if Oversize not in map(type, lines):  # in C: the common case walks no line in Python
        return lines  # type: ignore[return-value]
    return [None if isinstance(line, Oversize) else line for line in lines]


def _file_lines(path: Path) -> Iterator[bytes]:
    """The whole lines of ``path``, one at a time (a line over MAX_VERIFIED_LINE_BYTES: b"",
    which the chain check names as not a record); a cut last line is not yet one."""
    with open(path, "rb") as f:
        splitter = BoundedLines(MAX_VERIFIED_LINE_BYTES)
        while chunk := f.read(READ_CHUNK_BYTES):
            for line in splitter.feed(chunk):
                yield b"" if isinstance(line, Oversize) else line


def _verify(lines: Iterable[bytes | None]) -> Integrity:
    report = verify_chain((line or b"" for line in lines), allow_open=True)
    problems = report.problems
    if problems:
        state = "tampered"
    elif report.unsealed_sessions:
        state = "open"
    else:
        state = "intact"
    return Integrity(
        state,
        report.records,
        report.sealed_sessions,
        report.unsealed_sessions,
        tuple(problems[:MAX_SHOWN_PROBLEMS]),
        max(0, len(problems) - MAX_SHOWN_PROBLEMS),
        report.unauthenticated,
        time.time(),
        keys=report.session_keys,
    )
