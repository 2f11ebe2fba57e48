"""The exec checks' reader: the path and argv an ``exec`` passes, read from another memory.

The supervisor reads them with ``process_vm_readv`` (``_Remote``), a few whole pages at a
time, and parses them from those pages without copies when everything is there; the long
way reads on where a string or argv's pointers run past them. Property-based: strings and
pointer arrays laid out at generated offsets in a mapping of this process (across page
ends, next to an unreadable page), read back with both readers (``_Remote`` and the
``/proc/<pid>/mem`` one, ``_Mem``): each must give exactly what was laid out, or fail the
way the kernel's ``execve`` would (EFAULT) when a string runs into the unreadable page
(``process_vm_readv`` only: ``/proc/<pid>/mem`` reads such a page).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ringfence.backends.confined import _execcheck

PAGE = mmap.PAGESIZE
PAGES = 8
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


@pytest.fixture(scope="module")
def arena() -> tuple[mmap.mmap, int]:
    area = mmap.mmap(-1, PAGES * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    return area, base


def _remote() -> object:
    reader = _execcheck._reader()
    if not isinstance(reader, _execcheck._Remote):
        pytest.skip("process_vm_readv is denied here")
    return reader


strings = st.binary(min_size=0, max_size=300).map(lambda b: b.replace(b"\0", b"x"))
# Where things start: a page near the path's (the reader reads the path's page, argv's and
# the one before) and an offset that is often near a page's end or start.
offsets = st.one_of(st.integers(0, PAGE - 1), st.integers(PAGE - 12, PAGE - 1), st.integers(0, 12))
places = st.tuples(st.integers(-2, 2), offsets)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=strings.filter(bool),
    argv=st.lists(strings, max_size=6),
    path_page=st.integers(1, PAGES - 3),
    path_offset=offsets,
    table_place=places,
    string_places=st.lists(places, min_size=6, max_size=6),
    guard=st.sampled_from([None, -1, 0, 1, 2]),
)
# A string running from the path's page into the next, argv's pointers two pages before:
# the pages read are not contiguous there, so the string must not be read on into argv's.
@example(b"/sh", [b"A" * 20], 3, 10, (-2, 8), [(0, PAGE - 6)] * 6, None)
def test_both_readers_give_what_was_laid_out(
    arena: tuple[mmap.mmap, int],
    path: bytes,
    argv: list[bytes],
    path_page: int,
    path_offset: int,
    table_place: tuple[int, int],
    string_places: list[tuple[int, int]],
    guard: int | None,
) -> None:
    size = PAGES * PAGE

    def place(delta: int, offset: int, length: int) -> int:
        return min(max(0, (path_page + delta) * PAGE + offset), size - length)

    path_at = place(0, path_offset, len(path) + 1)
    table = place(*table_place, 8 * (len(argv) + 1)) // 8 * 8
    strings_at = [
        place(d, o, len(v) + 1) for (d, o), v in zip(string_places[: len(argv)], argv, strict=True)
    ]
    if guard is not None:
        guard += path_page
    area, base = arena
    remote = _remote()
    area[:] = b"\xaa" * (PAGES * PAGE)
    span_table = (table, table + 8 * (len(argv) + 1))

    def overlaps(at: int, n: int) -> bool:
        return at < span_table[1] and at + n > span_table[0]

    if overlaps(path_at, len(path) + 1) or any(
        overlaps(at, len(v) + 1) for at, v in zip(strings_at, argv, strict=True)
    ):
        return  # a string over the pointer array: nothing to check for this example
    # Strings may overlap one another: what is read is what is there at the end.
    for at, value in zip(strings_at, argv, strict=True):
        area[at : at + len(value) + 1] = value + b"\0"
    area[path_at : path_at + len(path) + 1] = path + b"\0"
    pointers = [base + at for at in strings_at]
    area[table : span_table[1]] = struct.pack(f"<{len(argv) + 1}Q", *pointers, 0)
    expected_argv = [area[p - base : area.find(b"\0", p - base)] for p in pointers]
    expected_path = area[path_at : area.find(b"\0", path_at)]
    if guard is not None:
        assert _libc.mprotect(base + guard * PAGE, PAGE, 0) == 0  # PROT_NONE
    try:
        spans = [(path_at, len(expected_path) + 1), (table, 8 * (len(argv) + 1))]
        spans += [(p - base, len(v) + 1) for p, v in zip(pointers, expected_argv, strict=True)]
        faults = guard is not None and any(
            at // PAGE <= guard <= (at + n - 1) // PAGE for at, n in spans
        )
        # /proc/<pid>/mem reads an unreadable (PROT_NONE) page where the kernel's execve
        # faults: the long way of a sandbox without change sets is checked without one.
        readers = (remote,) if guard is not None else (remote, _execcheck._Mem)
        for reader in readers:
            if faults:
                with pytest.raises(OSError) as caught:
                    reader.exec_args(os.getpid(), base + path_at, base + table)  # type: ignore[attr-defined]
                assert caught.value.errno == errno.EFAULT
            else:
                got = reader.exec_args(os.getpid(), base + path_at, base + table)  # type: ignore[attr-defined]
                assert got == (expected_path, expected_argv)
    finally:
        if guard is not None:
            assert _libc.mprotect(base + guard * PAGE, PAGE, 3) == 0  # PROT_READ | PROT_WRITE


def test_a_null_argv_reads_as_none(arena: tuple[mmap.mmap, int]) -> None:
    area, base = arena
    remote = _remote()
    area[PAGE : PAGE + 8] = b"/bin/sh\0"
    assert remote.exec_args(os.getpid(), base + PAGE, 0) == (b"/bin/sh", [])  # type: ignore[attr-defined]
