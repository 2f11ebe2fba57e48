"""Every simple command a shell command line would run, read with a real shell parser.

:func:`parse_command` turns ``git status && echo $(curl x) > out`` into the simple commands the
shell would run, the files its redirections write, and the parts that cannot be known without
running it (*unresolved*). The parser is tree-sitter-bash; any parse error makes the line
unresolved. Every command the shell could run appears as a :class:`SimpleCommand` or an
:class:`Unresolved` part: the walk is a whitelist, and a node type it does not know is
unresolved. The values live in :mod:`._parts`, the walk in :mod:`._tree`, the wrappers looked
through in :mod:`._wrappers`, the programs whose arguments are code in :mod:`._programs`.

The contract in full, why not bashlex (measured), and what is not promised:
docs/design/shell-words.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from ._parts import (
    MAX_COMMAND_CHARS,
    MAX_DEPTH,
    Accumulator,
    Redirect,
    ShellParse,
    SimpleCommand,
    Unresolved,
    Word,
)
from ._programs import check_scripts
from ._tree import Walker
from ._wrappers import emit_command

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_DEPTH",
    "Redirect",
    "ShellParse",
    "SimpleCommand",
    "Unresolved",
    "Word",
    "parse_argv",
    "parse_command",
]


@functools.cache
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


# Command lines up to this long are cached (bounded memory: 2048 entries of at most this).
_CACHE_CHARS = 4096


def parse_command(command: str) -> ShellParse:
    """Parse a shell command line (as ``sh -c`` would get it). Never raises."""
    if len(command) > _CACHE_CHARS:
        return _parse_uncached(command, 0, ())
    return _parse_cached(command, 0, ())


def parse_argv(argv: Sequence[str]) -> ShellParse:
    """The simple commands an argv list run without a shell would run (wrappers looked through)."""
    acc = Accumulator(_parse_cached)
    emit_command(tuple(Word(a) for a in argv), (), acc, 0, " ".join(argv))
    check_scripts(acc)
    return acc.freeze()


def _parse_uncached(command: str, depth: int, via: tuple[str, ...]) -> ShellParse:
    acc = Accumulator(_parse_cached)
    _parse_into(command, depth, via, acc)
    if depth == 0:  # the whole line: nested parses were merged into it
        check_scripts(acc)
    return acc.freeze()


_parse_small = functools.lru_cache(maxsize=2048)(_parse_uncached)


def _parse_cached(command: str, depth: int, via: tuple[str, ...]) -> ShellParse:
    if len(command) > _CACHE_CHARS:
        return _parse_uncached(command, depth, via)
    return _parse_small(command, depth, via)


# A backslash-newline is removed by bash's lexer before it splits words; tree-sitter-bash
# splits there instead (`cu\<nl>rl` would read as `cu rl`). Rather than re-lex, refuse.
_CONTINUATION = re.compile(r"\\\r?\n")
# tree-sitter-bash skips these as blanks; bash and dash split words on space, tab and newline
# only, so to them each is part of a word (and a `#` after one starts no comment).
_BLANKS_TO_THE_PARSER_ONLY = re.compile(r"[\r\v\f]")
# bash's named descriptor, `{varname}>file` (also `<`, `>&`, …), the name perhaps subscripted.
_NAMED_DESCRIPTOR = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(?:\[[^\n]*?\])?\}[<>]")


def _parse_into(command: str, depth: int, via: tuple[str, ...], acc: Accumulator) -> None:
    if depth > MAX_DEPTH:
        acc.unresolved_(f"nested deeper than {MAX_DEPTH} shells", command)
        acc.damaged = True  # not parsed: its redirections were not seen
        return
    if len(command) > MAX_COMMAND_CHARS:
        acc.unresolved_(f"longer than {MAX_COMMAND_CHARS} characters", command)
        acc.damaged = True  # not parsed: its redirections were not seen
        return
    if "\x00" in command:
        acc.unresolved_("contains a NUL character", command)
        acc.damaged = True  # not parsed: its redirections were not seen
        return
    if _CONTINUATION.search(command):
        acc.unresolved_("contains a backslash-newline line continuation", command)
        acc.damaged = True  # not parsed: its redirections were not seen
        return
    if _NAMED_DESCRIPTOR.search(command):
        # tree-sitter-bash reads `{a[…]}>f` as a word and a redirection: bash assigns the
        # descriptor to the variable, and a subscript in its name is arithmetic (runs `$(…)`)
        acc.unresolved_(
            "bash's `{name}>`: assigns the descriptor to a variable, evaluating a subscript "
            "in its name",
            command,
        )
    if _BLANKS_TO_THE_PARSER_ONLY.search(command):
        acc.unresolved_(
            "contains a carriage return, vertical tab or form feed (part of a word to the shell, "
            "a blank to this parser: `ls \\r#; rm x` runs rm)",
            command,
        )
        acc.damaged = True  # not parsed: its redirections were not seen
        return
    src = command.encode("utf-8", "surrogatepass")
    tree = _parser().parse(src)
    root = tree.root_node
    if root.has_error:
        acc.unresolved_(
            "the shell parser cannot read it (unbalanced quotes or bad syntax)", command
        )
        acc.damaged = True  # `ls 1<>f` is read as `ls 1<f`: a write seen as a read
        # Still look for commands inside, so a deny rule can see them.
    Walker(acc, depth, via, src).statement(root)
