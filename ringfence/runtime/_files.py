"""Where ringfence keeps its own state, and small file helpers for it (plans, keys, manifests).

:class:`Places` says where this machine's ringfence state and tools are: the state
directory (keys, plans, change sets, spool; default ``~/.ringfence``), bubblewrap (default:
``bwrap`` on ``PATH``) and the overlays' directory (default: chosen per session). The
library never reads them from the environment: a host passes them with :func:`use_places`
(a context variable, so a block of a program, a task and its children, or a test sees its
own), and the command line sets them from ``RINGFENCE_HOME``, ``RINGFENCE_BWRAP`` and
``RINGFENCE_LAYERS_DIR`` (``cli/_settings.py``).

These helpers write ringfence's *own* files, outside any workspace; the workspace
package has its own fd-confined writer for files a tool is asked to touch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from ._errors import Unwritable

__all__ = [
    "Places",
    "atomic_write",
    "current_places",
    "entered_places",
    "load_or_create_key",
    "open_home_directory",
    "read_all",
    "read_named_file",
    "ringfence_home",
    "use_places",
]


@dataclass(frozen=True)
class Places:
    """Where ringfence's state and tools are on this machine (``None``: the default).

    ``home``: ringfence's state directory (``~/.ringfence``). ``bwrap``: the
    bubblewrap binary the local backend runs (``bwrap`` on ``PATH``).
    ``layers_dir``: where a local session's overlays are made (an absolute path
    outside every workspace root; default: the spool or temporary directory on
    the first root's mount, see ``backends/confined/_plan.py``).
    """

    home: Path | None = None
    bwrap: str | None = None
    layers_dir: Path | None = None


_PLACES: ContextVar[Places] = ContextVar("ringfence_places", default=Places())  # noqa: B039 (frozen)


def current_places() -> Places:
    """The places in force here (the innermost :func:`use_places`)."""
    return _PLACES.get()


@contextlib.contextmanager
def use_places(
    *,
    home: str | os.PathLike[str] | None = None,
    bwrap: str | os.PathLike[str] | None = None,
    layers_dir: str | os.PathLike[str] | None = None,
) -> Iterator[Places]:
    """Within the block (and the tasks and threads started from it), use these places.

    Arguments left ``None`` keep what the enclosing block set. Put the block
    around a kernel's whole life (``with use_places(...): async with
    create_kernel(...)``): a kernel reads them where it needs them, at its
    first command, say, not once at its creation.
    """
    given = {
        "home": Path(home) if home is not None else None,
        "bwrap": os.fspath(bwrap) if bwrap is not None else None,
        "layers_dir": Path(layers_dir) if layers_dir is not None else None,
    }
    places = dataclasses.replace(_PLACES.get(), **{k: v for k, v in given.items() if v is not None})
    with entered_places(places):
        yield places


@contextlib.contextmanager
def entered_places(places: Places) -> Iterator[Places]:
    """Exactly ``places`` within the block (``None`` fields: the defaults), whatever the
    enclosing block set: the command line's, from its settings."""
    token = _PLACES.set(places)
    try:
        yield places
    finally:
        _PLACES.reset(token)


def ringfence_home() -> Path:
    """The state directory: :func:`use_places`' ``home``, else ``~/.ringfence``."""
    home = _PLACES.get().home
    return home if home is not None else Path.home() / ".ringfence"


def open_home_directory(name: str) -> int:
    """A descriptor of ``$RINGFENCE_HOME/<name>``, made private (0700) when missing and
    opened without following a link; raises OSError (the home unwritable, say)."""
    path = ringfence_home() / name
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


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
    """A persistent local secret in ``ringfence_home()/keys/NAME`` (0600).

    Made whole or not at all (:func:`create_whole`: a process that loses the race reads
    the winner's key). Made under its own name and then written, a key cut by a kill or
    a full disk between the two was left empty, and every later session signed and
    checked with that empty key (a plan anyone could write passed for one staged here). A key file of another size
    is refused, naming it, never used."""
    path = ringfence_home() / "keys" / name
    try:
        return _whole_key(path, path.read_bytes(), size)
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(size)
    try:
        create_whole(path, data)
    except FileExistsError:
        # Another process won the race; use its key.
        return _whole_key(path, path.read_bytes(), size)
    return data


def create_whole(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data``, whole or not at all; FileExistsError when it is
    there already (its parents are made private, 0700, when missing).

    Written under a temporary name beside it, then linked into place: ``link`` is
    exclusive as ``O_EXCL`` is, and a kill or a full disk leaves no file cut short under
    the name (made under its name and then written, it could be left empty)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _whole_key(path: Path, data: bytes, size: int) -> bytes:
    """``data``, the key read from ``path``, if it has its size; else refused, naming it."""
    if len(data) != size:
        raise Unwritable(
            f"the key file {path} is damaged ({len(data)} bytes, not {size}: cut short by a "
            "crash or an edit): it is not used; remove it, and a new key is made (what the "
            "old one signed, such as staged plans, must then be made again)",
            field="key",
        )
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


def read_named_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file a person named (a plan, a key file), at most ``limit``.

    A FIFO or a device is refused before it is opened (a directory is IsADirectoryError) (``plan show`` of a
    pipe no one writes, or ``--public-key /dev/zero``, waited or read forever); the file is
    opened without waiting and read at most ``limit + 1`` bytes whatever its size says.
    Raises OSError (``FileNotFoundError`` for a missing file) or ValueError naming why.
    """
    import errno
    import stat

    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):  # an OSError, as reading a directory always was
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(mode):
        raise ValueError("not a regular file (a pipe or a device is never read)")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file (a pipe or a device is never read)")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than the {limit:,} bytes read of it")
    return data
