"""The tree-sitter-bash walk: a parse tree's nodes read as words, commands and redirections.

:class:`Walker` is a whitelist: a node type it does not know is reported
unresolved (its insides still searched, so a deny rule can see the commands in
them). A word is literal only when quote removal gives its exact value
(:func:`_unquoted_word`, :func:`_unescape_double`); every command it finds goes
to :func:`._wrappers.emit_command`, which looks through wrappers.

Text that becomes code or words only at run time is unresolved wherever it is:
a command or process substitution (``$(…)``, ``<(…)``), a backquote (its text
is unescaped and read again by the shell, so it is parsed again here the same
way, for the deny rules' sake, never trusted), a substitution tree-sitter leaves
as plain text inside ``${…}``, arithmetic over variables (bash evaluates array
subscripts in it), indirect and transforming expansions (``${!x}``, ``${x@P}``).
A plain ``$x`` or ``${x:-word}`` is resolved: a value, never code.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ._parts import Accumulator, Redirect, Word
from ._programs import environment_name, plain_name
from ._wrappers import emit_command

__all__ = ["Walker"]


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
_GLOB_CHARS = frozenset("*?[")
# Word nodes that may hold code: read by Walker.word even inside an unresolved node.
_CODE_WORDS = frozenset(
    {"command_substitution", "process_substitution", "expansion", "arithmetic_expansion"}
)
_ARITHMETIC_OPERATIONS = frozenset(
    {"binary_expression", "unary_expression", "parenthesized_expression", "ternary_expression"}
)
_COLON = Word(":")  # the carrier of a word parsed again on its own (`: WORD`)
# Inside backquotes a backslash escapes only $, ` and \ (POSIX 2.6.3).
_BACKQUOTED = re.compile(r"\\([$`\\])")


class Walker:
    """One parse tree's walk at nesting ``depth`` inside wrappers ``via``; finds go to ``acc``."""

    def __init__(self, acc: Accumulator, depth: int, via: tuple[str, ...], src: bytes) -> None:
        self.acc = acc
        self.depth = depth
        self.via = via
        self.src = src

    def _bash(self) -> bool:
        """Whether bash reads this text (a ``bash -c`` string): the whole line runs under
        ``/bin/sh``, which may be dash or busybox, where bash's own syntax means other things."""
        return bool(self.via) and self.via[-1] in _BASH

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
            self.acc.damaged = True
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
            if _lost_text(self.src, node, node.children, b" \t\n"):
                # `make -f - <<E`: tree-sitter-bash drops the `-` before a here-document
                self.acc.unresolved_(
                    "the shell parser dropped part of this command", self.text(node)
                )
            # `echo a > f b c`: tree-sitter-bash puts b and c in the redirection; they are
            # arguments of the command (`rm >&2 -rf /` is `rm -rf /`)
            extra = [w for r in node.named_children for w in _words_after_target(r)]
            for child in node.named_children:
                if child.type in _REDIRECTS:
                    self.redirect(child)
                elif extra and child.type == "command":
                    self.command(child, extra)
                    extra = []
                else:
                    self.statement(child)
            if extra:
                self.acc.unresolved_(
                    "words after a redirection that belong to no command", self.text(node)
                )
                for word in extra:
                    self.word(word)
        elif kind in _REDIRECTS:
            self.redirect(node)
        elif kind in ("for_statement", "case_statement"):
            for child in node.named_children:
                if child.type == "variable_name":
                    # `for PATH in bin; do ls; done`: the loop assigns its variable (PATH
                    # made `ls` the workspace's own bin/ls), as `PATH=bin` does
                    if environment_name(self.text(child)):
                        self.acc.unresolved_(
                            "a for loop assigns the shell's variable " + self.text(child),
                            self.text(node),
                        )
                    continue
                if child.type == "extglob_pattern":
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
            if not self._bash() and self.src[node.start_byte : node.start_byte + 2] == b"[[":
                self.acc.unresolved_(_NOT_POSIX_TEST, self.text(node))
            if self._has_expansion(node):
                self.acc.unresolved_("a test over expanded values", self.text(node))
            self._test_names(node)
            self.search(node)
        else:
            self.acc.unresolved_(
                f"shell syntax this matcher does not read ({kind})", self.text(node)
            )
            self.search(node)

    def _test_names(self, node: Any) -> None:
        """bash evaluates an array subscript in a name ``-v`` tests, and (in ``[[ … ]]``) the
        operands of ``-eq``, ``-lt``, … as arithmetic, which runs ``$(…)`` even from a quoted
        word (``[ -v 'a[$(cmd)]' ]``): only plain names and numbers are read whole there."""
        tokens: list[Any] = []
        todo = [node]
        while todo:
            current = todo.pop()
            if current.type in ("unary_expression", "binary_expression", "test_command",
                                "parenthesized_expression"):  # fmt: skip
                todo.extend(reversed(current.children))
            elif current.is_named:
                tokens.append(current)
        arithmetic = self.src[node.start_byte : node.start_byte + 2] == b"[["
        for k, token in enumerate(tokens):
            if token.type != "test_operator":
                # a value computed at run time may be `-v` to `[`: the next word is then a name
                after = tokens[k + 1] if k + 1 < len(tokens) else None
                if after is not None and _literal_value(self.src, token) is None:
                    value = _literal_value(self.src, after)
                    if value is None or ("[" in value and not plain_name(value)):
                        self.acc.unresolved_(
                            "a value computed at run time may be `-v`, and bash evaluates an "
                            "array subscript in the name after it, which can run commands",
                            self.text(node),
                        )
                        return
                continue
            op = self.text(token)
            if op in ("-v", "-R"):
                operands = tokens[k + 1 : k + 2]
            elif arithmetic and op in _ARITHMETIC_TESTS:
                operands = tokens[max(k - 1, 0) : k] + tokens[k + 1 : k + 2]
            else:
                continue
            for operand in operands:
                value = _literal_value(self.src, operand)
                if value is None or not (plain_name(value) or _NUMBER.fullmatch(value)):
                    self.acc.unresolved_(
                        f"`{op}`: bash evaluates an array subscript in a name (or arithmetic) "
                        "here, which can run commands",
                        self.text(node),
                    )
                    return

    def search(self, node: Any) -> None:
        """Report the commands anywhere inside ``node`` (used where the node itself is unresolved)."""
        for child in node.named_children:
            kind = child.type
            if kind == "command":
                self.command(child)
            elif kind in _CODE_WORDS:
                self.word(child)
            elif kind in _REDIRECTS:
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
            raw = self.text(node)
            word = _unquoted_word(raw)
            if not word.literal and _code_in_text(raw):
                # a substitution tree-sitter-bash left as text: never trusted, read again
                self.acc.unresolved_("a substitution the parser reads as plain text", raw)
                sub = self.acc.parse(": " + raw, self.depth + 1, self.via)
                self.acc.merge(
                    replace(sub, commands=tuple(c for c in sub.commands if c.argv[0] != _COLON))
                )
            return word
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
            self.substitution(node)
            return Word(self.text(node), False)
        if kind == "simple_expansion":  # $x, $1, $@: a value, never code
            return Word(self.text(node), False)
        if kind == "expansion":
            self.expansion(node)
            return Word(self.text(node), False)
        if kind == "arithmetic_expansion":
            self.arithmetic(node)
            return Word(self.text(node), False)
        if kind == "translated_string":  # $"…": a double-quoted string, translated
            for child in node.named_children:
                self.word(child)
            return Word(self.text(node), False)
        if kind == "ansi_c_string" and not self._bash():
            self.acc.unresolved_(_NOT_POSIX_QUOTE, self.text(node))
        if kind in ("ansi_c_string", "brace_expression", "extglob_pattern"):
            return Word(self.text(node), False)
        # Anything else in word position: not a value this matcher can know.
        self.acc.unresolved_(f"a word this matcher does not read ({kind})", self.text(node))
        self.search(node)
        return Word(self.text(node), False)

    def substitution(self, node: Any) -> None:
        """``$(…)``, ``<(…)`` or a backquote: unresolved, its commands still reported."""
        text = self.text(node)
        if node.children and node.children[0].type == "`":
            self.acc.unresolved_(
                "a backquote substitution: the shell unescapes its text and reads it again "
                "at run time",
                text,
            )
            inner = text[1:-1] if len(text) >= 2 and text.endswith("`") else text[1:]
            # What the shell reads: \\, \` and \$ lose their backslash (nested backquotes).
            self.acc.merge(self.acc.parse(_BACKQUOTED.sub(r"\1", inner), self.depth + 1, self.via))
            return
        what = "process" if node.type == "process_substitution" else "command"
        self.acc.unresolved_(
            f"a {what} substitution: what it prints becomes part of the command only at run time",
            text,
        )
        for inner in node.named_children:
            self.statement(inner)

    def expansion(self, node: Any) -> None:
        """``${…}``: resolved when it only names a parameter and its operands are resolved words."""
        whole = self.text(node)
        if "`" in whole or "$(" in whole:
            # a substitution anywhere inside: tree-sitter-bash may read it as text
            # ("${x:-'`cmd`'}" runs cmd: single quotes are plain characters there)
            self.acc.unresolved_("a substitution inside a parameter expansion", whole)
        named = 0
        for child in node.children:
            kind = child.type
            if not child.is_named:
                if kind in ("!", "@"):
                    self.acc.unresolved_(
                        "an indirect or transforming expansion (${!x}, ${x@P}) can run commands "
                        "in bash",
                        self.text(node),
                    )
                elif kind in ("=", ":=") and any(  # ${X:=v}, ${X=v}: assigns X when unset
                    c.type == "variable_name" and environment_name(self.text(c))
                    for c in node.named_children
                ):
                    self.acc.unresolved_("assigns the shell's variable", self.text(node))
                continue
            named += 1
            if kind in ("variable_name", "special_variable_name"):
                if named > 1:  # ${x:i}: an offset is arithmetic over i's value
                    self.acc.unresolved_("arithmetic over a variable's value", self.text(node))
            elif kind == "number":
                continue
            elif kind in ("word", "regex", "raw_string"):
                # tree-sitter-bash leaves a substitution here as plain text: ${x:-`cmd`};
                # it is parsed again so a deny rule sees the command
                text = self.text(child)
                if "`" in text or "$(" in text:
                    if kind == "raw_string":
                        text = text[1:-1]
                    sub = self.acc.parse(": " + text, self.depth + 1, self.via)
                    self.acc.merge(
                        replace(sub, commands=tuple(c for c in sub.commands if c.argv[0] != _COLON))
                    )
            elif kind == "subscript" and _plain_subscript(self.src, child):
                continue  # ${a[@]}, ${a[*]}, ${a[1]}: no arithmetic over values
            elif kind == "subscript":
                self.acc.unresolved_(
                    "an array subscript: bash evaluates it as arithmetic, which can run commands",
                    self.text(node),
                )
                self.search(child)
            else:
                self.word(child)

    def arithmetic(self, node: Any) -> None:
        """``$((…))``: resolved over numbers only; over values, bash may run commands."""
        stack = list(node.named_children)
        while stack:
            n = stack.pop()
            if n.type == "number":
                continue
            if n.type in _ARITHMETIC_OPERATIONS:
                stack.extend(n.named_children)
                continue
            self.acc.unresolved_(
                "arithmetic over values (bash evaluates array subscripts in them, which can run "
                "commands)",
                self.text(node),
            )
            self.search(node)
            return

    # -- simple commands -------------------------------------------------------------

    def command(self, node: Any, extra: list[Any] | None = None) -> None:
        """One simple command; ``extra``: its words the parser put after a redirection."""
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
        for word in extra or ():
            self._append(words, spans, word, self.word(word))
        if words:
            emit_command(tuple(words), self.via, self.acc, self.depth, self.text(node))

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

    def _heredoc_extent(self, node: Any) -> None:
        """A here-document's body must end where the shell ends it: at the first line equal
        to the delimiter word after quote removal (leading tabs stripped for ``<<-``). Where
        tree-sitter-bash ends it elsewhere (it keeps ``E''`` as the delimiter), the text
        after the shell's end would be commands the judge read as the body's text."""
        start = next((c for c in node.named_children if c.type == "heredoc_start"), None)
        if start is None:
            return
        delimiter = _heredoc_delimiter(self.text(start))
        if delimiter is None:
            self.acc.unresolved_(_HEREDOC_DIALECT, self.text(node))
            return
        tabs = any(c.type == "<<-" for c in node.children)
        end = next((c for c in node.named_children if c.type == "heredoc_end"), None)
        body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
        text = self.text(body) if body is not None else ""
        lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
        if not text:
            lines = []
        if end is not None:
            lines.append(self.text(end))
        for k, line in enumerate(lines):
            ended = (line.lstrip("\t") if tabs else line) == delimiter
            if ended != (end is not None and k == len(lines) - 1):
                self.acc.unresolved_(
                    "a here-document the shell ends at another line than this parser does",
                    self.text(node),
                )
                return

    def redirect(self, node: Any) -> None:
        kind = node.type
        if kind == "herestring_redirect":
            for child in node.named_children:
                self.word(child)
            return
        if kind == "heredoc_redirect":
            if _lost_text(self.src, node, node.children, b" \t\n"):
                self.acc.unresolved_(
                    "the shell parser dropped part of this command", self.text(node)
                )
            quoted = False
            self._heredoc_extent(node)
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
        if operator.startswith("&>") and not self._bash():
            self.acc.unresolved_(_NOT_POSIX_REDIRECT, self.text(node))
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


