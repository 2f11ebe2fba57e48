"""Sealed storage for OAuth credentials: AES-GCM records under ``$RINGFENCE_HOME/oauth/``.

Contract:

- One record per server name, ``oauth/<name>.sealed``: ``RF1`` + 12-byte nonce +
  AES-256-GCM ciphertext, with the server name as associated data (a record
  copied to another name does not open). Written atomically, mode 0600.
- The key is 32 random bytes: in the OS keyring through ``keyring`` when that
  package is installed with a usable backend, else in ``keys/mcp-oauth.key``
  (created 0600 in a 0700 directory; a key file readable by group or others is
  refused, fail closed). :func:`key_backend` says which.
- A record that does not open (tampered, other key) raises ``Unavailable``
  naming the file and the fix (``mcp logout`` / ``mcp login``); it is never
  silently treated as empty.

Also here, shared by every OAuth provider (:mod:`._provider`, :mod:`._xaa`):
:func:`token_audience_ok` (a JWT for another resource is never sent) and
:func:`credential_from_env` (secrets only from named environment variables,
registered with the redactor when read).

Not promised: protection from the same OS user (who can read the key file or
ask the keyring) — the seal keeps tokens out of backups, manifests and casual
reads, not from code running as you.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp.shared.auth_utils import check_resource_allowed

from ...runtime._errors import Denied, Unavailable
from ...runtime._files import atomic_write, ringfence_home
from ...runtime._redact import Redactor

if TYPE_CHECKING:
    from ..manifest._load import ServerConfig

__all__ = ["SealedStore", "credential_from_env", "key_backend", "token_audience_ok"]

_MAGIC = b"RF1"
_KEYRING_SERVICE = "ringfence"
_KEYRING_USER = "mcp-oauth-key"


def _keyring(enabled: bool = True) -> Any | None:
    """The ``keyring`` module when ``enabled``, installed and with a real backend, else None."""
    if not enabled:
        return None
    try:
        import keyring  # type: ignore[import-not-found]
        from keyring.backends import fail  # type: ignore[import-not-found]
    except Exception:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 0) <= 0:
        return None
    return keyring


def key_backend(home: Path | None = None, *, keyring: bool = True) -> str:
    """Where the sealing key lives: ``"keyring (<backend>)"`` or ``"key file <path>"``.

    ``keyring=False`` (the command line's ``RINGFENCE_NO_KEYRING=1``): always the file.
    """
    kr = _keyring(keyring)
    if kr is not None:
        return f"keyring ({type(kr.get_keyring()).__name__})"
    return f"key file {(home or ringfence_home()) / 'keys' / 'mcp-oauth.key'}"


@dataclass(frozen=True)
class SealedStore:
    """Encrypted records keyed by server name (see the module docstring).

    ``keyring=False`` keeps the sealing key in ``home/keys/mcp-oauth.key`` even where a
    system keyring is available (the command line's ``RINGFENCE_NO_KEYRING=1``).
    """

    home: Path
    keyring: bool = True

    @classmethod
    def default(cls) -> SealedStore:
        return cls(ringfence_home())

    @property
    def key_file(self) -> Path:
        return self.home / "keys" / "mcp-oauth.key"

    def path(self, name: str) -> Path:
        return self.home / "oauth" / f"{name}.sealed"

    def _key(self, create: bool) -> bytes | None:
        kr = _keyring(self.keyring)
        if kr is not None:
            stored = kr.get_password(_KEYRING_SERVICE, _KEYRING_USER)
            if stored:
                return base64.b64decode(stored)
            if not create:
                return None
            key = AESGCM.generate_key(bit_length=256)
            kr.set_password(_KEYRING_SERVICE, _KEYRING_USER, base64.b64encode(key).decode())
            return key
        path = self.key_file
        try:
            st = path.stat()
        except FileNotFoundError:
            if not create:
                return None
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            key = AESGCM.generate_key(bit_length=256)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                return self._key(create=False)  # another process created it first
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            return key
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or st.st_uid != os.getuid():
            raise Denied(
                f"the token key {path} must be a regular file owned by you with mode 0600 "
                f"(it is {stat.filemode(st.st_mode)}); fix it or remove it and log in again",
                field="key_file",
            )
        key = path.read_bytes()
        if len(key) != 32:
            raise Unavailable(f"the token key {path} is damaged (not 32 bytes)", field="key_file")
        return key

    def load(self, name: str) -> dict[str, Any] | None:
        """The record for ``name``, or None when there is none. Raises if it does not open."""
        path = self.path(name)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        key = self._key(create=False)
        if key is None or not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 12 + 16:
            raise Unavailable(
                f"the sealed tokens of MCP server {name!r} ({path}) cannot be opened: "
                f"run `ringfence mcp logout {name}` and `ringfence mcp login {name}`",
                field="tokens",
            )
        nonce = blob[len(_MAGIC) : len(_MAGIC) + 12]
        try:
            plain = AESGCM(key).decrypt(nonce, blob[len(_MAGIC) + 12 :], name.encode())
        except InvalidTag:
            raise Unavailable(
                f"the sealed tokens of MCP server {name!r} ({path}) do not open with this key "
                f"(tampered or from another key): run `ringfence mcp logout {name}` and log in again",
                field="tokens",
            ) from None
        return json.loads(plain)

    def save(self, name: str, record: dict[str, Any]) -> None:
        key = self._key(create=True)
        assert key is not None
        nonce = secrets.token_bytes(12)
        sealed = AESGCM(key).encrypt(nonce, json.dumps(record).encode(), name.encode())
        (self.home / "oauth").mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(self.path(name), _MAGIC + nonce + sealed, mode=0o600)

    def delete(self, name: str) -> bool:
        try:
            self.path(name).unlink()
        except FileNotFoundError:
            return False
        return True


# -- the checks every OAuth provider shares (audience, credentials from the environment) -----


def _jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT-shaped token, unverified (we are not its audience's verifier)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser: unread
        return None
    return claims if isinstance(claims, dict) else None


def token_audience_ok(access_token: str, resource: str) -> bool:
    """False only when the token is a JWT whose ``aud`` names another resource.

    An ``aud`` matches when it is ``resource`` or a parent of it on the same
    origin (RFC 8707 hierarchical match, the SDK's ``check_resource_allowed``).
    Opaque tokens carry no audience we can read; their binding is the record's.
    """
    claims = _jwt_claims(access_token)
    if claims is None or "aud" not in claims:
        return True
    aud = claims["aud"]
    audiences = aud if isinstance(aud, list) else [aud]
    return any(
        isinstance(a, str)
        and check_resource_allowed(requested_resource=resource, configured_resource=a)
        for a in audiences
    )


def credential_from_env(config: ServerConfig, key: str, redactor: Redactor) -> str | None:
    """The value of the environment variable ``config.<key>`` names (None if it names none),
    registered with ``redactor``; raises Unavailable naming the variable when it is unset."""
    var = getattr(config, key)
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise Unavailable(
            f"server {config.name!r}: {key} names the environment variable "
            f"{var}, which is not set; set it before connecting",
            field=key,
        )
    redactor.register_credential(value)
    return value
