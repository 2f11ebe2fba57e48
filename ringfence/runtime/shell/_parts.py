"""What a shell command line would do, as values: the words, commands and redirections found.

:class:`ShellParse` is what :func:`._words.parse_command` returns; its
parts are :class:`SimpleCommand` (made of :class:`Word`), :class:`Redirect` and
:class:`Unresolved`. :class:`Accumulator` collects them during one parse (the
tree walk of :mod:`._tree` and the wrappers of :mod:`._wrappers`
append to it); it carries the parser itself, so a wrapper that hands a string
to a shell (``sh -c``) parses that string without importing the parser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_DEPTH",
    "Accumulator",
    "Redirect",
    "ShellParse",
    "SimpleCommand",
    "Unresolved",
    "Word",
]

# Bounds: a longer command, or deeper sh -c nesting, is unresolved rather than parsed
# (parsing is linear, but a caller-controlled size should still have a stated limit).
MAX_COMMAND_CHARS = 100_000
MAX_DEPTH = 8


@dataclass(frozen=True)
class Word:
    """One shell word: its value after quote removal when ``literal``, else its source text."""

    text: str
    literal: bool = True

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class SimpleCommand:
    """One command the shell would run: its words and the wrappers it was found inside.

    ``known``: the judge knows this program starts no program but the commands reported
    with it (a fixed list of programs, or a wrapper read whole); every other program may
    start anything. ``script``: the file whose text the program runs as code (``sh FILE``,
    ``python3 FILE``, ``make -f FILE``), judged against what the same line writes.
    """

    argv: tuple[Word, ...]
    via: tuple[str, ...] = ()
    # Extra words a wrapper appends at run time (xargs): the argv may go on with anything.
    open_tail: bool = False
    known: bool = False
    script: Word | None = None

    def display(self) -> str:
        words = " ".join(w.text if w.literal else f"⟨{w.text}⟩" for w in self.argv)
        if self.open_tail:
            words += " ⟨…⟩"
        return words


@dataclass(frozen=True)
class Redirect:
    """A file a redirection opens: for writing (``>``, ``>>``, ``&>``, ``<>``) or reading."""

    path: Word
    write: bool
    operator: str


@dataclass(frozen=True)
class Unresolved:
    """A part whose effect cannot be known without running it."""

    reason: str
    text: str


@dataclass(frozen=True)
class ShellParse:
    """What a command line would do, as far as it can be known statically.

    The line is *resolved* when ``unresolved`` is empty: then ``commands`` are every
    program the shell itself would start, each with words the judge read.
    """

    commands: tuple[SimpleCommand, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    unresolved: tuple[Unresolved, ...] = ()
    # A cd/pushd/popd appears: relative redirection targets are relative to an unknown cwd.
    changes_directory: bool = False
    # Some of the line's own syntax was not read (a parse error, a part the parser dropped,
    # a line not parsed at all): its redirections were not all seen.
    damaged: bool = False

    @property
    def resolved(self) -> bool:
        """Whether the whole line was read: nothing in it becomes code only at run time."""
        return not self.unresolved


@dataclass
class Accumulator:
    """What one parse has found so far; ``parse`` reads a nested shell string (``sh -c``)."""

    parse: Callable[[str, int, tuple[str, ...]], ShellParse]
    commands: list[SimpleCommand] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    cd: bool = False
    damaged: bool = False  # see ShellParse.damaged

    def unresolved_(self, reason: str, text: str) -> None:
        self.unresolved.append(Unresolved(reason, text[:200]))

    def merge(self, sub: ShellParse) -> None:
        """Add what a nested parse (``sh -c``, a backquote's text) found."""
        self.commands.extend(sub.commands)
        self.redirects.extend(sub.redirects)
        self.unresolved.extend(sub.unresolved)
        self.cd = self.cd or sub.changes_directory
        self.damaged = self.damaged or sub.damaged

    def freeze(self) -> ShellParse:
        return ShellParse(
            tuple(self.commands),
            tuple(self.redirects),
            tuple(self.unresolved),
            self.cd,
            self.damaged,
        )
