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
call that started in a sealed session ended once; an unsealed session fails
unless the caller accepts an open log (``--allow-open``).

Not guaranteed: the records of an unsealed session after its last checkpoint
(a crash, or a log still being written) are an *unauthenticated tail*: they
are checked for consistency, and reported with their line range, but anyone
who can write the file could have written them. A truncation that removes the
seal leaves a valid prefix, which verifies only with ``allow_open``. Without
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
the calls in flight, which verification then reports as an open (unsealed)
session. ``FileSink(sync=True)`` (``--events-sync``) writes and fsyncs every
record instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ._canonical import arguments_digest, canonical_json, digest
from ._caps import escape_surrogates
from ._errors import Unwritable
from ._intents import check_intent, key_fingerprint, load_public_keys
from ._redact import MARKER, Redactor

__all__ = [
    "GENESIS",
    "KERNEL_KINDS",
    "OUTCOME_KINDS",
    "RECORD_FIELDS",
    "ChainReport",
    "EventLog",
    "EventSink",
    "FileSink",
    "MemorySink",
    "verify_chain",
    "verify_file",
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
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )

    def last_record(self) -> dict[str, Any] | None:
        try:
            with open(self.path, "rb") as f:
                last = b""
                for line in f:
                    if line.strip():
                        last = line
        except FileNotFoundError:
            return None
        if not last:
            return None
        try:
            record = json.loads(last)
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
        """Write the buffered lines with one append (and fsync when ``sync``)."""
        if not self._buffer or self._fd is None:
            return
        self._buffer.append(b"")  # the last line's newline
        data = b"\n".join(self._buffer)
        self._buffer.clear()
        view = memoryview(data)
        while view:  # a regular file takes it whole; a short write is finished, not lost
            view = view[os.write(self._fd, view) :]
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
    the escaped form of :func:`ringfence.runtime.escape_surrogates`, so any
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