# The shells whose ``-c`` text is read as bash means it (the parse follows bash's grammar).
_BASH = frozenset({"bash", "rbash"})
# bash's syntax that POSIX sh (dash) parses into other commands: the line's meaning depends on
# which shell /bin/sh is, so it cannot be read whole.
_NOT_POSIX_TEST = (
    "bash's `[[ … ]]`: /bin/sh may be dash, which runs `[[` as a command and its `||`, `&&`, "
    "`<` and `>` as the shell's own lists and redirections"
)
_NOT_POSIX_QUOTE = (
    "bash's `$'…'`: /bin/sh may be dash, which reads `$` and a quoted string that ends at the "
    "first `'`, so the rest of the text becomes commands"
)


_NOT_POSIX_REDIRECT = (
    "bash's `&>`: /bin/sh may be dash, which runs the command before it in the background and "
    "the words after its target as a command of their own"
)
_HEREDOC_DIALECT = (
    "a here-document delimiter bash and dash read differently (`$'…'`, `$\"…\"`), or that "
    "this matcher cannot read"
)


def _heredoc_delimiter(raw: str) -> str | None:
    """The word after ``<<`` as the shell compares lines with it: quotes removed (POSIX:
    a backslash quotes the next character; inside double quotes only ``$`,"\\`` and a
    newline). None where bash and dash differ (``$'…'``, ``$"…"``) or the word is unclosed."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "$" and i + 1 < n and raw[i + 1] in "'\"":
            return None
        if c == "\\":
            out.append(raw[i + 1 : i + 2])
            i += 2
        elif c == "'":
            j = raw.find("'", i + 1)
            if j < 0:
                return None
            out.append(raw[i + 1 : j])
            i = j + 1
        elif c == '"':
            i += 1
            while i < n and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < n and raw[i + 1] in '$`"\\\n':
                    i += 1
                out.append(raw[i])
                i += 1
            if i >= n:
                return None
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_NUMBER = re.compile(r"[+-]?[0-9]+")


def _literal_value(src: bytes, node: Any) -> str | None:
    """A test operand's value when it is one literal word (no expansion), else None."""
    raw = src[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")
    if node.type in ("word", "number"):
        word = _unquoted_word(raw)
        return word.text if word.literal else None
    if node.type == "raw_string":
        return raw[1:-1]
    if node.type == "string" and all(c.type == "string_content" for c in node.named_children):
        return _unescape_double(raw[1:-1])
    return None


def _code_in_text(raw: str) -> bool:
    """Whether unquoted word text holds a backquote or ``$(`` no backslash escapes."""
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "`" or (ch == "$" and raw[i + 1 : i + 2] == "("):
            return True
        i += 1
    return False


def _words_after_target(node: Any) -> list[Any]:
    """A file redirection's words after its target (tree-sitter-bash gives them the field
    ``destination`` too); empty for any other node."""
    if node.type != "file_redirect":
        return []
    found = [
        c for i, c in enumerate(node.children) if node.field_name_for_child(i) == "destination"
    ]
    return found[1:]


def _plain_subscript(src: bytes, node: Any) -> bool:
    """An array subscript that evaluates nothing: ``@``, ``*`` or digits."""
    index = [c for c in node.named_children if c.type != "variable_name"]
    if len(index) != 1:
        return False
    text = src[index[0].start_byte : index[0].end_byte]
    return text in (b"@", b"*") or text.isdigit()


def _lost_text(src: bytes, node: Any, children: list[Any], blanks: bytes = b" \t") -> bool:
    """Whether anything but ``blanks`` lies between a node's parts (tree-sitter-bash drops a
    leading escaped blank, ``\\ a``, which the shell keeps as part of the word, and a ``-``
    before a here-document)."""
    cursor = node.start_byte
    for child in children:
        start = child.start_byte
        if start > cursor and src[cursor:start].strip(blanks):
            return True
        cursor = child.end_byte
    end = node.end_byte
    return end > cursor and bool(src[cursor:end].strip(blanks))


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
