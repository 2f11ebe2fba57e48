"""The event stream: one JSON line per step, hash-chained, redacted.

Each record carries ``prev`` (the hash of the record before it) and ``hash``
(SHA-256 over its own canonical form, ``prev`` included), so editing,
inserting or deleting a line breaks the chain at that point. A chain that is
rewritten whole from some line on is still self-consistent; the kernel
therefore opens each session with a ``session_started`` record that carries
its Ed25519 public key and closes it with a ``session_sealed`` record whose
signature covers the head of the chain. Pin the public key (``--public-key``)
to detect a rewrite that also replaced the key.

Non-guarantee: a truncation that removes the seal and everything after some
point leaves a valid prefix; verify reports an unsealed session as such.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ._canonical import canonical_json
from ._intents import Intent
from ._redact import Redactor

__all__ = [
    "GENESIS",
    "ChainReport",
    "EventLog",
    "EventSink",
    "FileSink",
    "MemorySink",
    "verify_chain",
    "verify_file",
]

GENESIS = "0" * 64


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
    """Appends JSON lines to a file (0600), continuing an existing chain."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
        return json.loads(last) if last else None

    def write(self, line: str) -> None:
        # One unbuffered O_APPEND write per line: a crash never leaves half a record
        # in a buffer for the next writer to glue onto.
        if self._fd is None:
            raise RuntimeError(f"event file {self.path} is closed")
        os.write(self._fd, (line + "\n").encode("utf-8"))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class EventLog:
    """Builds chained, redacted records and hands them to a sink."""

    def __init__(self, sink: EventSink, redactor: Redactor) -> None:
        self._sink = sink
        self._redactor = redactor
        last = sink.last_record() if isinstance(sink, FileSink) else None
        self._prev = last["hash"] if last else GENESIS
        self._seq = last["seq"] + 1 if last else 0
        self._closed = False

    @property
    def head(self) -> str:
        return self._prev

    def emit(self, kind: str, trace_id: str | None = None, **data: Any) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("the event log is closed")
        record: dict[str, Any] = {
            "seq": self._seq,
            "ts": round(time.time(), 6),
            "kind": kind,
            "trace_id": trace_id,
            **self._redactor.redact_value(data),
            "prev": self._prev,
        }
        body = canonical_json(record)
        h = hashlib.sha256(body).hexdigest()
        record["hash"] = h
        # The line is the hashed canonical form with the hash appended: one encoding per event.
        self._sink.write(body[:-1].decode("utf-8") + f',"hash":"{h}"}}')
        self._prev = h
        self._seq += 1
        return record

    def seal(self, sign: Callable[[bytes], bytes]) -> None:
        """Write a ``session_sealed`` record signing the chain head, then close."""
        if self._closed:
            return
        self.emit("session_sealed", signature=base64.b64encode(sign(self._prev.encode())).decode())
        self._closed = True
        self._sink.close()


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    records: int
    sealed_sessions: int
    unsealed_sessions: int
    problems: tuple[str, ...]


def _load_key(pem: str) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(pem.encode())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def verify_chain(lines: Iterable[str], public_key_pem: str | None = None) -> ChainReport:
    """Check every link, every record hash, every call's signed intent and every session seal."""
    problems: list[str] = []
    prev = GENESIS
    count = sealed = opened = 0
    session_key: Ed25519PublicKey | None = _load_key(public_key_pem) if public_key_pem else None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        count += 1
        try:
            record = json.loads(line)
            claimed = record.pop("hash")
        except (ValueError, KeyError, AttributeError):
            problems.append(f"line {lineno}: not a ringfence event record")
            prev = None  # type: ignore[assignment]
            continue
        if prev is not None and record.get("prev") != prev:
            problems.append(f"line {lineno}: chain broken (prev does not match line before)")
        actual = hashlib.sha256(canonical_json(record)).hexdigest()
        if actual != claimed:
            problems.append(f"line {lineno}: record was edited (hash mismatch)")
        kind = record.get("kind")
        if kind == "session_started":
            opened += 1
            if public_key_pem is None:
                try:
                    session_key = _load_key(record.get("public_key", ""))
                except ValueError:
                    problems.append(f"line {lineno}: session public key unreadable")
                    session_key = None
        elif kind == "started" and record.get("intent") is not None:
            if not _intent_verifies(record, session_key):
                problems.append(f"line {lineno}: the call's signed intent does not verify")
        elif kind == "session_sealed":
            sealed += 1
            try:
                if session_key is None:
                    raise InvalidSignature
                session_key.verify(base64.b64decode(record["signature"]), record["prev"].encode())
            except (InvalidSignature, KeyError, ValueError):
                problems.append(f"line {lineno}: seal signature does not verify")
        prev = claimed
    return ChainReport(not problems, count, sealed, max(opened - sealed, 0), tuple(problems))


def _intent_verifies(record: dict[str, Any], key: Ed25519PublicKey | None) -> bool:
    try:
        intent = Intent.from_dict(record["intent"])
        if key is None or intent.tool != record.get("tool") or intent.verdict != "allow":
            return False
        key.verify(intent.signature, intent.payload())
    except (InvalidSignature, KeyError, ValueError, TypeError):
        return False
    return True


def verify_file(path: str | os.PathLike[str], public_key_pem: str | None = None) -> ChainReport:
    with open(path, encoding="utf-8") as f:
        return verify_chain(f, public_key_pem)
