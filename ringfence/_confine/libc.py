"""The C library through ``ctypes``, loaded once per process; ``prctl``, ``malloc_trim``,
``process_vm_readv`` (:class:`ProcessMemory`), errors.

``CDLL(None)`` is the process's own symbol table (glibc or musl, whichever the
interpreter links), opened with ``use_errno`` so :func:`error` can say why a
call failed. ``syscall`` returns a ``long`` (a descriptor, or -1), ``prctl``
an ``int``. Loaded on first use: importing this module costs only ``ctypes``.
"""

from __future__ import annotations

import ctypes
import os
import struct

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
    "ProcessMemory",
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


class ProcessMemory:
    """Another process's memory, read with ``process_vm_readv(2)``: the same pages
    ``/proc/<pid>/mem`` gives, under the same ptrace access check, without opening a file
    per process (the exec checks' supervisor reads each exec's path and argv this way).

    A seccomp filter may deny the call (the confined sandbox's first filter does without
    change sets): :meth:`read` raises ``OSError(EPERM)`` then. The buffers are made once
    and reused, so one reader serves one thread.
    """

    SPANS = 64  # at most this many spans a read
    SIZE = 16384  # at most this many bytes a read

    def __init__(self) -> None:
        lib = libc()
        call = lib.process_vm_readv
        call.restype = ctypes.c_ssize_t
        call.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
            ctypes.c_ulong,
        ]  # fmt: skip
        self._call = call
        self._data = bytearray(self.SIZE)
        self._view = memoryview(self._data)
        data = (ctypes.c_char * self.SIZE).from_buffer(self._data)
        self._local = bytearray(struct.pack("<QQ", ctypes.addressof(data), self.SIZE))
        self._remote = bytearray(16 * self.SPANS)
        local = (ctypes.c_char * 16).from_buffer(self._local)
        remote = (ctypes.c_char * len(self._remote)).from_buffer(self._remote)
        self._keep = (data, local, remote)  # the buffers the addresses point into
        self._local_at = ctypes.addressof(local)
        self._remote_at = ctypes.addressof(remote)

    def read(self, pid: int, spans: list[tuple[int, int]]) -> bytes:
        """The bytes at ``spans`` (``(address, length)`` pairs of ``pid``'s memory, at most
        :attr:`SPANS` of them and :attr:`SIZE` bytes in all), one after the other: shorter
        when the kernel stopped at memory it could not read (a span that does not cross a
        page is read whole or not at all). Raises OSError (EPERM: not allowed; ESRCH: no such
        process; EFAULT: the first span cannot be read)."""
        flat = [x for span in spans for x in span]
        struct.pack_into(f"<{len(flat)}Q", self._remote, 0, *flat)
        got = self._call(pid, self._local_at, 1, self._remote_at, len(spans), 0)
        if got < 0:
            raise error("process_vm_readv")
        return bytes(self._view[:got])

    def check(self) -> None:
        """Read a word of this process's own memory: raises OSError when the call is denied
        (a seccomp filter: EPERM) or missing (ENOSYS)."""
        probe = ctypes.create_string_buffer(b"ringfence", 16)
        if self.read(os.getpid(), [(ctypes.addressof(probe), 9)]) != b"ringfence":
            raise OSError(5, "process_vm_readv read something else")
