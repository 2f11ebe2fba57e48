"""Where each key of a TOML text is: the line numbers ``tomllib`` does not give.

:func:`toml_key_lines` maps every key path to the line it is written on. A
path is spelled the way the parsed data is indexed: table and key names as
strings, the position in an array of tables (``[[server]]``) or in an inline
array as an int, so ``("server", 1, "env", "LOG")`` is ``LOG`` in the second
``[[server]]``'s ``[server.env]`` and ``("deny", 2)`` is the third string of
``deny = [...]``. An array of tables' own path (``("server", 1)``) is its
header's line.

Promise: for text ``tomllib`` accepts, the lines are right, strings (also
multi-line ones holding ``[[server]]`` or ``#``) and comments included. The
scanner is for messages only: values are never read from it, and on text
that is not TOML it stops early and returns what it found (never raises).
"""

from __future__ import annotations

import bisect
import contextlib
import re
import tomllib
from collections.abc import Mapping
from typing import Any

__all__ = ["KeyPath", "line_of", "load_toml", "toml_error_line", "toml_key_lines"]

KeyPath = tuple[str | int, ...]

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


# What one TOML text may spend of ``tomllib``'s time and stack: the parts of one dotted key
# (``a.b.c = 1``: its cost grows with the square of the parts; 8,000 parts in 16 KB took
# 3.7 s, 100,000 in a 200 KB project policy file held every session's start for minutes), and
# arrays and inline tables open at once (each level is a recursion: 5,000 of them ended in
# "unexpected error: RecursionError").
MAX_KEY_PARTS = 64
MAX_TOML_NESTING = 64

# The next character that changes the cost scan's state (everything between is a bare-key
# character, a space or a tab, which neither ends a dotted key nor opens anything).
_NEXT = re.compile(r"[^A-Za-z0-9_\- \t]")
_BASIC_END = re.compile(r'(?:[^"\\\n]|\\.)*"')
_ML_BASIC_END = re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""', re.DOTALL)


