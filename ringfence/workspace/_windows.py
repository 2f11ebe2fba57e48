"""Windows path spelling rules, as pure functions (tested on Linux).

Windows names one file many ways: case differs, ``\\\\?\\`` extended-length
paths skip normalization, 8.3 short names (``PROGRA~1``) alias long ones,
trailing dots and spaces are dropped (``alias.`` opens ``alias``), device
names (``NUL``, ``COM1``, ``CONOUT$``) are not files at all, and ``name:stream``
opens an alternate data stream. A confinement check must compare one spelling
and open the spelling it checked. :func:`resolve_windows_path` does that; the
two questions only the OS can answer (the long name of an existing path, and
whether two spellings open the same file) go through :class:`WindowsFileSystem`
so a real implementation (``GetLongPathNameW``, file ids) slots in later.

Nothing here touches the file system of the machine it runs on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..runtime._errors import InvalidArguments, OutsideWorkspace

__all__ = [
    "WindowsFileSystem",
    "WindowsPath",
    "component_problem",
    "expand_short_names",
    "fold_case",
    "is_reserved_name",
    "normalize_win32",
    "resolve_windows_path",
    "split_prefix",
]


class WindowsFileSystem(Protocol):
    """The OS calls the Windows rules need; a Windows build implements these."""

    def long_path(self, path: str) -> str | None:
        """The long spelling of an existing path (``GetLongPathNameW``), else None."""
        ...

    def same_file(self, a: str, b: str) -> bool:
        """Do both spellings open the same file (volume serial and file id)?"""
        ...


_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"]
    + [f"{dev}{n}" for dev in ("COM", "LPT") for n in [*"123456789", "¹", "²", "³"]]
)
_INVALID_CHARS = frozenset('<>:"|?*') | frozenset(chr(c) for c in range(32))
_SHORT_NAME = re.compile(r"~[0-9]")


def fold_case(text: str) -> str:
    """Windows compares names case-insensitively with a simple upper-case table."""
    return "".join(c.upper() if len(c.upper()) == 1 else c for c in text)


def is_reserved_name(name: str) -> bool:
    """``CON``, ``NUL.txt``, ``com1 .c``, ``CONOUT$``: device names in any dress."""
    base = name.split(".", 1)[0].rstrip(" ")
    return fold_case(base) in _RESERVED


def component_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Windows file name component, or None if it can."""
    if is_reserved_name(name):
        return f"{name!r} is a reserved device name on Windows"
    if ":" in name:
        return f"{name!r} names an alternate data stream"
    if any(c in _INVALID_CHARS for c in name):
        return f"{name!r} contains a character Windows does not allow in names"
    if name and name[-1] in ". ":
        return f"{name!r} ends in a dot or space, which Windows drops"
    return None


def split_prefix(path: str) -> tuple[str, bool]:
    """Remove an extended-length prefix: ``(ordinary spelling, had_prefix)``.

    ``\\\\?\\C:\\x`` → ``C:\\x``; ``\\\\?\\UNC\\srv\\share\\x`` → ``\\\\srv\\share\\x``.
    The device namespace (``\\\\.\\``), ``\\\\?\\GLOBALROOT`` and NT paths
    (``\\??\\``) never name a workspace file and are refused.
    """
    unified = path.replace("/", "\\")
    if unified.startswith("\\\\.\\") or unified.startswith("\\??\\"):
        raise OutsideWorkspace(
            f"{path!r} is a device-namespace path; it never names a workspace file",
            field="path",
        )
    if unified.startswith("\\\\?\\"):
        rest = path[4:]
        if fold_case(rest.replace("/", "\\")).startswith("GLOBALROOT"):
            raise OutsideWorkspace(
                f"{path!r} goes through \\\\?\\GLOBALROOT; it never names a workspace file",
                field="path",
            )
        if fold_case(rest[:4]) == "UNC\\":
            return "\\\\" + rest[4:], True
        return rest, True
    return path, False


def _split(path: str) -> tuple[str, list[str]]:
    """``(anchor, components)``: anchor is ``C:``, ``\\\\server\\share`` or ``""``."""
    p = path.replace("/", "\\")
    if p.startswith("\\\\"):
        parts = p[2:].split("\\")
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise InvalidArguments(f"{path!r} is an incomplete network path", field="path")
        return "\\\\" + parts[0] + "\\" + parts[1], parts[2:]
    if len(p) >= 2 and p[1] == ":" and p[0].isalpha():
        if len(p) == 2 or p[2] != "\\":
            raise InvalidArguments(
                f"{path!r} is relative to a drive's current directory; use a full path",
                field="path",
            )
        return p[:2], p[3:].split("\\")
    if p.startswith("\\"):
        raise InvalidArguments(
            f"{path!r} is relative to the current drive; use a full path", field="path"
        )
    return "", p.split("\\")


