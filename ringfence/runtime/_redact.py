"""The secret redactor: known secret values never leave the kernel.

Secrets are registered by value (explicitly, or from environment variables
with credential-like names that the kernel hands to a child). Every result,
error and event passes through :meth:`Redactor.redact`; streamed output goes
through a :class:`StreamRedactor`, which holds back just enough of each chunk
that a secret split across two chunks is still caught.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MARKER",
    "Redactor",
    "StreamRedactor",
    "credential_parts",
    "is_secret_key",
    "is_secret_name",
]

MARKER = "[REDACTED SECRET]"

# Names whose values are treated as secrets when the kernel passes them on.
SECRET_NAME_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PAT", "CREDENTIALS", "AUTH")
# Shorter values would redact ordinary text ("no", "1"), so they are not registered.
MIN_SECRET_LENGTH = 4


# Header names whose whole value is a credential.
SECRET_HEADER_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})


def is_secret_name(name: str) -> bool:
    return name.upper().endswith(SECRET_NAME_SUFFIXES)


def is_secret_key(name: str) -> bool:
    """A credential-named variable, or a header that carries credentials."""
    return is_secret_name(name) or name.lower() in SECRET_HEADER_NAMES


def credential_parts(value: str) -> list[str]:
    """A credential value and the secrets inside it (a Bearer token, a Basic password)."""
    out = [value]
    scheme, _, rest = value.partition(" ")
    rest = rest.strip()
    if scheme.lower() in ("bearer", "basic") and rest:
        out.append(rest)
    if scheme.lower() == "basic" and rest:
        try:
            decoded = base64.b64decode(rest, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            decoded = ""
        _user, sep, password = decoded.partition(":")
        if sep and password:
            out += [password, decoded]
    return out


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for s in secrets:
            self.register(s)

    @property
    def longest(self) -> int:
        return max((len(s) for s in self._secrets), default=0)

    def register(self, secret: str) -> None:
        if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
            return
        if secret not in self._secrets:
            self._secrets.add(secret)
            # Longest first so a secret that contains another is replaced whole.
            alternatives = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in alternatives))

    def register_env(self, env: Mapping[str, str]) -> None:
        """Register the values of credential-named variables in ``env``."""
        for name, value in env.items():
            if is_secret_name(name):
                self.register(value)

    def register_credential(self, value: str) -> None:
        """Register a credential value and the secrets inside it (``Bearer x``, ``Basic …``)."""
        for part in credential_parts(value):
            self.register(part)

    def register_named_values(self, value: Any, *, secret: bool = False) -> None:
        """Register every string under a credential-named key anywhere in ``value``.

        A model may hand a secret to a tool in its arguments (``env: {"API_TOKEN": …}``,
        ``headers: {"Authorization": "Bearer …"}``); registering it before the call is
        recorded keeps it out of every event. Everything below such a key counts.
        """
        if isinstance(value, str):
            if secret:
                self.register_credential(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                self.register_named_values(
                    item, secret=secret or (isinstance(key, str) and is_secret_key(key))
                )
        elif isinstance(value, list):
            for item in value:
                self.register_named_values(item, secret=secret)

    def redact(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MARKER, text)

    def redact_value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (keys included)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)


class StreamRedactor:
    """Redacts a text stream chunk by chunk; call :meth:`flush` at the end."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._pending = ""

    def feed(self, chunk: str) -> str:
        text = self._redactor.redact(self._pending + chunk)
        # Hold back a tail that could be the start of a secret split over chunks.
        hold = max(self._redactor.longest - 1, 0)
        cut = len(text) - hold
        # Never cut through a marker we just wrote.
        marker_at = text.rfind(MARKER, max(cut - len(MARKER) + 1, 0))
        if marker_at != -1 and marker_at < cut < marker_at + len(MARKER):
            cut = marker_at + len(MARKER)
        if cut <= 0:
            self._pending = text
            return ""
        self._pending = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        out, self._pending = self._redactor.redact(self._pending), ""
        return out
