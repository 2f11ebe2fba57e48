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
import tomllib
from collections.abc import Mapping

__all__ = ["KeyPath", "line_of", "toml_error_line", "toml_key_lines"]

KeyPath = tuple[str | int, ...]

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


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
