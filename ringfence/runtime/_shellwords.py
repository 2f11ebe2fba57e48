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
  ``xargs``, ``sh -c``/``bash -c`` recursively) are looked through: the inner
  command is reported, with the wrappers in ``via``. ``sudo``/``doas`` and
  ``find -exec`` report the outer command *and* the inner one.

Not promised: the parse follows bash; ``run_shell`` runs ``/bin/sh`` (dash,
busybox), whose differences (no ``$'…'``, ``{a,b}``, ``<(…)``) only make
constructs this module already treats as non-literal or unresolved literal
text there. Names are not resolved: ``./git`` is not ``git`` (allow rules
compare the command name exactly; deny rules compare its last component).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    """One command the shell would run: its words and the wrappers it was found inside."""

    argv: tuple[Word, ...]
    via: tuple[str, ...] = ()
    # Extra words a wrapper appends at run time (xargs): the argv may go on with anything.
    open_tail: bool = False

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
    """What a command line would do, as far as it can be known statically."""

    commands: tuple[SimpleCommand, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    unresolved: tuple[Unresolved, ...] = ()
    # A cd/pushd/popd appears: relative redirection targets are relative to an unknown cwd.
    changes_directory: bool = False


@dataclass
class _Acc:
    commands: list[SimpleCommand] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    cd: bool = False

    def unresolved_(self, reason: str, text: str) -> None:
        self.unresolved.append(Unresolved(reason, text[:200]))

    def freeze(self) -> ShellParse:
        return ShellParse(
            tuple(self.commands), tuple(self.redirects), tuple(self.unresolved), self.cd
        )


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
    acc = _Acc()
    _emit_command(tuple(Word(a) for a in argv), (), acc, 0, " ".join(argv))
    return acc.freeze()


def _parse_uncached(command: str, depth: int, via: tuple[str, ...]) -> ShellParse:
    acc = _Acc()
    _parse_into(command, depth, via, acc)
    return acc.freeze()


_parse_small = functools.lru_cache(maxsize=2048)(_parse_uncached)


def _parse_cached(command: str, depth: int, via: tuple[str, ...]) -> ShellParse:
    if len(command) > _CACHE_CHARS:
        return _parse_uncached(command, depth, via)
    return _parse_small(command, depth, via)


# A backslash-newline is removed by bash's lexer before it splits words; tree-sitter-bash
# splits there instead (`cu\<nl>rl` would read as `cu rl`). Rather than re-lex, refuse.
_CONTINUATION = re.compile(r"\\\r?\n")


def _parse_into(command: str, depth: int, via: tuple[str, ...], acc: _Acc) -> None:
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
    _Walker(acc, depth, via, src).statement(root)


# Statement-level containers whose named children are statements.
_CONTAINERS = frozenset(
    {
        "program",
        "list",
        "pipeline",
        "subshell",
        "compound_statement",
        "do_group",
        "negated_command",
        "if_statement",
        "elif_clause",
        "else_clause",
        "while_statement",
    }
)
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
_READ_OPS = frozenset({"<", "<&"})
# Builtins whose effect is to run text, define names, or change how later words resolve.
_UNRESOLVED_BUILTINS = {
    "eval": "eval runs a string as a command",
    "source": "source runs a file's commands",
    ".": ". runs a file's commands",
    "alias": "alias changes what names mean",
    "unalias": "unalias changes what names mean",
    "trap": "trap runs a string later",
    "enable": "enable changes what names mean",
    "shopt": "shopt changes how commands are read",
    "hash": "hash changes what names resolve to",
    "let": "let evaluates arithmetic, which can run commands",
    "read": "read assigns shell variables",
    "mapfile": "mapfile assigns shell variables",
    "readarray": "readarray assigns shell variables",
    "export": "export changes the environment of later commands",
    "declare": "declare assigns shell variables",
    "typeset": "typeset assigns shell variables",
    "local": "local assigns shell variables",
    "readonly": "readonly assigns shell variables",
    "coproc": "coproc runs a command in the background",
    "fc": "fc runs commands from history",
}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "rbash"})
_CD = frozenset({"cd", "pushd", "popd"})
_GLOB_CHARS = frozenset("*?[")


