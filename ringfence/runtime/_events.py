"""The event stream: one JSON line per step, hash-chained, redacted.

Each record carries ``prev`` (the hash of the record before it) and ``hash``
(SHA-256 over its own canonical form, ``prev`` included), so editing,
inserting or deleting a line breaks the chain at that point. A chain that is
rewritten whole from some line on is still self-consistent; the kernel
therefore opens each session with a ``session_started`` record that carries
its Ed25519 public key and closes it with a ``session_sealed`` record whose
signature covers the head of the chain. Pin the public key (``--public-key``)
to detect a rewrite that also replaced the key.

Verification (:func:`verify_chain`) hashes the exact bytes of each line, so a
line that parses to the same record but reads differently (a duplicate key,
other spacing) is caught; it refuses a ``started`` record without an intent
signed by the session key, and an unsealed session unless the caller accepts
an open log (``--allow-open``).

Writing: each record is encoded once (orjson, sorted keys: the same bytes as
:func:`canonical_json` except that floats are written in their shortest form,
``0.00001`` for ``1e-05``; the verifier accepts either form), hashed, and
handed to the sink. :class:`FileSink` buffers a call's records and writes them
with one ``write`` at the call's end (its outcome), before a person is asked,
for every record outside a call, and every :data:`FLUSH_RECORDS` records: a
crash loses at most the unflushed records of the calls in flight, which
verification then reports as an open (unsealed) session. ``FileSink(sync=True)``
(``--events-sync``) writes and fsyncs every record instead.

Non-guarantees: a truncation that removes the seal and everything after some
point leaves a valid prefix, which verifies only with ``allow_open``; without
pinned keys, a log rewritten whole under a new key verifies; arguments that
were redacted in the record cannot be matched to the signed argument digest.
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

from ._canonical import canonical_json, digest
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
    "posture_changed",
    "proposed",
    "decided",
    "approval_asked",
    "approval_answered",
    "started",
}


# A FileSink writes at the latest after this many buffered records (a call's streamed output).
FLUSH_RECORDS = 64
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
        self._buffer: list[str] = []
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
        if self._fd is None:
            raise RuntimeError(f"event file {self.path} is closed")
        self._buffer.append(line)
        if self.sync or len(self._buffer) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Write the buffered lines with one append (and fsync when ``sync``)."""
        if not self._buffer or self._fd is None:
            return
        data = ("\n".join(self._buffer) + "\n").encode("utf-8")
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

    def __init__(self, sink: EventSink, redactor: Redactor) -> None:
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

    @property
    def head(self) -> str:
        return self._prev

    @property
    def closed(self) -> bool:
        return self._closed

    def emit(self, kind: str, trace_id: str | None = None, /, **data: Any) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("the event log is closed")
        clash = RECORD_FIELDS.intersection(data)
        if clash:
            raise ValueError(
                f"event {kind!r}: {', '.join(sorted(clash))} is a field every record has; "
                "name the data otherwise"
            )
        record: dict[str, Any] = {
            "seq": self._seq,
            "ts": time.time_ns() // 1000 / 1e6,  # microseconds, as round(…, 6) but cheaper
            "kind": kind,
            "trace_id": trace_id,
            **self._redactor.redact_value(data),
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
        self._sink.write(body[:-1].decode("utf-8") + f',"hash":"{h}"}}')
        self._prev = h
        self._seq += 1
        # A call's own records wait for its outcome; everything else is written now.
        if kind not in _BUFFERED_KINDS or "call_id" not in data:
            self.flush()
        return record

    def flush(self) -> None:
        """Hand buffered records to the file now (sinks without a buffer: nothing to do)."""
        flush = getattr(self._sink, "flush", None)
        if flush is not None:
            flush()

    def seal(self, sign: Callable[[bytes], bytes]) -> None:
        """Write a ``session_sealed`` record signing the chain head, then close."""
        if self._closed:
            return
        self.emit("session_sealed", signature=base64.b64encode(sign(self._prev.encode())).decode())
        self._closed = True
        self._sink.close()


@dataclass(frozen=True)
class ChainReport:
    """What :func:`verify_chain` found. ``ok`` is true only when ``problems`` is empty.

    ``session_keys`` holds the fingerprint (:func:`ringfence.runtime.key_fingerprint`)
    of each session's key, in file order. ``unsealed_sessions`` counts the
    sessions without a seal, an allowed open last session included.
    """

    ok: bool
    records: int
    sealed_sessions: int
    unsealed_sessions: int
    problems: tuple[str, ...]
    session_keys: tuple[str, ...] = ()


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
    answer: Any = None
    started: int | None = None
    outcome: str | None = None


@dataclass
class _Session:
    line: int
    key: Ed25519PublicKey | None
    calls: dict[str, _Call] = field(default_factory=dict)
    nonces: set[str] = field(default_factory=set)


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
        if kind == "session_sealed":
            self.seal(lineno, record, session)
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
            call.verdict, call.rule = record.get("verdict"), record.get("rule")
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
            self.problem(lineno, f"the call's signed intent does not verify: {why}")

    def why_not_allowed(self, record: dict[str, Any], call: _Call, session: _Session) -> str | None:
        """Why this ``started`` record is not proven allowed by the session's Gate, or None."""
        if session.key is None:
            return "the session has no readable key"
        intent = record.get("intent")
        # Redacted arguments no longer hash to the signed digest; then only tool and
        # decision are checked (the intent still proves the Gate allowed *a* call).
        arguments = call.arguments
        known = digest(arguments) if MARKER not in json.dumps(arguments) else None
        why = check_intent(session.key, intent, tool=str(call.tool), arguments_sha256=known)
        if why is not None:
            return why
        assert isinstance(intent, dict)  # check_intent refuses anything else
        if intent["nonce"] in session.nonces:
            return "its nonce was already used by another call (replayed intent)"
        session.nonces.add(intent["nonce"])
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
        try:
            if session.key is None:
                raise InvalidSignature
            session.key.verify(base64.b64decode(record["signature"]), record["prev"].encode())
        except (InvalidSignature, KeyError, ValueError, TypeError, AttributeError):
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
        )


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
    verifies with the session's key; records outside a session are refused.
    Every ``started`` record must carry an intent signed by the session's key
    for that tool (and, unless redacted, those arguments), used once, and
    consistent with the recorded decision (and approval); every started call
    in a sealed session must end in exactly one outcome.

    ``public_keys``: PEM text (one or several keys) or several such texts.
    When given, each session's key must be one of them (records are still
    checked against the session's own key). Without it a log rewritten whole
    with a new key verifies: pin keys to detect that.

    ``allow_open`` accepts an unsealed *last* session (a log still being
    written) and an unterminated last line; an unsealed session followed by
    another is always a problem. Raises ValueError for unreadable keys.
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
    )
