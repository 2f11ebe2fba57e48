"""``openat2(2)`` through ``ctypes``: the workspace resolver's fast path, probed once per process;
and ``fstatfs(2)``'s file system type, which the resolver asks of what it opened.

Python has no binding for ``openat2`` (Linux 5.6+), so it is called as
``syscall(437, ...)``. ``ENOSYS`` is remembered: a kernel without it costs one
failed call, then the resolver walks component by component.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct
import threading
from typing import Any

from .libc import libc

__all__ = [
    "EAGAIN_RETRIES",
    "RESOLVE_BENEATH",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "fs_type",
    "openat2",
    "openat2_available",
]

# openat2 returns EAGAIN when a concurrent rename makes ".." unsafe to trust.
EAGAIN_RETRIES = 32

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_SYS_OPENAT2 = 437  # the same number on every architecture (unified syscall table)


class _Openat2:
    """``openat2`` via ``syscall(2)``; remembers ENOSYS for the life of the process.

    Hot path: the ``open_how`` structs are built once per (flags, resolve)
    and shared (the kernel only reads them), and the call goes through a
    fixed ``CFUNCTYPE`` prototype taking the struct's address.
    """

    def __init__(self) -> None:
        self.available: bool | None = None  # None: not tried yet
        self._hows: dict[tuple[int, int], tuple[_OpenHow, int]] = {}
        try:
            proto = ctypes.CFUNCTYPE(
                ctypes.c_long,
                ctypes.c_long,  # syscall number
                ctypes.c_long,  # dirfd
                ctypes.c_char_p,  # path
                ctypes.c_void_p,  # struct open_how *
                ctypes.c_long,  # sizeof(struct open_how)
                use_errno=True,
            )
            self._fn = proto(("syscall", libc()))
        except (OSError, AttributeError):  # pragma: no cover - no libc syscall()
            self.available = False

    def _how(self, flags: int, resolve: int) -> int:
        key = (flags, resolve)
        found = self._hows.get(key)
        if found is None:
            how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
            found = self._hows[key] = (how, ctypes.addressof(how))
        return found[1]

    def quick(self, dirfd: int, path: bytes, flags: int, resolve: int) -> int:
        """One attempt: a descriptor, or -1 on any failure (then use the call, which explains)."""
        found = self._hows.get((flags, resolve))
        how = found[1] if found is not None else self._how(flags, resolve)
        return self._fn(_SYS_OPENAT2, dirfd, path, how, _OPEN_HOW_SIZE)

    def __call__(self, dirfd: int, path: bytes, flags: int, resolve: int) -> int:
        """Open ``path`` relative to ``dirfd``; raise OSError with the errno."""
        if self.available is False:
            raise OSError(errno.ENOSYS, "openat2 is not available")
        how = self._how(flags, resolve)
        for _ in range(EAGAIN_RETRIES):
            fd = self._fn(_SYS_OPENAT2, dirfd, path, how, _OPEN_HOW_SIZE)
            if fd >= 0:
                self.available = True
                return fd
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EINTR):
                continue
            if err == errno.ENOSYS:
                self.available = False
            raise OSError(err, os.strerror(err))
        raise OSError(errno.EAGAIN, "openat2 kept failing with EAGAIN (concurrent renames)")


_OPEN_HOW_SIZE = ctypes.sizeof(_OpenHow)
openat2 = _Openat2()


def openat2_available() -> bool:
    """Does this kernel have openat2? (Probes once, then remembers.)"""
    if openat2.available is None:
        with contextlib.suppress(OSError):
            os.close(openat2(-100, b"/", os.O_PATH, 0))  # AT_FDCWD
    return bool(openat2.available)


# struct statfs is 120 bytes on the 64-bit ABIs; f_type (a long) comes first on all of them.
_STATFS_BUFFER = 512
_F_TYPE = struct.Struct("l")


class _FsType(threading.local):
    """``fstatfs`` through a fixed prototype, with one result buffer per thread."""

    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(_STATFS_BUFFER)
        self.address = ctypes.addressof(self.buf)


_fstatfs_proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, use_errno=True)
_fstatfs: Any = None
_fs_type_local = _FsType()


def fs_type(fd: int) -> int:
    """The magic number (``statfs.f_type``) of the file system ``fd`` is on (any descriptor,
    ``O_PATH`` too): the kernel's own answer, which no mount table can get out of date.
    About a microsecond: the resolver asks it of every descriptor it hands out."""
    global _fstatfs
    if _fstatfs is None:
        _fstatfs = _fstatfs_proto(("fstatfs", libc()))
    local = _fs_type_local
    if _fstatfs(fd, local.address) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(_F_TYPE.unpack_from(local.buf)[0])