def load_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)`` within :data:`MAX_KEY_PARTS` and :data:`MAX_TOML_NESTING`.

    Everything wrong is a ``tomllib.TOMLDecodeError`` whose message names the line (as
    ``tomllib``'s do, read by :func:`toml_error_line`): text past a bound is refused before
    ``tomllib`` sees it, and an integer longer than Python converts (``ValueError``, no
    position) is one too. Every ringfence file an agent may write (a project's policy, a
    workspace's ``mcp.toml``, a plugin lying in a workspace) is read through here.
    """
    _check_cost(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except RecursionError:  # pragma: no cover - the nesting bound comes first
        raise tomllib.TOMLDecodeError(
            f"nested deeper than this reader can follow (the bound is {MAX_TOML_NESTING})"
        ) from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise tomllib.TOMLDecodeError(f"a value that cannot be read ({exc})") from None


def _check_cost(text: str) -> None:
    """Raise ``TOMLDecodeError`` (with its line) for a dotted key of more than
    :data:`MAX_KEY_PARTS` parts or brackets nested deeper than :data:`MAX_TOML_NESTING`.

    Strings (quoted key parts included) and comments are skipped as TOML reads them, so a
    dot inside a string value or a comment is not a key's; any other character that is not
    a bare-key one, a space or a tab ends a dotted key (``=``, ``,``, a newline, a bracket).
    """
    dots = depth = 0
    i, end = 0, len(text)

    def refuse(where: int, what: str) -> tomllib.TOMLDecodeError:
        line = text.count("\n", 0, where) + 1
        column = where - (text.rfind("\n", 0, where) + 1) + 1
        return tomllib.TOMLDecodeError(f"{what} (at line {line}, column {column})")

    while True:
        found = _NEXT.search(text, i)
        if found is None:
            return
        at = found.start()
        ch = text[at]
        i = at + 1
        if ch == ".":
            dots += 1
            if dots >= MAX_KEY_PARTS:
                raise refuse(at, f"a dotted key of more than {MAX_KEY_PARTS} parts")
            continue
        if ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, at) else ch
            start = at + len(quote)
            if ch == "'":
                close = text.find(quote, start)
                i = end if close == -1 else close + len(quote)
            else:
                closed = (_ML_BASIC_END if len(quote) == 3 else _BASIC_END).match(text, start)
                i = end if closed is None else closed.end()
            # a multi-line string may end in up to two more quotes of its own
            extra = 0
            while len(quote) == 3 and extra < 2 and i < end and text[i] == ch:
                i += 1
                extra += 1
            continue  # a quoted key part: the dotted key goes on
        dots = 0
        if ch == "#":
            newline = text.find("\n", i)
            i = end if newline == -1 else newline
        elif ch in "[{":
            depth += 1
            if depth > MAX_TOML_NESTING:
                raise refuse(at, f"arrays or tables nested more than {MAX_TOML_NESTING} deep")
        elif ch in "]}":
            depth = max(depth - 1, 0)


def toml_key_lines(text: str) -> dict[KeyPath, int]:
    """Every key path of ``text`` and its 1-based line (the first, if written twice)."""
    scan = _Scan(text)
    # not TOML: the lines found so far are still right
    with contextlib.suppress(IndexError, ValueError, tomllib.TOMLDecodeError):
        scan.document()
    return scan.out


def line_of(lines: Mapping[KeyPath, int], path: KeyPath) -> int | None:
    """The line of ``path``, else of its nearest enclosing key that has one."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


def toml_error_line(error: tomllib.TOMLDecodeError) -> tuple[int | None, str]:
    """A decode error's line and its message without the position (3.11 has no ``lineno``)."""
    line = getattr(error, "lineno", None)
    message = getattr(error, "msg", None) or str(error)
    if line is None:
        import re

        found = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if found:
            line = int(found.group(1))
            message = message.replace(found.group(0), f" (column {found.group(2)})")
    else:
        message = f"{message} (column {getattr(error, 'colno', '?')})"
    return line, message


class _Scan:
    """A small recursive-descent reader of TOML's structure (keys, headers, arrays, strings)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.newlines = [n for n, ch in enumerate(text) if ch == "\n"]
        self.out: dict[KeyPath, int] = {}
        self.arrays: dict[KeyPath, int] = {}  # array-of-tables path -> tables so far

    def line(self) -> int:
        return bisect.bisect_left(self.newlines, self.i) + 1

    def peek(self, n: int = 1) -> str:
        return self.text[self.i : self.i + n]

    def record(self, path: KeyPath, line: int) -> None:
        self.out.setdefault(path, line)

    def skip_space(self, newlines: bool) -> None:
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch in " \t\r" or (newlines and ch == "\n"):
                self.i += 1
            elif ch == "#":
                end = self.text.find("\n", self.i)
                self.i = len(self.text) if end == -1 else end
            else:
                return

    def document(self) -> None:
        table: KeyPath = ()
        while True:
            self.skip_space(newlines=True)
            if self.i >= len(self.text):
                return
            line = self.line()
            if self.peek(2) == "[[":
                self.i += 2
                parts = self.key("]")
                self.i += 2
                base = (*self.resolve(parts[:-1]), parts[-1])
                index = self.arrays.get(base, 0)
                self.arrays[base] = index + 1
                table = (*base, index)
                self.record(base, line)
                self.record(table, line)
            elif self.peek() == "[":
                self.i += 1
                parts = self.key("]")
                self.i += 1
                table = self.resolve(parts)
                self.record(table, line)
            else:
                parts = self.key("=")
                self.i += 1
                for end in range(1, len(parts) + 1):
                    self.record((*table, *parts[:end]), line)
                self.value((*table, *parts))

    def resolve(self, parts: tuple[str, ...]) -> KeyPath:
        """A header's path with the current index after each array of tables in it."""
        path: KeyPath = ()
        for part in parts:
            path = (*path, part)
            if path in self.arrays:
                path = (*path, self.arrays[path] - 1)
        return path

    def key(self, stop: str) -> tuple[str, ...]:
        """A dotted key up to (not past) ``stop``."""
        parts: list[str] = []
        while True:
            self.skip_space(newlines=False)
            ch = self.peek()
            if ch in "\"'":
                start = self.i
                self.string()
                parts.append(tomllib.loads("k = " + self.text[start : self.i])["k"])
            else:
                start = self.i
                while self.i < len(self.text) and self.text[self.i] in _BARE:
                    self.i += 1
                if self.i == start:
                    raise ValueError("no key")
                parts.append(self.text[start : self.i])
            self.skip_space(newlines=False)
            if self.peek() == ".":
                self.i += 1
                continue
            if self.peek() != stop:
                raise ValueError("no key end")
            return tuple(parts)

    def string(self) -> None:
        quote = self.peek(3) if self.peek(3) in ('"""', "'''") else self.peek()
        self.i += len(quote)
        while self.i < len(self.text):
            if quote[0] == '"' and self.text[self.i] == "\\":
                self.i += 2
            elif self.peek(len(quote)) == quote:
                self.i += len(quote)
                # a multi-line string may end in up to two more quotes of its own
                while len(quote) == 3 and self.peek() == quote[0]:
                    self.i += 1
                return
            else:
                self.i += 1
        raise ValueError("unterminated string")

    def value(self, path: KeyPath) -> None:
        self.skip_space(newlines=False)
        ch = self.peek()
        if ch in "\"'":
            self.string()
        elif ch == "[":
            self.i += 1
            index = 0
            while True:
                self.skip_space(newlines=True)
                if self.peek() == "]":
                    self.i += 1
                    return
                self.record((*path, index), self.line())
                self.value((*path, index))
                self.skip_space(newlines=True)
                if self.peek() == ",":
                    self.i += 1
                    index += 1
                elif self.peek() != "]":
                    raise ValueError("no array end")
        elif ch == "{":
            self.i += 1
            while True:
                self.skip_space(newlines=False)
                if self.peek() == "}":
                    self.i += 1
                    return
                if self.peek() == ",":
                    self.i += 1
                    continue
                line = self.line()
                parts = self.key("=")
                self.i += 1
                self.record((*path, *parts), line)
                self.value((*path, *parts))
                self.skip_space(newlines=False)
                if self.peek() not in ",}":
                    raise ValueError("no inline table end")
        else:
            while self.i < len(self.text) and self.text[self.i] not in ",]}\n#":
                self.i += 1
