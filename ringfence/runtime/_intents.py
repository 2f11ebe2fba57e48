"""Signed execution intents: the Gate's proof that one specific call may run.

After the Gate allows a call it mints an :class:`Intent` (tool, SHA-256 of the
canonical arguments, decision, nonce, expiry) signed with the kernel's Ed25519
session key. The executor verifies it right before running and refuses a
missing, expired, replayed or altered intent. The key lives only in memory and
dies with the kernel; the public key is exportable for audit.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ._canonical import canonical_json, digest
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
    signature: bytes

    def payload(self) -> bytes:
        return canonical_json(
            {
                "tool": self.tool,
                "arguments_sha256": self.arguments_sha256,
                "verdict": self.verdict,
                "rule": self.rule,
                "nonce": self.nonce,
                "expires_at": self.expires_at,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "arguments_sha256": self.arguments_sha256,
            "verdict": self.verdict,
            "rule": self.rule,
            "nonce": self.nonce,
            "expires_at": self.expires_at,
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


class IntentAuthority:
    """Mints and checks intents with one per-kernel Ed25519 key.

    Nonces are remembered until their intent expires, so a replay inside the
    validity window is refused and memory stays bounded.
    """

    def __init__(self, ttl_seconds: float = 30.0) -> None:
        self._key = Ed25519PrivateKey.generate()
        self._public = self._key.public_key()
        self._ttl = ttl_seconds
        self._spent: set[str] = set()
        # (expiry, nonce) in issue order; expiries grow with it because the TTL is fixed.
        self._spent_order: deque[tuple[float, str]] = deque()

    def public_key_pem(self) -> str:
        return self._public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()

    def sign_bytes(self, data: bytes) -> bytes:
        return self._key.sign(data)

    def issue(self, tool: str, arguments: dict[str, Any], verdict: str, rule: str) -> Intent:
        unsigned = Intent(
            tool=tool,
            arguments_sha256=digest(arguments),
            verdict=verdict,
            rule=rule,
            nonce=base64.urlsafe_b64encode(os.urandom(18)).decode(),
            expires_at=round(time.time() + self._ttl, 6),
            signature=b"",
        )
        return replace(unsigned, signature=self._key.sign(unsigned.payload()))

    def redeem(self, intent: Intent | None, tool: str, arguments: dict[str, Any]) -> None:
        """Verify ``intent`` for this exact call and spend its nonce; raise Denied otherwise.

        Ed25519 signatures are deterministic (RFC 8032), and the executor shares
        this kernel's key, so it verifies by signing the payload again and
        comparing in constant time: a third of the cost of a public-key verify
        on this class of machine, and stricter (a malleated signature that a
        lenient verifier might accept is refused). Auditors without the private
        key use :func:`verify_intent` with the exported public key.
        """
        if intent is None:
            raise Denied(f"{tool} has no signed intent; nothing ran", rule="intent")
        if not hmac.compare_digest(self._key.sign(intent.payload()), intent.signature):
            raise Denied(f"the intent for {tool} has a bad signature; nothing ran")
        mismatch = intent_mismatch(intent, tool, digest(arguments))
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
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
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
