"""Execution intents: the Gate's proof that one specific call may run.

After the Gate allows a call it mints an :class:`Intent` (tool, SHA-256 of the
canonical arguments, decision, nonce, expiry). Inside the process the executor
redeems it with an HMAC-SHA256 tag under a per-kernel in-memory key, compared
in constant time; the executor refuses a missing, expired, replayed or altered
intent. No per-call Ed25519 signature: the ``started`` record carries the
intent's description (:meth:`Intent.describe`) and the session key signs the
event chain's checkpoints and seal instead (``_events``), which authenticate
every record before them, so an auditor with only the public key still checks
that each call that ran matches an allowed decision.

An intent that crosses a process boundary (a remote backend, a future worker)
is Ed25519-signed (:meth:`IntentAuthority.issue_signed`) and checked there with
the public key alone (:func:`check_intent`), never with the tag. Both keys
live only in memory and die with the kernel; the public key is exportable.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import itertools
import os
import re
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, final

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ._canonical import arguments_digest, canonical_json
from ._errors import Denied

__all__ = [
    "Intent",
    "IntentAuthority",
    "check_intent",
    "intent_mismatch",
    "key_fingerprint",
    "load_public_keys",
    "verify_intent",
]

# An Ed25519 SubjectPublicKeyInfo is this fixed DER header and the 32 raw key bytes
# (RFC 8410), so minting a session key's PEM needs no serialization module (and the
# ciphers, RSA, EC and SSH code it imports); reading PEM text still uses it.
_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")

_PEM_BLOCK = re.compile(r"-----BEGIN PUBLIC KEY-----[A-Za-z0-9+/=\s]*?-----END PUBLIC KEY-----")


@final
@dataclass(frozen=True)
class Intent:
    tool: str
    arguments_sha256: str
    verdict: str
    rule: str
    nonce: str
    expires_at: float
    # Ed25519 over payload() for an intent that leaves the process (issue_signed); empty
    # for an in-process intent, which the chain's checkpoints authenticate instead.
    signature: bytes = b""
    # HMAC-SHA256 over payload() (and the signature) under the issuing kernel's in-memory
    # key: what the in-process executor checks. Never serialized, so it never reaches a log.
    tag: bytes = field(default=b"", repr=False, compare=False)

    def payload(self) -> bytes:
        """The signed bytes: the canonical JSON of every field but the signature and tag.

        Encoded with orjson (sorted keys): for these fields (text, and an expiry
        near the current epoch) the same bytes as :func:`canonical_json`.
        """
        return _payload(self._signed_fields())

    def _signed_fields(self) -> dict[str, Any]:
        """Every field the signature covers, in declaration order."""
        return {
            "tool": self.tool,
            "arguments_sha256": self.arguments_sha256,
            "verdict": self.verdict,
            "rule": self.rule,
            "nonce": self.nonce,
            "expires_at": self.expires_at,
        }

    def describe(self) -> dict[str, Any]:
        """What the ``started`` record carries: every signed field, no signature, no tag."""
        return self._signed_fields()

    def to_dict(self) -> dict[str, Any]:
        return {
            **self._signed_fields(),
            "signature": base64.b64encode(self.signature).decode(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Intent:
        """The inverse of :meth:`to_dict` (raises KeyError/ValueError/TypeError when malformed)."""
        return cls(
            tool=str(data["tool"]),
            arguments_sha256=str(data["arguments_sha256"]),
            verdict=str(data["verdict"]),
            rule=str(data["rule"]),
            nonce=str(data["nonce"]),
            expires_at=float(data["expires_at"]),
            signature=base64.b64decode(data["signature"], validate=True),
        )


def _payload(fields: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return canonical_json(fields)  # raises for what JSON cannot carry


class IntentAuthority:
    """Mints and redeems intents; holds the session's Ed25519 key and the HMAC key.

    In-process intents (:meth:`issue`) carry only the HMAC tag; the Ed25519 key
    signs event-chain checkpoints (:meth:`sign_bytes`) and intents that leave
    the process (:meth:`issue_signed`). Nonces are remembered until their
    intent expires, so a replay inside the validity window is refused and
    memory stays bounded.
    """

    def __init__(self, ttl_seconds: float = 30.0) -> None:
        self._key = Ed25519PrivateKey.generate()
        self._public = self._key.public_key()
        self._ttl = ttl_seconds
        self._ttl_us = round(ttl_seconds * 1e6)
        self._nonce_prefix = base64.urlsafe_b64encode(os.urandom(12)).decode() + "."
        self._nonces = itertools.count()
        # HMAC-SHA256 (RFC 2104) with the keyed inner and outer states computed once:
        # a tag then costs two state copies and two short hashes, about half of
        # hmac.digest, which sets the key up again on every call.
        key = os.urandom(32).ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))
        self._spent: set[str] = set()
        # (expiry, nonce) in issue order; expiries grow with it because the TTL is fixed.
        self._spent_order: deque[tuple[float, str]] = deque()

    def public_key_pem(self) -> str:
        """The session's public key as a PEM ``PUBLIC KEY`` block (SubjectPublicKeyInfo)."""
        der = base64.b64encode(_ED25519_SPKI_PREFIX + self._public.public_bytes_raw()).decode()
        return f"-----BEGIN PUBLIC KEY-----\n{der}\n-----END PUBLIC KEY-----\n"

    def sign_bytes(self, data: bytes) -> bytes:
        return self._key.sign(data)

    def _tag(self, payload: bytes, signature: bytes) -> bytes:
        # Over the payload and the signature: neither can be swapped after issue.
        inner = self._inner.copy()
        inner.update(payload + b"\0" + signature)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def issue(
        self,
        tool: str,
        arguments: dict[str, Any],
        verdict: str,
        rule: str,
        *,
        arguments_sha256: str | None = None,
    ) -> Intent:
        """An in-process intent: HMAC-tagged, not signed (about 2 µs instead of ~30 µs).

        ``arguments_sha256``: the digest the caller already computed of
        ``arguments`` (the Gate records it in ``decided``), else computed here.
        """
        if arguments_sha256 is None:
            arguments_sha256 = arguments_digest(arguments)
        # Unique per kernel is all a nonce needs (the tag is keyed): a random prefix and a count.
        nonce = f"{self._nonce_prefix}{next(self._nonces)}"
        expires_at = (time.time_ns() // 1000 + self._ttl_us) / 1e6  # whole microseconds
        payload = _payload(
            {
                "tool": tool,
                "arguments_sha256": arguments_sha256,
                "verdict": verdict,
                "rule": rule,
                "nonce": nonce,
                "expires_at": expires_at,
            }
        )
        tag = self._tag(payload, b"")
        return Intent(tool, arguments_sha256, verdict, rule, nonce, expires_at, tag=tag)

    def issue_signed(self, tool: str, arguments: dict[str, Any], verdict: str, rule: str) -> Intent:
        """An intent that crosses a process boundary: Ed25519-signed (and tagged).

        The receiving side checks it with only the public key
        (:func:`check_intent`); this process can still redeem it (tag).
        """
        unsigned = self.issue(tool, arguments, verdict, rule)
        payload = unsigned.payload()
        signature = self._key.sign(payload)
        return dataclasses.replace(unsigned, signature=signature, tag=self._tag(payload, signature))

    def redeem(self, intent: Intent | None, tool: str, arguments: dict[str, Any]) -> None:
        """Verify ``intent`` for this exact call and spend its nonce; raise Denied otherwise.

        The check is the HMAC tag over the intent's payload (and its signature
        bytes, if signed), compared in constant time: an intent whose fields or
        signature were altered after issue is refused (about 2 µs). Then the
        call: same tool, the digest of ``arguments`` *now* (a nested value
        changed after the Gate looked is refused), verdict, expiry, nonce.
        """
        if intent is None:
            raise Denied(f"{tool} has no signed intent; nothing ran", rule="intent")
        if not hmac.compare_digest(self._tag(intent.payload(), intent.signature), intent.tag):
            raise Denied(f"the intent for {tool} has a bad signature; nothing ran")
        mismatch = intent_mismatch(intent, tool, arguments_digest(arguments))
        if mismatch is not None:
            raise Denied(f"{mismatch}; nothing ran")
        now = time.time()
        if intent.expires_at < now:
            raise Denied(f"the intent for {tool} expired; nothing ran")
        if intent.nonce in self._spent:
            raise Denied(f"the intent for {tool} was already used (replay); nothing ran")
        while self._spent_order and self._spent_order[0][0] < now:
            self._spent.discard(self._spent_order.popleft()[1])
        self._spent.add(intent.nonce)
        self._spent_order.append((intent.expires_at, intent.nonce))


def intent_mismatch(intent: Intent, tool: str, arguments_sha256: str | None) -> str | None:
    """Why a (genuinely signed) ``intent`` does not cover this call of ``tool``, or None.

    The one check the executor (:meth:`IntentAuthority.redeem`) and the audit
    (:func:`check_intent`) share: same tool, same argument digest (skipped
    when ``arguments_sha256`` is None, i.e. unknown to the auditor), verdict
    ``allow``.
    """
    if intent.tool != tool or (
        arguments_sha256 is not None and intent.arguments_sha256 != arguments_sha256
    ):
        return f"the intent does not match this call of {tool}"
    if intent.verdict != "allow":
        return f"the intent for {tool} does not allow it"
    return None


def load_public_keys(pem_text: str) -> list[Ed25519PublicKey]:
    """Every Ed25519 public key in ``pem_text`` (one or several PEM blocks).

    Raises ValueError naming the block that is not an Ed25519 public key, or
    when the text holds no key at all.
    """
    from cryptography.hazmat.primitives import serialization

    blocks = _PEM_BLOCK.findall(pem_text)
    if not blocks:
        raise ValueError("no PEM public key found")
    keys: list[Ed25519PublicKey] = []
    for n, block in enumerate(blocks, start=1):
        try:
            key = serialization.load_pem_public_key(block.encode())
        except ValueError as exc:
            raise ValueError(f"PEM block {n} is not a public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"PEM block {n} is not an Ed25519 public key")
        keys.append(key)
    return keys


def key_fingerprint(key: Ed25519PublicKey) -> str:
    """``sha256:<hex>`` of the raw 32-byte key: a short name to compare and print."""
    raw = key.public_bytes_raw()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def check_intent(
    key: Ed25519PublicKey | str,
    intent: Intent | Mapping[str, Any] | None,
    *,
    tool: str,
    arguments_sha256: str | None = None,
) -> str | None:
    """Audit one recorded intent with only the session's public key.

    Returns None when ``intent`` is signed by ``key`` and covers this call of
    ``tool`` (see :func:`intent_mismatch`), else why not. A missing or
    malformed intent is a problem, never a pass. Expiry and replay are the
    executor's business at run time; an auditor checks nonces across a log
    itself.
    """
    if intent is None:
        return "no signed intent"
    try:
        if not isinstance(intent, Intent):
            intent = Intent.from_dict(dict(intent))
        public = load_public_keys(key)[0] if isinstance(key, str) else key
        public.verify(intent.signature, intent.payload())
    except InvalidSignature:
        return "the intent's signature does not verify with the session key"
    except (KeyError, ValueError, TypeError, binascii.Error):
        return "the intent is malformed"
    return intent_mismatch(intent, tool, arguments_sha256)


def verify_intent(public_key_pem: str, intent: Intent) -> bool:
    """Check an intent's signature with only the session's public key (for audit)."""
    return check_intent(public_key_pem, intent, tool=intent.tool) is None