def normalize_win32(path: str) -> str:
    """What an ordinary (unprefixed) spelling opens: Win32's own normalization.

    Separators unified and collapsed, ``.`` and ``..`` applied (never above the
    anchor), and each name's trailing dots and spaces removed.
    """
    anchor, comps = _split(path)
    out: list[str] = []
    for c in comps:
        if c in ("", "."):
            continue
        if c == "..":
            if out:
                out.pop()
            continue
        stripped = c.rstrip(". ")
        if stripped:
            out.append(stripped)
    body = "\\".join(out)
    if not anchor:
        return body
    return anchor + "\\" + body if body else anchor + "\\"


def expand_short_names(path: str, fs: WindowsFileSystem) -> str:
    """Replace 8.3 short names (``PROGRA~1``) with long ones, for existing prefixes.

    Each prefix whose last name looks like a short name is asked of
    ``fs.long_path``; the answer's last component replaces it. Prefixes that
    do not exist keep their spelling (a name that does not exist has no alias).
    """
    anchor, comps = _split(path)
    done: list[str] = []
    for c in comps:
        done.append(c)
        if _SHORT_NAME.search(c):
            current = _join(anchor, done)
            long = fs.long_path(current)
            if long is not None:
                done[-1] = _split(long)[1][-1]
    return _join(anchor, done)


def _normalization_changes(path: str) -> bool:
    """Would Win32 normalization open something other than this literal spelling?"""
    _, comps = _split(path)
    body = comps[:-1] if comps and comps[-1] == "" else comps  # one trailing separator is harmless
    return "/" in path or any(c in ("", ".", "..") or c[-1] in ". " for c in body)


def _join(anchor: str, comps: Sequence[str]) -> str:
    body = "\\".join(comps)
    return f"{anchor}\\{body}" if anchor else body


@dataclass(frozen=True)
class WindowsPath:
    """The outcome of :func:`resolve_windows_path`."""

    open_path: str  # the spelling to open: the one that was checked
    root_index: int
    relative: tuple[str, ...]  # components below the root, in the checked spelling


def _components(path: str) -> tuple[str, tuple[str, ...]]:
    anchor, comps = _split(path)
    return anchor, tuple(c for c in comps if c)


def _inside(
    path_parts: tuple[str, tuple[str, ...]], root_parts: tuple[str, tuple[str, ...]]
) -> bool:
    (pa, pc), (ra, rc) = path_parts, root_parts
    if fold_case(pa) != fold_case(ra) or len(pc) < len(rc):
        return False
    return all(fold_case(a) == fold_case(b) for a, b in zip(pc, rc, strict=False))


def resolve_windows_path(path: str, roots: Sequence[str], fs: WindowsFileSystem) -> WindowsPath:
    """Map a model's path to one spelling inside one of ``roots``, or refuse.

    Order matters: the extended-length prefix is removed (refusing ``\\\\.\\``
    and ``GLOBALROOT``); a prefixed path is opened without its prefix only if
    Win32 normalization leaves it unchanged or ``fs.same_file`` says both
    spellings open one file (``\\\\?\\C:\\ws\\alias.`` names ``alias.``, which
    the ordinary spelling would read as ``alias``); relative paths join the
    first root; short names are expanded; every name is checked for device
    names and streams; then roots are compared case-insensitively, by whole
    components (``C:\\ws-evil`` is not inside ``C:\\ws``).

    Raises InvalidArguments (bad spelling) or OutsideWorkspace.
    """
    if "\x00" in path:
        raise InvalidArguments("the path contains a NUL character", field="path")
    if not path:
        raise InvalidArguments("the path is empty", field="path")
    if not roots:
        raise InvalidArguments("no workspace roots are configured", field="roots")
    ordinary, had_prefix = split_prefix(path)
    anchor, _ = _split(ordinary)
    if had_prefix and not anchor:
        # \\?\Volume{guid}\x, \\?\pipe\x, \\?\x: an NT object name, never a path below
        # the first root (it was joined to the root and opened there, a different file).
        raise OutsideWorkspace(
            f"{path!r} names an NT object (a volume, pipe or device) after \\\\?\\, not a "
            "drive or network path; it never names a workspace file",
            field="path",
        )
    if not anchor:
        ordinary = roots[0].rstrip("\\/") + "\\" + ordinary
    normalized = normalize_win32(ordinary)
    if had_prefix and _normalization_changes(ordinary) and not fs.same_file(path, normalized):
        raise InvalidArguments(
            f"{path!r} names a file that its ordinary spelling {normalized!r} would not "
            "open (Windows drops trailing dots and spaces and applies '.' and '..' only "
            "without the \\\\?\\ prefix); refusing to open a different file than the one checked",
            field="path",
        )
    expanded = expand_short_names(normalized, fs)
    parts = _components(expanded)
    for name in parts[1]:
        if (problem := component_problem(name)) is not None:
            raise InvalidArguments(f"{path!r}: {problem}", field="path")
    best: tuple[int, int] | None = None
    for i, root in enumerate(roots):
        root_parts = _components(normalize_win32(root))
        if _inside(parts, root_parts) and (best is None or len(root_parts[1]) > best[1]):
            best = (i, len(root_parts[1]))
    if best is None:
        raise OutsideWorkspace(
            f"{path!r} is outside the workspace roots ({', '.join(roots)})", field="path"
        )
    index, depth = best
    return WindowsPath(expanded, index, parts[1][depth:])
