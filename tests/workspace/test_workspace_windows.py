"""Windows spelling rules as pure functions, with a file system that answers from a table."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ringfence.runtime import InvalidArguments, OutsideWorkspace
from ringfence.workspace._windows import (
    component_problem,
    expand_short_names,
    fold_case,
    is_reserved_name,
    normalize_win32,
    resolve_windows_path,
    split_prefix,
)


@dataclass
class TableFS:
    """A WindowsFileSystem answering from tables (what GetLongPathNameW and file ids would say)."""

    long_names: dict[str, str] = field(default_factory=dict)
    same: set[frozenset[str]] = field(default_factory=set)

    def long_path(self, path: str) -> str | None:
        return self.long_names.get(fold_case(path))

    def same_file(self, a: str, b: str) -> bool:
        return frozenset({a, b}) in self.same


ROOTS = ["C:\\Users\\me\\ws", "D:\\data"]
FS = TableFS(
    long_names={
        fold_case("C:\\Users\\me\\WS~1"): "C:\\Users\\me\\ws",
        fold_case("C:\\PROGRA~1"): "C:\\Program Files",
        fold_case("C:\\Users\\me\\ws\\LONGFI~1.TXT"): "C:\\Users\\me\\ws\\long file name.txt",
    }
)


@pytest.mark.parametrize(
    ("path", "root", "relative"),
    [
        ("C:\\Users\\me\\ws\\a.txt", 0, ("a.txt",)),
        ("c:\\users\\ME\\WS\\a.txt", 0, ("a.txt",)),  # case-insensitive
        ("C:/Users/me/ws/sub/b", 0, ("sub", "b")),
        ("a.txt", 0, ("a.txt",)),  # relative to the first root
        ("sub\\..\\a.txt", 0, ("a.txt",)),
        ("\\\\?\\C:\\Users\\me\\ws\\a.txt", 0, ("a.txt",)),  # extended-length spelling accepted
        ("\\\\?\\c:\\USERS\\me\\ws\\a.txt", 0, ("a.txt",)),
        ("C:\\Users\\me\\WS~1\\a.txt", 0, ("a.txt",)),  # 8.3 short name expanded
        ("C:\\Users\\me\\ws\\LONGFI~1.TXT", 0, ("long file name.txt",)),
        ("D:\\data\\x", 1, ("x",)),
        ("C:\\Users\\me\\ws\\trailing.", 0, ("trailing",)),  # what Windows opens for "trailing."
    ],
)
def test_paths_inside_map_to_one_spelling(path: str, root: int, relative: tuple[str, ...]) -> None:
    got = resolve_windows_path(path, ROOTS, FS)
    assert (got.root_index, got.relative) == (root, relative)
    assert "\\\\?\\" not in got.open_path


@pytest.mark.parametrize(
    "path",
    [
        "C:\\Users\\me\\ws-evil\\a.txt",  # sibling prefix
        "C:\\Users\\me\\wsx",
        "C:\\Users\\me\\ws\\..\\secret",
        "..\\secret",
        "C:\\PROGRA~1\\x",
        "E:\\Users\\me\\ws\\a.txt",
        "\\\\server\\share\\ws\\a.txt",
        "\\\\?\\UNC\\server\\share\\a.txt",
    ],
)
def test_paths_outside_are_refused(path: str) -> None:
    with pytest.raises(OutsideWorkspace):
        resolve_windows_path(path, ROOTS, FS)


@pytest.mark.parametrize(
    "path",
    [
        "\\\\.\\C:\\Users\\me\\ws\\a.txt",
        "\\\\.\\PhysicalDrive0",
        "\\\\?\\GLOBALROOT\\Device\\HarddiskVolume1\\x",
        "\\??\\C:\\x",
        "//./pipe/x",
        # After \\?\ only a drive or UNC path names a file; these were joined to the first
        # root (C:\Users\me\ws\Volume{...}\x), a different file than the one meant.
        "\\\\?\\Volume{26a21bda-a627-11d7-9931-806e6f6e6963}\\x",
        "\\\\?\\pipe\\x",
        "\\\\?\\a.txt",
        "//?/a.txt",
    ],
)
def test_device_namespace_spellings_are_refused(path: str) -> None:
    with pytest.raises(OutsideWorkspace):
        resolve_windows_path(path, ROOTS, FS)


def test_extended_length_path_is_opened_without_prefix_only_if_it_names_the_same_file() -> None:
    literal = "\\\\?\\C:\\Users\\me\\ws\\alias."
    with pytest.raises(InvalidArguments) as info:
        resolve_windows_path(literal, ROOTS, FS)
    assert "alias" in info.value.message
    fs = TableFS(same={frozenset({literal, "C:\\Users\\me\\ws\\alias"})})
    assert resolve_windows_path(literal, ROOTS, fs).open_path == "C:\\Users\\me\\ws\\alias"
    with pytest.raises(InvalidArguments):
        resolve_windows_path("\\\\?\\C:\\Users\\me\\ws\\sub\\..\\a", ROOTS, FS)


@pytest.mark.parametrize(
    "name",
    ["CON", "con", "NUL", "NUL.txt", "nul.tar.gz", "COM1", "com9.c", "LPT9", "lpt1", "AUX.c",
     "PRN", "CONOUT$", "conin$", "conOut$  .xyz", "COM\u00b9", "LPT\u00b3.log"],
)  # fmt: skip
def test_reserved_device_names(name: str) -> None:
    assert is_reserved_name(name)
    with pytest.raises(InvalidArguments):
        resolve_windows_path(f"C:\\Users\\me\\ws\\{name}", ROOTS, FS)
    with pytest.raises(InvalidArguments):
        resolve_windows_path(f"sub\\{name}\\x", ROOTS, FS)


@pytest.mark.parametrize(
    "name", ["CONSOLE", "comm", "conout.c", "com0.c", "lptN", "COM10", "NULL", "AUXILIARY"]
)
def test_names_that_only_look_reserved(name: str) -> None:
    assert not is_reserved_name(name)
    assert resolve_windows_path(name, ROOTS, FS).relative == (name,)


@pytest.mark.parametrize(
    "path", ["file.txt:hidden", "file.txt::$DATA", "dir:stream\\x", ".git::$INDEX_ALLOCATION"]
)
def test_alternate_data_streams_are_refused(path: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        resolve_windows_path(path, ROOTS, FS)
    assert "stream" in info.value.message


def test_git_is_valid_path_on_windows_vectors() -> None:
    # git/git t/t0060 "is_valid_path() on Windows", one component at a time.
    valid = ["win32", "win32 x", "hello.txt", "git", "comm", "conout.c", "com0.c", "lptN"]
    invalid = [
        "win32 ",
        "win32.",
        "win32 . .",
        "...",
        "colon:test",
        "AUX.c",
        "conOut$  .xyz",
        "lpt8",
        "com9.c",
        "lpt*",
        "Nul",
        "PRN.",
    ]
    assert [n for n in valid if component_problem(n)] == []
    assert [n for n in invalid if not component_problem(n)] == []


def test_helpers() -> None:
    assert split_prefix("\\\\?\\UNC\\srv\\share\\x") == ("\\\\srv\\share\\x", True)
    assert split_prefix("C:\\x") == ("C:\\x", False)
    assert normalize_win32("C:/a/./b/../c. /d ") == "C:\\a\\c\\d"
    assert normalize_win32("C:\\..\\..\\x") == "C:\\x"
    assert expand_short_names("C:\\PROGRA~1\\app", FS) == "C:\\Program Files\\app"
    assert expand_short_names("C:\\NOPE~1\\app", FS) == "C:\\NOPE~1\\app"
    assert fold_case("stra\u00dfe") == "STRA\u00dfE"  # simple upper-case table: ß stays
    for bad in ("", "a\x00b", "C:relative", "\\rooted", "\\\\server"):
        with pytest.raises(InvalidArguments):
            resolve_windows_path(bad, ROOTS, FS)