class _Walker:
    def __init__(self, acc: _Acc, depth: int, via: tuple[str, ...], src: bytes) -> None:
        self.acc = acc
        self.depth = depth
        self.via = via
        self.src = src

    def text(self, node: Any) -> str:
        # Slicing our own copy of the source is much cheaper than Node.text.
        return self.src[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    # -- statements ------------------------------------------------------------------

    def statement(self, node: Any) -> None:
        kind = node.type
        if kind == "command":  # the common case first
            self.command(node)
            return
        if kind in _CONTAINERS and kind != "program":
            for child in node.named_children:
                self.statement(child)
            return
        if not node.is_named or kind == "comment":
            return
        if node.is_missing or kind == "ERROR":
            self.acc.unresolved_("the shell parser cannot read this part", self.text(node))
            self.search(node)
            return
        if kind == "case_item":
            for index, child in enumerate(node.children):
                if not child.is_named:
                    continue
                if node.field_name_for_child(index) == "value":
                    self.word(child)  # a pattern is expanded: $(…) in it runs
                else:
                    self.statement(child)
        elif kind in _CONTAINERS:
            for child in node.named_children:
                self.statement(child)
        elif kind == "command":
            self.command(node)
        elif kind == "redirected_statement":
            for child in node.named_children:
                if child.type in _REDIRECTS:
                    self.redirect(child)
                else:
                    self.statement(child)
        elif kind in _REDIRECTS:
            self.redirect(node)
        elif kind in ("for_statement", "case_statement"):
            for child in node.named_children:
                if child.type in ("variable_name", "extglob_pattern"):
                    continue
                if child.type in ("do_group", "case_item"):
                    self.statement(child)
                else:
                    self.word(child)
        elif kind == "function_definition":
            self.acc.unresolved_(
                "defines a shell function (it can shadow any command)", self.text(node)
            )
            self.search(node)
        elif kind == "variable_assignment":
            self.acc.unresolved_("assigns a shell variable", self.text(node))
            self.search(node)
        elif kind in ("declaration_command", "unset_command"):
            self.acc.unresolved_("declares or unsets shell variables", self.text(node))
            self.search(node)
        elif kind == "test_command":
            # [ ] / [[ ]]: no effect of its own, but arithmetic on expanded values can run code.
            if self._has_expansion(node):
                self.acc.unresolved_("a test over expanded values", self.text(node))
            self.search(node)
        else:
            self.acc.unresolved_(
                f"shell syntax this matcher does not read ({kind})", self.text(node)
            )
            self.search(node)

    def search(self, node: Any) -> None:
        """Report the commands anywhere inside ``node`` (used where the node itself is unresolved)."""
        for child in node.named_children:
            if child.type == "command":
                self.command(child)
            elif child.type in ("command_substitution", "process_substitution"):
                for inner in child.named_children:
                    self.statement(inner)
            elif child.type in _REDIRECTS:
                self.redirect(child)
            else:
                self.search(child)

    def _has_expansion(self, node: Any) -> bool:
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type in (
                "simple_expansion",
                "expansion",
                "command_substitution",
                "process_substitution",
                "arithmetic_expansion",
            ):
                return True
            stack.extend(n.children)
        return False

    # -- words -----------------------------------------------------------------------

    def word(self, node: Any) -> Word:
        """The value of one word, walking any substitutions inside it as commands."""
        kind = node.type
        if kind == "word":
            return _unquoted_word(self.text(node))
        if kind == "number":
            return Word(self.text(node))
        if kind == "raw_string":
            return Word(self.text(node)[1:-1])
        if kind == "string":
            literal = True
            for child in node.named_children:
                if child.type != "string_content":
                    literal = False
                    self.word(child)
            raw = self.text(node)
            if literal and len(raw) >= 2 and raw[0] == raw[-1] == '"':
                # from the source, not string_content nodes (blank content has none)
                return Word(_unescape_double(raw[1:-1]))
            return Word(raw, False)
        if kind == "concatenation":
            values = [self.word(c) for c in node.named_children]
            text = self.text(node)
            braces = any(
                c.type == "word" and "{" in self.text(c) for c in node.named_children
            ) and ("," in text or ".." in text)
            # An unnamed child ($ before a quote, …) means a form this matcher does not read.
            if (
                not braces
                and all(v.literal for v in values)
                and all(c.is_named for c in node.children)
            ):
                return Word("".join(v.text for v in values))
            return Word(self.text(node), False)
        if kind in ("command_substitution", "process_substitution"):
            for inner in node.named_children:
                self.statement(inner)
            return Word(self.text(node), False)
        if kind in ("simple_expansion", "expansion", "arithmetic_expansion"):
            self.search(node)
            return Word(self.text(node), False)
        if kind in ("ansi_c_string", "translated_string", "brace_expression"):
            return Word(self.text(node), False)
        # Anything else in word position: not a value this matcher can know.
        self.search(node)
        return Word(self.text(node), False)

    # -- simple commands -------------------------------------------------------------

    def command(self, node: Any) -> None:
        words: list[Word] = []
        # (start, end) bytes of each word: tree-sitter-bash sometimes splits one shell word
        # in two (''\a is the single word "a"); touching words are joined back.
        spans: list[tuple[int, int]] = []
        children = node.children
        for child in children:
            kind = child.type
            if not child.is_named:
                if kind not in (";", "&"):
                    self.acc.unresolved_(f"unexpected token {kind!r}", self.text(node))
                continue
            if kind == "variable_assignment":
                self.acc.unresolved_(
                    "sets an environment variable for the command (it can change what runs)",
                    self.text(child),
                )
                self.search(child)
            elif kind in _REDIRECTS:
                self.redirect(child)
            elif kind == "command_name":
                inner = child.named_children
                if len(inner) != 1:
                    self.acc.unresolved_(
                        "a command name this matcher does not read", self.text(child)
                    )
                    self.search(child)
                    self._append(words, spans, child, Word(self.text(child), False))
                else:
                    self._append(words, spans, inner[0], self.word(inner[0]))
            elif kind != "comment":
                # every other named child is a word (an argument); word() is a whitelist
                self._append(words, spans, child, self.word(child))
        if _lost_text(self.src, node, children):
            self.acc.unresolved_("the shell parser dropped part of this command", self.text(node))
        if words:
            _emit_command(tuple(words), self.via, self.acc, self.depth, self.text(node))

    @staticmethod
    def _append(words: list[Word], spans: list[tuple[int, int]], node: Any, word: Word) -> None:
        if spans and spans[-1][1] == node.start_byte:
            prev = words[-1]
            if prev.literal and word.literal:
                joined = Word(prev.text + word.text)
            else:
                joined = Word(prev.text + word.text, False)
            words[-1] = joined
            spans[-1] = (spans[-1][0], node.end_byte)
            return
        words.append(word)
        spans.append((node.start_byte, node.end_byte))

    # -- redirections ----------------------------------------------------------------

    def redirect(self, node: Any) -> None:
        kind = node.type
        if kind == "herestring_redirect":
            for child in node.named_children:
                self.word(child)
            return
        if kind == "heredoc_redirect":
            quoted = False
            for child in node.named_children:
                if child.type == "heredoc_start":
                    quoted = any(q in self.text(child) for q in "'\"\\")
                elif child.type == "heredoc_body":
                    body = self.text(child)
                    if not quoted and any(s in body for s in ("`", "$(", "${")):
                        # tree-sitter-bash leaves backquotes in a body unparsed: do not rely on it
                        self.acc.unresolved_("a here-document runs substitutions", body)
                    if not quoted:
                        for part in child.named_children:
                            if part.type != "heredoc_content":
                                self.word(part)
                elif child.type in _REDIRECTS:
                    self.redirect(child)
                elif child.type not in ("heredoc_end",):
                    self.statement(child)
            return
        operator = next((c.type for c in node.children if not c.is_named), "")
        destination = node.child_by_field_name("destination")
        if destination is None:
            return  # >&- and friends: close a descriptor
        target = self.word(destination)
        if operator in (">&", "<&") and (
            destination.type == "number" or (target.literal and target.text in ("-",))
        ):
            return  # descriptor duplication, not a file
        if target.literal and target.text.startswith(("/dev/tcp/", "/dev/udp/")):
            # bash opens a network connection for these names
            self.acc.unresolved_("a redirection to a network connection", self.text(node))
            return
        if operator in _WRITE_OPS:
            self.acc.redirects.append(Redirect(target, True, operator))
        elif operator in _READ_OPS:
            self.acc.redirects.append(Redirect(target, False, operator))
        else:
            self.acc.unresolved_(
                f"a redirection this matcher does not read ({operator})", self.text(node)
            )


def _lost_text(src: bytes, node: Any, children: list[Any]) -> bool:
    """Whether anything but blanks lies between a command's parts (tree-sitter-bash drops a
    leading escaped blank, ``\\ a``, which the shell keeps as part of the word)."""
    cursor = node.start_byte
    for child in children:
        start = child.start_byte
        if start > cursor and src[cursor:start].strip(b" \t"):
            return True
        cursor = child.end_byte
    end = node.end_byte
    return end > cursor and bool(src[cursor:end].strip(b" \t"))


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./:=@%+,^-]+")