@dataclass(frozen=True)
class ChainReport:
    """What :func:`verify_chain` found. ``ok`` is true only when ``problems`` is empty.

    ``session_keys`` holds the fingerprint (:func:`ringfence.runtime.key_fingerprint`)
    of each session's key, in file order. ``unsealed_sessions`` counts the
    sessions without a seal, an allowed open last session included.
    ``unauthenticated`` is the (first, last) line range of an unsealed session
    that no checkpoint vouches for: those records are consistent, but nothing
    proves the session's key wrote them (see the module docstring).
    """

    ok: bool
    records: int
    sealed_sessions: int
    unsealed_sessions: int
    problems: tuple[str, ...]
    session_keys: tuple[str, ...] = ()
    unauthenticated: tuple[int, int] | None = None

    @property
    def unauthenticated_records(self) -> int:
        if self.unauthenticated is None:
            return 0
        return self.unauthenticated[1] - self.unauthenticated[0] + 1


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Two values for one key: readers disagree on which one counts (Python keeps the last,
    # others the first), so a record could read differently from what was hashed.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# What the writer appends to the hashed canonical body: the hash, last, and nothing after it.
_HASH_TAIL = re.compile(rb',"hash":"([0-9a-f]{64})"\}\Z')


@dataclass
class _Call:
    tool: Any
    arguments: Any
    verdict: Any = None
    rule: Any = None
    # The argument digest the Gate decided on (``decided``; absent in logs before checkpoints).
    arguments_sha256: Any = None
    answer: Any = None
    started: int | None = None
    outcome: str | None = None


@dataclass
class _Session:
    line: int
    key: Ed25519PublicKey | None
    calls: dict[str, _Call] = field(default_factory=dict)
    nonces: set[str] = field(default_factory=set)
    # The last line a verified checkpoint (or the seal) vouches for, with everything before it.
    authenticated: int | None = None
    last: int = 0


class _Verifier:
    """The state of one pass over a log; :func:`verify_chain` is its only user."""

    def __init__(self, pinned: list[Ed25519PublicKey] | None, allow_open: bool) -> None:
        self.pinned = {key_fingerprint(k) for k in pinned} if pinned is not None else None
        self.allow_open = allow_open
        self.problems: list[str] = []
        self.prev: str | None = GENESIS
        self.count = self.sealed = self.unsealed = 0
        self.session: _Session | None = None
        self.keys: list[str] = []
        # The lines (first, last) of an unsealed session that no checkpoint covers.
        self.tail: tuple[int, int] | None = None

    def problem(self, lineno: int, text: str) -> None:
        self.problems.append(f"line {lineno}: {text}")

    def line(self, lineno: int, raw: bytes) -> None:
        """Check one line, exactly as written (without its newline)."""
        self.count += 1
        tail = _HASH_TAIL.search(raw)
        if tail is None:
            self.problem(lineno, "not a ringfence event record")
            self.prev = None
            return
        claimed = tail.group(1).decode()
        # The hash covers the bytes on disk: the body as written, closed where the hash began.
        body = raw[: tail.start()] + b"}"
        if hashlib.sha256(body).hexdigest() != claimed:
            self.problem(lineno, "record was edited (hash mismatch)")
        try:
            record = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        except _DuplicateKey as exc:
            self.problem(lineno, f"duplicate key {exc} in the record (readers may disagree)")
            record = None
        except ValueError:
            self.problem(lineno, "not a ringfence event record")
            record = None
        if not isinstance(record, dict):
            self.prev = claimed
            return
        if body != encode_record(record) and body != canonical_json(record):
            self.problem(lineno, "record is not in the canonical form it was hashed in")
        if self.prev is not None and record.get("prev") != self.prev:
            self.problem(lineno, "chain broken (prev does not match line before)")
        self.prev = claimed
        self.record(lineno, record)

    def record(self, lineno: int, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind == "session_started":
            self.close_session(lineno)
            self.open_session(lineno, record)
            return
        session = self.session
        if session is None:
            self.problem(lineno, f"{kind!r} record outside a session")
            return
        session.last = lineno
        if kind == "session_sealed":
            self.seal(lineno, record, session)
            return
        if kind == "chain_checkpoint":
            self.checkpoint(lineno, record, session)
            return
        call_id = record.get("call_id")
        if kind == "proposed":
            if not isinstance(call_id, str) or call_id in session.calls:
                self.problem(lineno, f"call {call_id!r} proposed twice or without an id")
                return
            session.calls[call_id] = _Call(record.get("tool"), record.get("arguments"))
            return
        if kind not in ("decided", "approval_answered", "started", *OUTCOME_KINDS):
            return  # informational records (notice, output, …): the chain covers them
        call = session.calls.get(call_id) if isinstance(call_id, str) else None
        if call is None or record.get("tool") != call.tool:
            self.problem(lineno, f"{kind!r} record for call {call_id!r}, which was never proposed")
            return
        if call.outcome is not None:
            self.problem(lineno, f"{kind!r} record after call {call_id} ended ({call.outcome})")
            return
        if kind == "decided":
            if call.verdict is not None:
                self.problem(lineno, f"call {call_id} decided twice")
            call.verdict, call.rule = record.get("verdict"), record.get("rule")
            call.arguments_sha256 = record.get("arguments_sha256")
        elif kind == "approval_answered":
            call.answer = record.get("choice")
        elif kind == "started":
            self.started(lineno, record, call, session)
        else:
            if kind == "finished" and call.started is None:
                self.problem(lineno, f"call {call_id} finished but never started")
            call.outcome = kind

    def started(self, lineno: int, record: dict[str, Any], call: _Call, session: _Session) -> None:
        if call.started is not None:
            self.problem(lineno, f"call {record.get('call_id')} started twice")
        call.started = lineno
        why = self.why_not_allowed(record, call, session)
        if why is not None:
            self.problem(lineno, f"started without an allowed decision: {why}")

    def why_not_allowed(self, record: dict[str, Any], call: _Call, session: _Session) -> str | None:
        """Why this ``started`` record does not match an allowed ``decided`` record before it.

        The match, explicitly: the same call (``call_id``, found by the caller),
        a ``decided`` record earlier in this session's chain, the same tool, the
        same argument digest (the decision's, and the digest of the
        ``proposed`` arguments unless they were redacted), and a decision that
        allowed it: ``allow`` with the intent's rule, or ``ask`` resolved by a
        session grant or an approval recorded for this call. Whether the
        records themselves are authentic is the checkpoints' and the seal's
        business (see :meth:`checkpoint`).
        """
        intent = record.get("intent")
        if not isinstance(intent, dict):
            return "the record carries no intent"
        if call.verdict is None:
            return "no decision for this call before it started"
        if intent.get("tool") != call.tool:
            return f"the intent names {intent.get('tool')!r}, the call is {call.tool!r}"
        claimed = intent.get("arguments_sha256")
        if call.arguments_sha256 is not None and claimed != call.arguments_sha256:
            return "the intent's argument digest is not the one the Gate decided on"
        # Redacted arguments no longer hash to the digest; then the decision's digest counts.
        arguments = call.arguments
        # Either encoding counts: orjson's (this writer) or canonical JSON (older logs).
        # A digest that holds the marker had a registered secret's text in its hex digits.
        redacted = MARKER in json.dumps(arguments) or MARKER in str(claimed)
        if not redacted and claimed not in (
            arguments_digest(arguments),
            digest(arguments),
        ):
            return "the proposed arguments do not hash to the intent's argument digest"
        if intent.get("verdict") != "allow":
            return f"the intent does not allow the call (verdict {intent.get('verdict')!r})"
        if intent.get("signature"):  # an Ed25519-signed intent (older logs): check it too
            if session.key is None:
                return "the session has no readable key"
            why = check_intent(session.key, intent, tool=str(call.tool), arguments_sha256=claimed)
            if why is not None:
                return why
        nonce = intent.get("nonce")
        if not isinstance(nonce, str) or nonce in session.nonces:
            return "its nonce is missing or was already used by another call (replayed intent)"
        session.nonces.add(nonce)
        rule = intent.get("rule")
        if call.verdict == "allow" and rule == call.rule:
            return None
        if call.verdict == "ask" and (
            rule == "grant:session"
            or (
                rule in ("approved:once", "approved:session") and call.answer in ("once", "session")
            )
        ):
            return None
        return f"the Gate decided {call.verdict!r} ({call.rule}), the intent says {rule!r}"

    def checkpoint(self, lineno: int, record: dict[str, Any], session: _Session) -> None:
        """A ``chain_checkpoint``: the session key's signature over the chain head before it.

        When it verifies, every record of the session up to this line is
        authentic (the hash chain links them to the signed head).
        """
        if _signed_by(session.key, record, CHECKPOINT_CONTEXT):
            session.authenticated = lineno
        else:
            self.problem(lineno, "checkpoint signature does not verify")

    def open_session(self, lineno: int, record: dict[str, Any]) -> None:
        key: Ed25519PublicKey | None = None
        try:
            key = load_public_keys(str(record.get("public_key", "")))[0]
        except ValueError:
            self.problem(lineno, "session public key unreadable")
        if key is not None:
            fingerprint = key_fingerprint(key)
            self.keys.append(fingerprint)
            if self.pinned is not None and fingerprint not in self.pinned:
                self.problem(lineno, f"the session key {fingerprint} is not one of the pinned keys")
        self.session = _Session(lineno, key)

    def seal(self, lineno: int, record: dict[str, Any], session: _Session) -> None:
        if _signed_by(session.key, record, b""):
            session.authenticated = lineno
        else:
            self.problem(lineno, "seal signature does not verify")
        for call_id, call in session.calls.items():
            if call.started is not None and call.outcome is None:
                self.problem(call.started, f"call {call_id} ({call.tool}) started and never ended")
        self.sealed += 1
        self.session = None

    def close_session(self, lineno: int | None) -> None:
        """End an unsealed session: at a later session's start, or at the end of the file."""
        session, self.session = self.session, None
        if session is None:
            return
        self.unsealed += 1
        # What no checkpoint vouches for: the records after the last one (all, if none).
        first = (session.authenticated or session.line - 1) + 1
        last = max(session.last, session.line)
        if first <= last:
            self.tail = (first, last)
        if lineno is not None:
            self.problem(
                session.line,
                f"session is not sealed, yet another session begins at line {lineno} "
                "(a crash, or records removed)",
            )
        elif not self.allow_open:
            self.problem(
                session.line,
                "session is not sealed (truncated, or still being written: "
                "verify with --allow-open to accept an open last session)",
            )

    def report(self) -> ChainReport:
        return ChainReport(
            not self.problems,
            self.count,
            self.sealed,
            self.unsealed,
            tuple(self.problems),
            tuple(self.keys),
            self.tail,
        )


def _signed_by(key: Ed25519PublicKey | None, record: dict[str, Any], context: bytes) -> bool:
    """Whether ``record["signature"]`` is ``key``'s over ``context`` + ``record["prev"]``."""
    try:
        if key is None:
            return False
        key.verify(base64.b64decode(record["signature"]), context + record["prev"].encode())
    except (InvalidSignature, KeyError, ValueError, TypeError, AttributeError):
        return False
    return True


def _public_keys(public_keys: str | Iterable[str] | None) -> list[Ed25519PublicKey] | None:
    if public_keys is None:
        return None
    texts = [public_keys] if isinstance(public_keys, str) else list(public_keys)
    return [key for text in texts for key in load_public_keys(text)]


def verify_chain(
    lines: Iterable[str | bytes],
    public_keys: str | Iterable[str] | None = None,
    *,
    allow_open: bool = False,
) -> ChainReport:
    """Check a whole log: every line, link, call and session. Each item of ``lines`` is one line.

    A line is checked as the exact bytes written (a ``str`` is taken as its
    UTF-8 encoding; one trailing newline is ignored): the hash must match
    those bytes, the record must be in canonical form with no duplicate key,
    and its ``prev`` must name the line before. Each session must open with
    ``session_started`` and close with a ``session_sealed`` whose signature
    verifies with the session's key, and every ``chain_checkpoint`` must verify
    with it too; records outside a session are refused. Every ``started``
    record must match an allowed ``decided`` record of the same call earlier
    in the session (:meth:`_Verifier.why_not_allowed`: tool, argument digest,
    verdict, approval; its intent's nonce used once; an Ed25519 signature on
    it, as older logs have, must verify); every started call in a sealed
    session must end in exactly one outcome.

    ``public_keys``: PEM text (one or several keys) or several such texts.
    When given, each session's key must be one of them (records are still
    checked against the session's own key). Without it a log rewritten whole
    with a new key verifies: pin keys to detect that.

    ``allow_open`` accepts an unsealed *last* session (a log still being
    written) and an unterminated last line; the report's ``unauthenticated``
    names the lines of that session after its last verified checkpoint. An
    unsealed session followed by another is always a problem. Raises
    ValueError for unreadable keys.
    """
    verifier = _Verifier(_public_keys(public_keys), allow_open)
    for lineno, line in enumerate(lines, start=1):
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "backslashreplace")
        verifier.line(lineno, raw[:-1] if raw.endswith(b"\n") else raw)
    verifier.close_session(None)
    return verifier.report()


def verify_file(
    path: str | os.PathLike[str],
    public_keys: str | Iterable[str] | None = None,
    *,
    allow_open: bool = False,
) -> ChainReport:
    """:func:`verify_chain` over a file's lines as bytes.

    A last line without its newline was cut mid-write: a problem unless
    ``allow_open`` (then it is skipped as not yet written). Raises OSError
    when the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    partial = lines.pop()  # b"" when the file ends with a newline, as the writer leaves it
    if partial and allow_open:
        partial = b""
    report = verify_chain(
        lines + ([partial] if partial else []), public_keys, allow_open=allow_open
    )
    if not partial:
        return report
    problem = f"line {len(lines) + 1}: the last line has no newline (cut mid-write)"
    return ChainReport(
        False,
        report.records,
        report.sealed_sessions,
        report.unsealed_sessions,
        (*report.problems, problem),
        report.session_keys,
        report.unauthenticated,
    )
