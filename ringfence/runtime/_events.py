"""The event stream: one JSON line per step, hash-chained, redacted, signed at checkpoints.

Each record carries ``prev`` (the hash of the record before it) and ``hash``
(SHA-256 over its own canonical form, ``prev`` included), so editing,
inserting or deleting a line breaks the chain at that point. A chain that is
rewritten whole from some line on is still self-consistent; the kernel
therefore opens each session with a ``session_started`` record that carries
its Ed25519 public key, signs the chain head in ``chain_checkpoint`` records (every
:data:`CHECKPOINT_RECORDS` records or :data:`CHECKPOINT_SECONDS`, whichever
comes first, at the next flush point; a kernel entered with ``async with``
also signs a tail left idle that long) and closes it with a
``session_sealed`` record whose signature covers the final head. A verified
checkpoint or seal vouches for every record of the session before it. Pin
the public key (``--public-key``) to detect a rewrite that also replaced the
key.

Guarantees (:func:`verify_chain`, ``ringfence events verify``), with only the
public key: every record up to the last verified checkpoint or the seal is
the one the session wrote (hashes over the exact bytes of each line, so a
line that parses the same but reads differently, a duplicate key or other
spacing, is caught); every ``started`` record matches an allowed ``decided``
record earlier in the same session (same call id, tool and argument digest,
not refused; an ``ask`` resolved by a grant or a recorded approval); every
call that started in a sealed session ended once. A session without a seal
(its process killed, then another run appending to the same file; or a log
still being written) is reported as such, with its unauthenticated tail, and
is not tampering: it fails unless the caller accepts open sessions
(``--allow-open``). A record a checkpoint covers, removed or edited, is
tampering either way, and so is a tail cut off before the next session began
(the next session's signatures cover the chain through it).

Not guaranteed: the records of an unsealed session after its last checkpoint
(a crash, or a log still being written) are an *unauthenticated tail*: they
are checked for consistency, and reported with their line range, but anyone
who could write the file before the next session began could have written
them. A truncation that removes the seal and the records after the last
checkpoint leaves a valid prefix, which verifies only with ``allow_open``. Without
pinned keys, a log rewritten whole under a new key verifies. Arguments that
were redacted in the record are matched by the decision's digest only. The
per-call intents are not signed (an HMAC under an in-memory key redeems them
in process, see ``_intents``): a ``started`` record is proven by the
checkpoint after it, not by itself.

Writing: each record is encoded once (orjson, sorted keys: the same bytes as
:func:`canonical_json` except that floats are written in their shortest form,
``0.00001`` for ``1e-05``; the verifier accepts either form), hashed, and
handed to the sink. :class:`FileSink` buffers a call's records and writes them
with one ``write`` at the call's end (its outcome), before a person is asked,
at each checkpoint, for every record outside a call, and every
:data:`FLUSH_RECORDS` records: a crash loses at most the unflushed records of
the calls in flight and the seal, which verification then reports as a session
without a seal. ``FileSink(sync=True)`` (``--events-sync``) writes and fsyncs every
record instead.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from ._canonical import canonical_json, loads
from ._errors import Unavailable, Unwritable
from ._output import escape_surrogates
from ._redact import Redactor

__all__ = [
    "GENESIS",
    "KERNEL_KINDS",
    "OUTCOME_KINDS",
    "RECORD_FIELDS",
    "EventLog",
    "EventSink",
    "FileSink",
    "MemorySink",
]

GENESIS = "0" * 64
# Fields the log itself writes into every record; event data cannot use them.
RECORD_FIELDS = frozenset({"seq", "ts", "kind", "trace_id", "prev", "hash"})
# The kinds that close a call: every call that started ends in exactly one of them.
OUTCOME_KINDS = frozenset({"finished", "failed", "cancelled", "staged"})
# The kinds only the kernel writes (a tool's CallContext.emit cannot use them).
KERNEL_KINDS = OUTCOME_KINDS | {
    "session_started",
    "session_sealed",
    "chain_checkpoint",
    "posture_changed",
    "proposed",
    "decided",
    "approval_asked",
    "approval_answered",
    "started",
    "hook_added",
    "hook_ran",
    "skill_added",
}


# A FileSink writes at the latest after this many buffered records (a call's streamed output).
FLUSH_RECORDS = 64
# The session key signs the chain head at the first flush point (a call's end, a record
# outside a call) after this many records or this long since the oldest unsigned record,
# and a kernel entered with `async with` signs a tail left idle that long. One signature
# costs 30-60 µs here: every 256 records (64 no-op calls) is under 1 µs a call, and a
# crash leaves at most a quarter second (or 256 records) of the log unauthenticated.
CHECKPOINT_RECORDS = 256
CHECKPOINT_SECONDS = 0.25
# What a checkpoint signs before the head, so a checkpoint's signature is never a seal's.
CHECKPOINT_CONTEXT = b"ringfence checkpoint\0"
# Records of a call written while the call goes on: buffered until its outcome (or an ask).
_BUFFERED_KINDS = frozenset({"proposed", "decided", "started", "approval_answered"})
_SORTED = orjson.OPT_SORT_KEYS
# How long a session waits for another session's hold of its event file (FileSink).
EVENT_FILE_WAIT_SECONDS = 30.0


def encode_record(record: dict[str, Any]) -> bytes:
    """The record's one written form: sorted keys, no whitespace, UTF-8.

    orjson where it can (NaN and infinities become ``null``); what it refuses
    (a lone surrogate, a non-string key, an integer beyond 64 bits) goes to
    :func:`canonical_json`, which raises UnicodeEncodeError for a lone surrogate.
    """
    try:
        return orjson.dumps(record, option=_SORTED)
    except (orjson.JSONEncodeError, TypeError):
        return canonical_json(record)


def _escape_strings(value: Any) -> Any:
    """``value`` with lone surrogates escaped in every string, keys included."""
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, dict):
        return {_escape_strings(k): _escape_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escape_strings(v) for v in value]
    return value


class EventSink(Protocol):
    """Where finished event lines go. ``write`` gets one line without the newline."""

    def write(self, line: str) -> None: ...
    def close(self) -> None: ...


@dataclass
class MemorySink:
    lines: list[str] = field(default_factory=list)

    def write(self, line: str) -> None:
        self.lines.append(line)

    def close(self) -> None:
        pass

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]


class FileSink:
    """Appends JSON lines to a file (0600), continuing an existing chain.

    Lines are buffered until :meth:`flush` (the event log decides when, see the
    module docstring) and written with one O_APPEND ``write``: whole lines
    only, so a crash never leaves half a record for the next writer to glue
    onto. ``sync=True`` writes and fsyncs each line as it comes.
    """

    def __init__(self, path: str | os.PathLike[str], *, sync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.sync = sync
        self._buffer: list[bytes] = []
        self._fd: int | None = self._open_alone()

    def _open_alone(self) -> int:
        """The event file, opened for appending and held with an exclusive ``flock`` for
        as long as this sink lives: one session writes a file at a time.

        A session chains each record onto the one it wrote before, so two sessions
        appending to one file at once (two ``ringfence call --events log.jsonl`` run side
        by side, two clients launching one stdio server) interleaved two chains, and
        ``events verify`` called the log ``TAMPERED`` ("record outside a session", a
        broken chain) though nobody had touched it. Another session's file is waited for
        at most :data:`EVENT_FILE_WAIT_SECONDS`, then ``unavailable``, naming it. A file
        moved away (or replaced) while this one waited is let go and the path opened
        again: the records go where the path now leads."""
        deadline = time.monotonic() + EVENT_FILE_WAIT_SECONDS
        pause = 0.002
        # Read and write: its last record is read through this descriptor (last_record).
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        while True:
            fd = os.open(self.path, flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        f"another ringfence session is writing the event file {self.path} "
                        f"(it has held it for {EVENT_FILE_WAIT_SECONDS:g} s): one session "
                        "appends to an event file at a time, since two at once would "
                        "interleave their chains; give each session a file of its own, or "
                        "try again when it ends",
                        field="events",
                        busy=True,
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                continue
            try:
                held, now = os.fstat(fd), os.stat(self.path)
            except FileNotFoundError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                return fd
            os.close(fd)  # moved away while it was waited for: the path's file now

    def last_record(self) -> dict[str, Any] | None:
        if self._fd is None:
            return None
        try:
            # Through the held descriptor: the file this sink appends to, whatever the path
            # leads to now.
            with open(os.dup(self._fd), "rb", closefd=True) as f:
                f.seek(0)
                last = b""
                for line in f:
                    if line.strip():
                        last = line
        except FileNotFoundError:
            return None
        if not last:
            return None
        try:
            record = loads(last)
            if not last.endswith(b"\n") or not isinstance(record, dict):
                raise ValueError("no record")
            if not isinstance(record.get("hash"), str) or not isinstance(record.get("seq"), int):
                raise ValueError("no hash or seq to continue from")
        except ValueError:
            # Appending would chain onto a record that is not one: fail closed, say why.
            raise Unwritable(
                f"the event file {self.path} does not end with a whole event record "
                "(cut mid-write, or not an event file); check it with `ringfence events "
                "verify`, then move it away",
                field="events",
            ) from None
        return record

    def write(self, line: str) -> None:
        self.write_bytes(line.encode("utf-8"))

    def write_bytes(self, line: bytes) -> None:
        """:meth:`write` of a line already encoded (UTF-8, no newline): the log's fast path."""
        if self._fd is None:
            raise RuntimeError(f"event file {self.path} is closed")
        self._buffer.append(line)
        if self.sync or len(self._buffer) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Write the buffered lines with one append (and fsync when ``sync``).

        A write that fails midway (a full file system takes part of it, then ``ENOSPC``)
        is cut back to where it began and its lines kept for the next flush: the file
        holds whole records only. Before, the part written stayed: ``events verify``
        called the log ``TAMPERED`` (a line that is no record, without its newline) and
        every later session refused to append to it."""
        if not self._buffer or self._fd is None:
            return
        lines = self._buffer
        self._buffer = []
        data = b"\n".join([*lines, b""])  # the last line's newline too
        start = os.fstat(self._fd).st_size
        try:
            with memoryview(data) as whole:
                done = 0
                while done < len(whole):  # a short write is finished, not lost
                    done += os.write(self._fd, whole[done:])
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)  # whole records or none
            self._buffer = lines + self._buffer
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise Unavailable(
                    f"the file system holding the event file {self.path} is full: "
                    f"{len(lines)} record(s) of this session could not be written (kept to "
                    "be written at the next flush); free space there",
                    field="events",
                ) from None
            raise
        if self.sync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = None


class EventLog:
    """Builds chained, redacted records and hands them to a sink.

    Strings with lone surrogates (undecodable file-name bytes) are written in
    the escaped form of :func:`ringfence.runtime._output.escape_surrogates`, so any
    text can be recorded. Data keys that name the record's own fields
    (:data:`RECORD_FIELDS`) are refused with ValueError: they would overwrite
    them or put a second ``hash`` in the line.
    """

    def __init__(
        self,
        sink: EventSink,
        redactor: Redactor,
        *,
        signer: Callable[[bytes], bytes] | None = None,
        checkpoint_records: int = CHECKPOINT_RECORDS,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
    ) -> None:
        self._sink = sink
        self._redactor = redactor
        try:
            last = sink.last_record() if isinstance(sink, FileSink) else None
        except BaseException:
            sink.close()
            raise
        self._prev = last["hash"] if last else GENESIS
        self._seq = last["seq"] + 1 if last else 0
        self._closed = False
        self._signer = signer
        self._checkpoint_records = checkpoint_records
        self._checkpoint_seconds = checkpoint_seconds
        # Records written since the last checkpoint, and when the first of them was.
        self._unsigned = 0
        self._unsigned_since = 0.0
        # Whether the sink buffers (FileSink): else flushing is nothing to do.
        self._flush = getattr(sink, "flush", None)
        # Lines as bytes only where `write` is FileSink's own: a subclass that overrides it
        # (an observer) still sees every line through it.
        plain = isinstance(sink, FileSink) and type(sink).write is FileSink.write
        self._write_bytes = sink.write_bytes if plain else None

    @property
    def head(self) -> str:
        return self._prev

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def checkpoint_seconds(self) -> float:
        return self._checkpoint_seconds

    @property
    def unsigned_since(self) -> float | None:
        """``time.monotonic()`` of the oldest record no checkpoint covers yet, or None."""
        return self._unsigned_since if self._unsigned else None

    def emit(self, kind: str, trace_id: str | None = None, /, **data: Any) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("the event log is closed")
        if not RECORD_FIELDS.isdisjoint(data):
            clash = RECORD_FIELDS.intersection(data)
            raise ValueError(
                f"event {kind!r}: {', '.join(sorted(clash))} is a field every record has; "
                "name the data otherwise"
            )
        record = self._append(kind, trace_id, self._redactor.redact_value(data))
        # A call's own records wait for its outcome; everything else is written now.
        if kind not in _BUFFERED_KINDS or "call_id" not in data:
            self._flush_point()
        return record

    def _append(self, kind: str, trace_id: str | None, data: dict[str, Any]) -> dict[str, Any]:
        """Chain one (already redacted) record onto the head and hand its line to the sink."""
        record: dict[str, Any] = {
            "seq": self._seq,
            "ts": time.time_ns() // 1000 / 1e6,  # microseconds, as round(…, 6) but cheaper
            "kind": kind,
            "trace_id": trace_id,
            **data,
            "prev": self._prev,
        }
        try:
            body = encode_record(record)
        except UnicodeEncodeError:
            record = _escape_strings(record)
            body = encode_record(record)
        h = hashlib.sha256(body).hexdigest()
        record["hash"] = h
        # The line is the hashed form with the hash appended: one encoding per event.
        line = b"".join((body[:-1], b',"hash":"', h.encode(), b'"}'))
        if self._write_bytes is not None:
            self._write_bytes(line)
        else:
            self._sink.write(line.decode("utf-8"))
        self._prev = h
        self._seq += 1
        if not self._unsigned:
            self._unsigned_since = time.monotonic()
        self._unsigned += 1
        return record

    def _flush_point(self) -> None:
        """A call ended (or a record outside a call): checkpoint if one is due, then flush."""
        if self._signer is not None and (
            self._unsigned >= self._checkpoint_records
            or time.monotonic() - self._unsigned_since >= self._checkpoint_seconds
        ):
            self.checkpoint()
        elif self._flush is not None:
            self._flush()

    def checkpoint(self) -> None:
        """Sign the chain head now (a ``chain_checkpoint`` record) and flush, if anything is unsigned.

        The signature covers :data:`CHECKPOINT_CONTEXT` + the head hash, so it
        vouches for every record before it and cannot stand in for a seal.
        Without a signer (a log nobody signs): only the flush.
        """
        if self._signer is not None and self._unsigned and not self._closed:
            signature = self._signer(CHECKPOINT_CONTEXT + self._prev.encode())
            self._append(
                "chain_checkpoint",
                None,
                {"records": self._unsigned, "signature": base64.b64encode(signature).decode()},
            )
            self._unsigned = 0
        self.flush()

    def flush(self) -> None:
        """Hand buffered records to the file now (sinks without a buffer: nothing to do)."""
        if self._flush is not None:
            self._flush()

    def seal(self, sign: Callable[[bytes], bytes]) -> None:
        """Write a ``session_sealed`` record signing the chain head, then close."""
        if self._closed:
            return
        signature = base64.b64encode(sign(self._prev.encode())).decode()
        self._append("session_sealed", None, {"signature": signature})
        self._unsigned = 0
        self._closed = True
        self._sink.close()
