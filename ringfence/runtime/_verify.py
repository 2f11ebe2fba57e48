"""Verifying an event stream: the chain, the sessions' signatures, and every call's decision.

:func:`verify_chain` and :func:`verify_file` are what ``ringfence events
verify`` runs; what they prove with only the public key, and what they do
not, is in :mod:`._events`' docstring (the writer and the verifier agree on
one record format, defined there).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ._canonical import arguments_digest, canonical_json, digest, loads
from ._events import (
    CHECKPOINT_CONTEXT,
    GENESIS,
    OUTCOME_KINDS,
    encode_record,
)
from ._intents import check_intent, key_fingerprint, load_public_keys
from ._lines import BoundedLines, Oversize
from ._redact import MARKER

__all__ = ["ChainReport", "UnsealedSession", "verify_chain", "verify_file"]


@dataclass(frozen=True)
class UnsealedSession:
    """A session that has no seal: killed or crashed, or (the file's last) still being written.

    Lines are 1-based. ``proven_through`` is the last line a verified checkpoint
    of the session vouches for (with every line before it), ``None`` when none
    does; ``unproven`` is what follows it up to ``last_line``: consistent with
    the chain, but not proven written by the session's key. ``next_session_line``
    is where the session that followed it begins (``None``: it is the file's last).
    """

    line: int
    last_line: int
    next_session_line: int | None
    proven_through: int | None

    @property
    def unproven(self) -> tuple[int, int] | None:
        first = (self.proven_through if self.proven_through is not None else self.line - 1) + 1
        return (first, self.last_line) if first <= self.last_line else None

    def to_dict(self) -> dict[str, Any]:
        unproven = self.unproven
        return {
            "line": self.line,
            "last_line": self.last_line,
            "next_session_line": self.next_session_line,
            "proven_through": self.proven_through,
            "unauthenticated_lines": list(unproven) if unproven is not None else None,
        }


@dataclass(frozen=True)
class ChainReport:
    """What :func:`verify_chain` found. ``ok`` is true only when ``problems`` is empty.

    ``problems`` holds everything that fails verification under the options
    given: the evidence of tampering (``tampering``: a record edited, removed
    or out of place, a signature that does not verify, a call without its
    decision), and, unless open sessions are accepted, each session without a
    seal. ``unsealed`` describes every session without a seal (see
    :class:`UnsealedSession`), whether or not it was accepted.

    ``problems`` keeps the first :data:`MAX_PROBLEMS`, each cut to head…tail past
    :data:`MAX_PROBLEM_CHARS`; ``problems_not_kept`` counts the rest (``ok`` is false
    and ``tampered`` true whenever one of them is tampering).

    ``session_keys`` holds the fingerprint (:func:`ringfence.runtime._intents.key_fingerprint`)
    of each session's key, in file order. ``unsealed_sessions`` counts the
    sessions without a seal, accepted ones included.
    ``unauthenticated`` is the (first, last) line range of the last unsealed
    session that no checkpoint vouches for: those records are consistent, but
    nothing proves the session's key wrote them (see the module docstring).
    """

    ok: bool
    records: int
    sealed_sessions: int
    unsealed_sessions: int
    problems: tuple[str, ...]
    session_keys: tuple[str, ...] = ()
    unauthenticated: tuple[int, int] | None = None
    tampering: tuple[str, ...] = ()
    unsealed: tuple[UnsealedSession, ...] = ()
    problems_not_kept: int = 0
    tampering_found: bool = False

    @property
    def tampered(self) -> bool:
        """Whether anything is wrong beyond sessions that lack a seal."""
        return bool(self.tampering) or self.tampering_found

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


# ``verify_file`` reads this much at a time, and holds one line of at most MAX_LINE_BYTES
# (the review page's bound too): a longer line is named as not a record, never held whole.
READ_CHUNK_BYTES = 4 << 20
MAX_LINE_BYTES = 256 << 20

# A report keeps the first MAX_PROBLEMS problems, each at most MAX_PROBLEM_CHARS (a record's
# values are quoted in them), and counts the rest: a 15 MB file of 5 million lines that are no
# records held 5 million messages (850 MB; 2 GB and 279 MB of output with --json).
MAX_PROBLEMS = 1000
MAX_PROBLEM_CHARS = 400

# What the writer appends to the hashed canonical body: the hash, last, and nothing after it.
_HASH_TAIL = re.compile(rb',"hash":"([0-9a-f]{64})"\}\Z')


@dataclass
class _Call:
    """What the check keeps of a call until its session ends: the proposed arguments as
    their two digests and whether they were redacted, never the parsed value (which holds
    many times its JSON: until 2026-12-07 a session's open calls of lists of empty objects
    held 24 times the stream's bytes, and the review page verifying 48 MiB took 1 GB more)."""

    tool: Any
    # (arguments_digest, digest) of the proposed arguments: either encoding counts.
    digests: tuple[str, str]
    # A registered secret's text was replaced in them (they no longer hash to the digest).
    redacted: bool
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
        self.problems_not_kept = 0
        self.tampered = False
        # The problems that are evidence of tampering (all but the missing seals).
        self.tampering: list[str] = []
        self.unsealed: list[UnsealedSession] = []
        self.prev: str | None = GENESIS
        self.count = self.sealed = self.unsealed_count = 0
        self.session: _Session | None = None
        self.keys: list[str] = []
        # The lines (first, last) of an unsealed session that no checkpoint covers.
        self.tail: tuple[int, int] | None = None

    def problem(self, lineno: int, text: str) -> None:
        self.tampered = True
        self.note(f"line {lineno}: {text}", tampering=True)

    def note(self, text: str, *, tampering: bool) -> None:
        """Keep a problem: the first :data:`MAX_PROBLEMS`, each at most
        :data:`MAX_PROBLEM_CHARS` (head…tail and its size); the rest are counted."""
        if len(self.problems) >= MAX_PROBLEMS:
            self.problems_not_kept += 1
            return
        if len(text) > MAX_PROBLEM_CHARS:
            keep = MAX_PROBLEM_CHARS // 2
            text = f"{text[:keep]}…{text[-keep:]} ({len(text):,} characters)"
        self.problems.append(text)
        if tampering:
            self.tampering.append(text)

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
            record = loads(body, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        except _DuplicateKey as exc:
            self.problem(lineno, f"duplicate key {exc} in the record (readers may disagree)")
            record = None
        except ValueError:
            self.problem(lineno, "not a ringfence event record")
            record = None
        if not isinstance(record, dict):
            self.prev = claimed
            return
        try:
            writable: bool | None = body in (encode_record(record), canonical_json(record))
        except ValueError:
            # ``1e999`` (infinite) or an escaped lone surrogate: JSON that parses, and that no
            # writer writes (orjson writes null; a lone surrogate is escaped first). Neither
            # form could be made to compare, and the ValueError left `events verify` blaming
            # its --public-key with no verdict, the review page with no integrity line.
            writable = None
        if writable is None:
            self.problem(lineno, "record holds a value no event writer writes (an infinite "
                         "number or a lone surrogate): it was not written by ringfence")  # fmt: skip
        elif not writable:
            self.problem(lineno, "record is not in the canonical form it was hashed in")
        if self.prev is not None and record.get("prev") != self.prev:
            self.problem(lineno, "chain broken (prev does not match line before)")
        self.prev = claimed
        if writable is not None:  # its values are not read as a call's: it is no record
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
            arguments = record.get("arguments")
            session.calls[call_id] = _Call(
                record.get("tool"),
                (arguments_digest(arguments), digest(arguments)),
                MARKER in json.dumps(arguments),
            )
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
        # Either encoding counts: orjson's (this writer) or canonical JSON (older logs).
        # A digest that holds the marker had a registered secret's text in its hex digits.
        redacted = call.redacted or MARKER in str(claimed)
        if not redacted and claimed not in call.digests:
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
        """End an unsealed session: at a later session's start, or at the end of the file.

        Either way the session is reported (:class:`UnsealedSession`), not called
        tampering: a process killed mid-session leaves exactly this, and whatever
        a checkpoint covered is still checked record by record (a removed or
        edited covered record breaks the chain or a signature). Unless open
        sessions are accepted, it is also a problem: the log is not proven whole.
        """
        session, self.session = self.session, None
        if session is None:
            return
        self.unsealed_count += 1
        ended = UnsealedSession(
            line=session.line,
            last_line=max(session.last, session.line),
            next_session_line=lineno,
            proven_through=session.authenticated,
        )
        self.unsealed.append(ended)
        if ended.unproven is not None:
            self.tail = ended.unproven
        if self.allow_open:
            return
        if lineno is not None:
            text = (
                f"session ended without a seal before the session at line {lineno} began "
                "(the process was killed or crashed, or its end was cut off): verify with "
                "--allow-open to accept sessions that ended without a seal"
            )
        else:
            text = (
                "session is not sealed (truncated, or still being written: "
                "verify with --allow-open to accept an open last session)"
            )
        self.note(f"line {session.line}: {text}", tampering=False)

    def report(self) -> ChainReport:
        return ChainReport(
            not self.problems and not self.problems_not_kept,
            self.count,
            self.sealed,
            self.unsealed_count,
            tuple(self.problems),
            tuple(self.keys),
            self.tail,
            tuple(self.tampering),
            tuple(self.unsealed),
            self.problems_not_kept,
            self.tampered,
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

    A session without a seal is reported in ``unsealed`` with the lines after
    its last verified checkpoint (its unproven tail), never as tampering: the
    file's last one may still be being written, an earlier one ended when its
    process was killed or crashed and the next run appended to the file.
    ``allow_open`` accepts them (and an unterminated last line); without it
    each is a problem, as the log is not proven whole. A record a checkpoint
    or seal covers that was removed or edited, or a tail cut off before the
    next session began, is tampering either way: the chain breaks, or the
    signatures over it (the next session's included) no longer verify.
    Raises ValueError for unreadable keys.
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

    A last line without its newline was cut mid-write (a writer killed as it appended,
    or one still writing): a problem unless ``allow_open`` (then it is skipped as not yet
    written), and never tampering: it was checked as a record, so a session killed
    mid-append made its log ``TAMPERED`` ("not a ringfence event record"), where a kill
    between two appends leaves it ``NOT SEALED``. Raises OSError
    when the file cannot be read. The file is read :data:`READ_CHUNK_BYTES` at a time
    and one line at most :data:`MAX_LINE_BYTES` is held (a longer one is not a record):
    reading it whole held twice the file (a 3 GB log, 6 GB).
    """
    with open(path, "rb") as f:
        splitter = BoundedLines(MAX_LINE_BYTES)
        count = 0
        partial: bytes | Oversize | None = None

        def lines() -> Iterator[bytes]:
            nonlocal count, partial
            while chunk := f.read(READ_CHUNK_BYTES):
                for line in splitter.feed(chunk):
                    count += 1
                    yield line if isinstance(line, bytes) else b""
            partial = splitter.end()
            if partial is not None:
                count += 1  # not a record (cut before its newline): named below, never checked

        report = verify_chain(lines(), public_keys, allow_open=allow_open)
    if partial is None or allow_open:
        return report
    problem = f"line {count}: the last line has no newline (cut mid-write)"
    # Not tampering: a writer that stopped mid-line (a full disk), or one still writing.
    return dataclasses.replace(report, ok=False, problems=(*report.problems, problem))
