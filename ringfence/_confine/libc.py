"""The C library through ``ctypes``, loaded once per process; ``prctl``, ``malloc_trim``, errors.

``CDLL(None)`` is the process's own symbol table (glibc or musl, whichever the
interpreter links), opened with ``use_errno`` so :func:`error` can say why a
call failed. ``syscall`` returns a ``long`` (a descriptor, or -1), ``prctl``
an ``int``. Loaded on first use: importing this module costs only ``ctypes``.
"""

from __future__ import annotations

import ctypes
import os

from . import LayerUnavailable

TYPE_CHECKING = False  # no typing import: this module loads at every sandbox's start
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PR_CAPBSET_DROP",
    "PR_GET_SECCOMP",
    "PR_SET_CHILD_SUBREAPER",
    "PR_SET_DUMPABLE",
    "PR_SET_NO_NEW_PRIVS",
    "PR_SET_PDEATHSIG",
    "error",
    "failure",
    "libc",
    "malloc_trim",
    "prctl",
]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_GET_SECCOMP = 21
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_libc: Any = None
_MISSING = object()
_trim: Any = _MISSING


def libc() -> Any:
    """The process's C library (one handle for the whole process)."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        lib.prctl.restype = ctypes.c_int
        _libc = lib
    return _libc


def error(what: str) -> OSError:
    """The failure of the C call that just returned -1: ``what: <strerror>``, with its errno."""
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def failure(layer: str, what: str) -> LayerUnavailable:
    """:func:`error` as the layer ``layer`` that could not be applied."""
    return LayerUnavailable(layer, f"{what}: {os.strerror(ctypes.get_errno())}")


def prctl(option: int, value: int = 0) -> None:
    """``prctl(option, value, 0, 0, 0)``; raises OSError naming the option."""
    if libc().prctl(option, value, 0, 0, 0) != 0:
        raise error(f"prctl({option})")


def malloc_trim() -> Any:
    """glibc's ``malloc_trim(pad)`` (hand whole free pages back to the system), or None where
    the C library has none (musl, macOS)."""
    global _trim
    if _trim is _MISSING:
        try:
            trim = libc().malloc_trim
        except (OSError, AttributeError):
            trim = None
        else:
            trim.argtypes = [ctypes.c_size_t]
            trim.restype = ctypes.c_int
        _trim = trim
    return _trim
