"""Every simple command a shell command line would run, read with a real shell parser.

:func:`parse_command` turns ``git status && echo $(curl x) > out`` into the
simple commands the shell would run (``git status``, ``echo …``, ``curl x``),
the files it would write through redirections (``out``), and the parts that
cannot be known without running it (*unresolved*: ``eval``, a variable in
command position, a function definition, a parse error, …).

The parser is tree-sitter-bash (a maintained, complete bash grammar in C; the
pure-Python ``bashlex`` was measured and set aside: no ``case``, ``[[``,
``$((…))`` or ``time``, ``$'…'`` read wrongly, 0.2-1.8 ms a parse and 360 ms
to import, against 3-30 µs here). tree-sitter recovers from errors, so any
``ERROR`` or ``MISSING`` node makes the whole command unresolved.

Contract (what a caller may rely on):

- Every command the shell could run appears either as a :class:`SimpleCommand`
  or as an :class:`Unresolved` part. The walk is a whitelist: a node type it
  does not know is unresolved (and its insides are still searched for
  commands, so a deny rule can still see them).
- A :class:`Word` is ``literal`` only when its value is known exactly after
  quote removal (``"r""m"`` is ``rm``). Anything the shell would expand
  (variables, substitutions, globs, braces, ``~``, ``$'…'``) is not literal:
  its ``text`` is the source, and matchers must treat it as "could be any
  number of words of any content".
- Wrappers that only run their argument (``env``, ``command``, ``exec``,
  ``nice``, ``nohup``, ``timeout``, ``stdbuf``, ``time``, ``builtin``,
  ``xargs``, ``taskset``, ``unshare``, ``strace``, ``script -c``, …, ``sh
  -c``/``bash -c`` recursively) are looked through: the inner command is
  reported, with the wrappers in ``via``. ``sudo``/``doas`` and ``find -exec``
  report the outer command *and* the inner one. That list is a fast filter:
  a program on no list is reported as itself and is not ``known``.
- The line is *resolved* (:attr:`ShellParse.resolved`) only when nothing in
  it becomes code or words at run time: a command or process substitution,
  a backquote (anywhere, ``${x:-`…`}`` included), ``eval``/``source``, a
  shell or interpreter fed its input (``sh -``, ``sh /dev/stdin``,
  ``python3 -``) or code as text (``-c``/``-e`` of any interpreter, an
  ``awk`` program that can start commands, ``sed`` ``e``/``w``, ``git -c``,
  ``tar --checkpoint-action``, ``make --eval``), ``xargs`` giving its input
  to such a program, a script file the same line may have written (``echo …
  > s; sh s``) are each an :class:`Unresolved` part. The commands inside
  them are still reported where they can be read (a backquote's text is
  unescaped and parsed again), so a deny rule sees them.
- ``SimpleCommand.known``: the program is one the judge knows starts no
  program other than those reported (``._shellprograms.STARTS_NO_PROGRAM``).

Not promised: the parse follows bash; ``run_shell`` runs ``/bin/sh`` (dash,
busybox), whose differences (no ``$'…'``, ``{a,b}``, ``<(…)``) only make
constructs this module already treats as non-literal or unresolved literal
text there. Names are not resolved: ``./git`` is not ``git`` (allow rules
compare the command name exactly; deny rules compare its last component).

Where the parts live: the values in :mod:`._shellparts`, the tree walk in
:mod:`._shelltree`, the wrappers looked through in :mod:`._shellwrappers`, the
programs whose arguments are code (and those that start nothing) in
:mod:`._shellprograms`; this module parses (bounds, cache) and is the one its
callers import.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from ._shellparts import (
    MAX_COMMAND_CHARS,
    MAX_DEPTH,
    Accumulator,
    Redirect,
    ShellParse,
    SimpleCommand,
    Unresolved,
    Word,
)
from ._shellprograms import check_scripts
from ._shelltree import Walker
from ._shellwrappers import emit_command

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


def _parse_into(command: str, depth: int, via: tuple[str, ...], acc: Accumulator) -> None:
    if depth > MAX_DEPTH:
        acc.unresolved_(f"nested deeper than {MAX_DEPTH} shells", command)
        return
    if len(command) > MAX_COMMAND_CHARS:
        acc.unresolved_(f"longer than {MAX_COMMAND_CHARS} characters", command)
        return
    if "\x00" in command:
        acc.unresolved_("contains a NUL character", command)
        return
    if _CONTINUATION.search(command):
        acc.unresolved_("contains a backslash-newline line continuation", command)
        return
    src = command.encode("utf-8", "surrogatepass")
    tree = _parser().parse(src)
    root = tree.root_node
    if root.has_error:
        acc.unresolved_(
            "the shell parser cannot read it (unbalanced quotes or bad syntax)", command
        )
        # Still look for commands inside, so a deny rule can see them.
    Walker(acc, depth, via, src).statement(root)
