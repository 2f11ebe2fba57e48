"""Signed execution intents: the Gate's proof that one specific call may run.

After the Gate allows a call it mints an :class:`Intent` (tool, SHA-256 of the
canonical arguments, decision, nonce, expiry) signed with the kernel's Ed25519
session key. The executor verifies it right before running and refuses a
missing, expired, replayed or altered intent. The key lives only in memory and
dies with the kernel; the public key is exportable for audit.
"""

from __future__ import annotations

import base64
import hmac
import os
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ._canonical import canonical_json, digest
from ._errors import Denied

__all__ = ["Intent", "IntentAuthority", "verify_intent"]


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
        if intent.tool != tool or intent.arguments_sha256 != digest(arguments):
            raise Denied(f"the intent does not match this call of {tool}; nothing ran")
        if intent.verdict != "allow":
            raise Denied(f"the intent for {tool} does not allow it; nothing ran")
        now = time.time()
        if intent.expires_at < now:
            raise Denied(f"the intent for {tool} expired; nothing ran")
        if intent.nonce in self._spent:
            raise Denied(f"the intent for {tool} was already used (replay); nothing ran")
        while self._spent_order and self._spent_order[0][0] < now:
            self._spent.discard(self._spent_order.popleft()[1])
        self._spent.add(intent.nonce)
        self._spent_order.append((intent.expires_at, intent.nonce))


def verify_intent(public_key_pem: str, intent: Intent) -> bool:
    """Check an intent's signature with only the session's public key (for audit)."""
    key = serialization.load_pem_public_key(public_key_pem.encode())
    try:
        key.verify(intent.signature, intent.payload())  # type: ignore[union-attr]
    except (InvalidSignature, TypeError, AttributeError):
        return False
    return True
