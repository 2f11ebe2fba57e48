"""Small file helpers for ringfence's own state (plans, keys, manifests).

These write ringfence's *own* files, outside any workspace; the workspace
package has its own fd-confined writer for files a tool is asked to touch.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "load_or_create_key", "read_all", "ringfence_home"]


def ringfence_home() -> Path:
    """``$RINGFENCE_HOME`` or ``~/.ringfence``."""
    env = os.environ.get("RINGFENCE_HOME")
    return Path(env) if env else Path.home() / ".ringfence"


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Temp file in the same directory, fsync, rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_create_key(name: str, size: int = 32) -> bytes:
    """A persistent local secret in ``ringfence_home()/keys/NAME`` (0600)."""
    path = ringfence_home() / "keys" / name
    try:
        data = path.read_bytes()
        if len(data) == size:
            return data
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = secrets.token_bytes(size)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process won the race; use its key.
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return data


def read_all(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``'s current offset to its end."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
