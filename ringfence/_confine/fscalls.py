"""``renameat2(RENAME_NOREPLACE)`` and ``syncfs``: the file calls ``os`` lacks (besides ``openat2``).

The change-set writer merges a new directory tree with one rename that never
replaces anything, and makes a durable merge durable with one ``syncfs`` per
file system instead of an fsync per file. Each is looked up in libc once, on
first use; where one is missing (:func:`can_rename_noreplace`, :func:`can_syncfs`
say so) the writer does without it.
"""

from __future__ import annotations

import ctypes
import errno
import os

from .libc import error, libc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["can_rename_noreplace", "can_syncfs", "rename_noreplace", "syncfs"]

_RENAME_NOREPLACE = 1
_MISSING = object()
_calls: dict[str, Any] = {}


def _call(name: str, argtypes: list[Any]) -> Any:
    """libc's function ``name`` with its prototype, or None where the C library has none."""
    fn = _calls.get(name, _MISSING)
    if fn is _MISSING:
        try:
            fn = getattr(libc(), name)
        except (OSError, AttributeError):
            fn = None
        else:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        _calls[name] = fn
    return fn


def _renameat2() -> Any:
    return _call(
        "renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    )


def _syncfs() -> Any:
    return _call("syncfs", [ctypes.c_int])


def can_rename_noreplace() -> bool:
    """Has the C library ``renameat2`` (glibc 2.28+)?"""
    return _renameat2() is not None


def can_syncfs() -> bool:
    """Has the C library ``syncfs``?"""
    return _syncfs() is not None


def rename_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (OSError ``EEXIST``, nothing changed).

    Only where :func:`can_rename_noreplace`; OSError ``ENOSYS`` otherwise.
    """
    fn = _renameat2()
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", dst)
    if fn(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), _RENAME_NOREPLACE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


def syncfs(fd: int) -> None:
    """``syncfs(fd)``: commit the file system holding ``fd``. Raises OSError (or ``ENOSYS``)."""
    fn = _syncfs()
    if fn is None:
        raise OSError(errno.ENOSYS, "syncfs is not available")
    if fn(fd) != 0:
        raise error("syncfs")