def _unquoted_word(raw: str) -> Word:
    """Quote removal for an unquoted ``word`` node; expansions make it non-literal."""
    if _PLAIN_WORD.fullmatch(raw) and not raw.startswith("~"):
        return Word(raw)  # nothing to remove or expand (the common case)
    out: list[str] = []
    i = 0
    n = len(raw)
    while i < n:
        ch = raw[i]
        if ch == "\\":
            if i + 1 < n:
                out.append(raw[i + 1])
            i += 2
            continue
        if ch in _GLOB_CHARS or ch == "$" or ch == "`":
            return Word(raw, False)
        if ch == "~" and i == 0:
            return Word(raw, False)
        if ch == "{" and ("," in raw[i:] or ".." in raw[i:]) and "}" in raw[i:]:
            return Word(raw, False)  # brace expansion
        out.append(ch)
        i += 1
    return Word("".join(out))


def _unescape_double(raw: str) -> str:
    """Backslash inside double quotes escapes only $ ` " \\ and newline."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\\n':
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


# -- wrappers ------------------------------------------------------------------------


def _emit_command(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str
) -> None:
    """Report ``argv``, looking through wrappers; recursion is bounded by MAX_DEPTH."""
    if depth > MAX_DEPTH:
        acc.unresolved_(f"wrapped deeper than {MAX_DEPTH} levels", text)
        return
    head = argv[0]
    if not head.literal:
        acc.unresolved_("the command name is computed at run time", text)
        acc.commands.append(SimpleCommand(argv, via))
        return
    name = head.text.rsplit("/", 1)[-1]
    if name in _UNRESOLVED_BUILTINS and name == head.text:
        acc.unresolved_(_UNRESOLVED_BUILTINS[name], text)
        acc.commands.append(SimpleCommand(argv, via))
        return
    if name in _CD:
        acc.cd = True
    unwrap = _WRAPPERS.get(name)
    if unwrap is None:
        acc.commands.append(SimpleCommand(argv, via))
        return
    unwrap(argv, (*via, name), acc, depth, text)


def _rest(
    argv: tuple[Word, ...], i: int, via: tuple[str, ...], acc: _Acc, depth: int, text: str
) -> None:
    if i < len(argv):
        _emit_command(argv[i:], via, acc, depth + 1, text)


def _options(
    argv: tuple[Word, ...],
    with_arg: Iterable[str],
    flags: Iterable[str],
    acc: _Acc,
    text: str,
    *,
    digits: bool = False,
) -> int | None:
    """Skip leading options; the index of the wrapped command, or None if one is not known."""
    with_arg = set(with_arg)
    flags = set(flags)
    i = 1
    while i < len(argv):
        w = argv[i]
        if not w.literal:
            acc.unresolved_("a wrapper option is computed at run time", text)
            return None
        t = w.text
        if t == "--":
            return i + 1
        if not t.startswith("-") or t == "-":
            return i
        if digits and t[1:].isdigit():
            i += 1
            continue
        key = t.split("=", 1)[0]
        if key in flags:
            i += 1
        elif key in with_arg:
            i += 1 if "=" in t else 2
        elif len(t) > 2 and t[:2] in with_arg and not t.startswith("--"):
            i += 1  # -n5, -oL: option and value in one word
        else:
            acc.unresolved_(f"wrapper option {t!r} is not one this matcher reads", text)
            return None
    return i


def _simple_wrapper(with_arg: Iterable[str], flags: Iterable[str], *, digits: bool = False) -> Any:
    def unwrap(
        argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str
    ) -> None:
        i = _options(argv, with_arg, flags, acc, text, digits=digits)
        if i is None:
            acc.commands.append(SimpleCommand(argv, via[:-1]))
            return
        _rest(argv, i, via, acc, depth, text)

    return unwrap


def _env(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    i = _options(
        argv,
        ("-u", "--unset", "-C", "--chdir"),
        ("-i", "--ignore-environment", "-0", "--null"),
        acc,
        text,
    )
    if i is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    while i < len(argv) and argv[i].literal and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[i].text):
        acc.unresolved_("env sets a variable for the command (it can change what runs)", text)
        i += 1
    if i >= len(argv):
        acc.commands.append(SimpleCommand(argv, via[:-1]))  # plain `env` prints the environment
        return
    _rest(argv, i, via, acc, depth, text)


def _command(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str
) -> None:
    if any(w.literal and w.text in ("-v", "-V") for w in argv[1:2]):
        acc.commands.append(SimpleCommand(argv, via[:-1]))  # only looks a name up
        return
    _simple_wrapper((), ("-p",))(argv, via, acc, depth, text)


def _timeout(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str
) -> None:
    i = _options(
        argv,
        ("-s", "--signal", "-k", "--kill-after"),
        ("--preserve-status", "--foreground", "-v", "--verbose"),
        acc,
        text,
    )
    if i is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    _rest(argv, i + 1, via, acc, depth, text)  # skip DURATION


def _shell(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    args = argv[1:]
    if argv[0].text.rsplit("/", 1)[-1] == "busybox":
        # busybox APPLET args runs the applet: `busybox wget …` is wget
        if not args:
            acc.commands.append(SimpleCommand(argv, via[:-1]))
            return
        if not args[0].literal or args[0].text not in ("sh", "ash"):
            _rest(argv, 1, via, acc, depth, text)
            return
        args = args[1:]
    i = 0
    has_c = False
    while i < len(args):
        w = args[i]
        if not w.literal:
            acc.unresolved_("a shell option is computed at run time", text)
            return
        t = w.text
        if t in ("-i", "-l", "--login", "--rcfile", "--init-file") or (
            t.startswith("-") and not t.startswith("--") and ("i" in t or "l" in t)
        ):
            # startup files (~/.bashrc, ~/.profile) run whatever they say first
            acc.unresolved_("a shell that reads startup files", text)
            return
        if t in ("-o", "+o", "-O", "+O"):
            i += 2
            continue
        if t == "--":
            i += 1
            break
        if t.startswith(("-", "+")) and len(t) > 1:
            if "c" in t[1:] and t.startswith("-"):
                has_c = True
            i += 1
            continue
        break
    if has_c:
        if i >= len(args):
            acc.unresolved_("sh -c without a command", text)
            return
        script = args[i]
        if not script.literal:
            acc.unresolved_("sh -c runs a string computed at run time", text)
            return
        sub = _parse_cached(script.text, depth + 1, via)
        acc.commands.extend(sub.commands)
        acc.redirects.extend(sub.redirects)
        acc.unresolved.extend(sub.unresolved)
        acc.cd = acc.cd or sub.changes_directory
        return
    if i >= len(args) or any(w.literal and w.text in ("-s", "-i") for w in args[:i]):
        acc.unresolved_("a shell reading commands from its input", text)
        return
    acc.commands.append(SimpleCommand(argv, via[:-1]))  # sh script.sh: a command of its own


def _xargs(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    i = _options(
        argv,
        (
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "-d",
            "-E",
            "-a",
            "--max-args",
            "--max-procs",
            "--delimiter",
            "--arg-file",
            "--max-lines",
            "--replace",
            "--eof",
            "--max-chars",
        ),
        ("-0", "--null", "-r", "--no-run-if-empty", "-t", "--verbose", "-x", "--exit", "-p"),
        acc,
        text,
    )
    if i is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    inner = argv[i:] or (Word("echo"),)
    before = len(acc.commands)
    _emit_command(inner, via, acc, depth + 1, text)
    # xargs appends words read from its input: the wrapped command's argv goes on unknown.
    for k in range(before, len(acc.commands)):
        c = acc.commands[k]
        acc.commands[k] = SimpleCommand(c.argv, c.via, open_tail=True)


def _sudo(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    acc.commands.append(SimpleCommand(argv, via[:-1]))  # the privilege change is a command itself
    i = _options(
        argv,
        ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"),
        (
            "-n",
            "-E",
            "-H",
            "-P",
            "-S",
            "-A",
            "-b",
            "-k",
            "-K",
            "--preserve-env",
            "--non-interactive",
        ),
        acc,
        text,
    )
    if i is None:
        return
    if i >= len(argv):
        acc.unresolved_(f"{argv[0].text} without a command", text)
        return
    _rest(argv, i, via, acc, depth, text)


def _find(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    acc.commands.append(SimpleCommand(argv, via[:-1]))
    i = 1
    while i < len(argv):
        w = argv[i]
        if w.literal and w.text in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            inner: list[Word] = []
            while j < len(argv) and not (argv[j].literal and argv[j].text in (";", "+")):
                inner.append(Word(argv[j].text, False) if "{}" in argv[j].text else argv[j])
                j += 1
            if inner:
                _emit_command(tuple(inner), via, acc, depth + 1, text)
            i = j + 1
        elif (
            w.literal
            and w.text in ("-fprint", "-fprint0", "-fprintf", "-fls")
            and i + 1 < len(argv)
        ):
            acc.redirects.append(Redirect(argv[i + 1], True, w.text))
            i += 2
        else:
            i += 1


def _run_string(
    script: Word, via: tuple[str, ...], acc: _Acc, depth: int, text: str, what: str
) -> None:
    """A wrapper that hands a string to a shell (su -c, watch, flock -c): parse it too."""
    if not script.literal:
        acc.unresolved_(f"{what} runs a string computed at run time", text)
        return
    sub = _parse_cached(script.text, depth + 1, via)
    acc.commands.extend(sub.commands)
    acc.redirects.extend(sub.redirects)
    acc.unresolved.extend(sub.unresolved)
    acc.cd = acc.cd or sub.changes_directory


def _su(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    acc.commands.append(SimpleCommand(argv, via[:-1]))  # a privilege change, like sudo
    for i, w in enumerate(argv[1:], 1):
        if w.literal and w.text in ("-c", "--command") and i + 1 < len(argv):
            _run_string(argv[i + 1], via, acc, depth, text, "su -c")
            return
        if w.literal and w.text.startswith("--command="):
            _run_string(Word(w.text.split("=", 1)[1]), via, acc, depth, text, "su -c")
            return
    acc.unresolved_("su without -c starts a shell", text)


def _watch(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    i = _options(
        argv,
        ("-n", "--interval", "-d", "--differences", "-q", "--equexit"),
        (
            "-b",
            "--beep",
            "-e",
            "--errexit",
            "-g",
            "--chgexit",
            "-t",
            "--no-title",
            "-c",
            "--color",
            "-p",
            "--precise",
            "-w",
            "--no-wrap",
        ),
        acc,
        text,
    )
    if i is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    words = argv[i:]
    if any(w.literal and w.text in ("-x", "--exec") for w in argv[1:i]):
        _rest(argv, i, via, acc, depth, text)
        return
    # watch joins its words with spaces and hands them to sh -c
    if not all(w.literal for w in words):
        acc.unresolved_("watch runs a string computed at run time", text)
        return
    _run_string(Word(" ".join(w.text for w in words)), via, acc, depth, text, "watch")


def _flock(argv: tuple[Word, ...], via: tuple[str, ...], acc: _Acc, depth: int, text: str) -> None:
    for i, w in enumerate(argv[1:], 1):
        if w.literal and w.text in ("-c", "--command") and i + 1 < len(argv):
            _run_string(argv[i + 1], via, acc, depth, text, "flock -c")
            return
    i = _options(
        argv,
        ("-w", "--timeout", "-E", "--conflict-exit-code"),
        (
            "-s",
            "--shared",
            "-x",
            "--exclusive",
            "-u",
            "--unlock",
            "-n",
            "--nonblock",
            "-o",
            "--close",
            "--verbose",
        ),
        acc,
        text,
    )
    if i is None or i + 1 >= len(argv):
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    _rest(argv, i + 1, via, acc, depth, text)  # skip the lock file


_WRAPPERS: dict[str, Any] = {
    "su": _su,
    "watch": _watch,
    "flock": _flock,
    "setsid": _simple_wrapper((), ("-c", "--ctty", "-f", "--fork", "-w", "--wait")),
    "ionice": _simple_wrapper(("-c", "--class", "-n", "--classdata"), ("-t", "--ignore")),
    "env": _env,
    "command": _command,
    "builtin": _simple_wrapper((), ()),
    "exec": _simple_wrapper(("-a",), ("-c", "-l")),
    "nice": _simple_wrapper(("-n", "--adjustment"), (), digits=True),
    "nohup": _simple_wrapper((), ()),
    "time": _simple_wrapper(("-f", "-o", "--format", "--output"), ("-p", "-v", "--portability")),
    "stdbuf": _simple_wrapper(("-i", "-o", "-e", "--input", "--output", "--error"), ()),
    "timeout": _timeout,
    "xargs": _xargs,
    "sudo": _sudo,
    "doas": _sudo,
    "find": _find,
    **{name: _shell for name in _SHELLS},
}
