"""Programs the judge knows: those that start no other program, and those whose arguments are code.

:data:`STARTS_NO_PROGRAM` is the whitelist behind ``SimpleCommand.known``: each
program on it, whatever its arguments, starts no other program (checked one
by one: ``sort`` is not on it, ``--compress-program`` runs one; neither is
``install``, ``--strip-program``; nor ``egrep``, a script that runs ``grep``).
Every program not on it may start anything, which is what the judge assumes of
it.

:func:`check_program` reads the programs whose arguments are code or name a
program (interpreters' ``-c``/``-e``, ``awk`` programs, ``sed`` scripts, ``git
-c``, ``tar --checkpoint-action``, ``make --eval``): such an argument makes the
line unresolved, so no allow rule can let it run unread. That list is a fast
filter for the allow side; what keeps deny rules whole on a backend without an
exec check is the whitelist (see :mod:`..policy._judge`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from ._parts import Accumulator, SimpleCommand, Word

__all__ = [
    "READS_ONLY",
    "STARTS_NO_PROGRAM",
    "check_program",
    "check_scripts",
    "environment_name",
    "interpreter_kind",
    "is_input",
    "plain_name",
]

# Programs that only read and print (no file written, nothing started): a script file run
# in a line whose other commands are all of these cannot have been written by that line.
READS_ONLY = frozenset(
    {
        ":", "[", "basename", "cat", "cd", "cmp", "cut", "date", "df", "dirname",
        "du", "echo", "expr", "false", "grep", "head", "id", "jq", "ls", "md5sum",
        "nproc", "printf", "pwd", "readlink", "realpath", "seq", "sha1sum", "sha256sum",
        "sha512sum", "sleep", "stat", "tail", "test", "tr", "true", "uname", "uniq",
        "wc", "whoami",
    }
)  # fmt: skip

# Programs that start no other program, whatever their arguments (GNU coreutils, util-linux,
# shell builtins). Not here, on purpose: sort (--compress-program), install (--strip-program),
# split (--filter), diff (-l runs pr), file (-z runs decompressors), egrep/fgrep/zcat/gunzip/
# which (scripts), find, xargs, env, sed, awk, tar, git, make (they start programs).
STARTS_NO_PROGRAM = READS_ONLY | frozenset(
    {
        "b2sum", "base32", "base64", "break", "chgrp", "chmod", "chown", "cksum", "column",
        "comm", "continue", "cp", "csplit", "dd", "exit", "expand", "factor", "fmt",
        "fold", "getopts", "hexdump", "hostname", "join", "kill", "ln", "mkdir", "mkfifo",
        "mktemp", "mv", "nl", "numfmt", "od", "paste", "printenv", "ps", "return", "rev",
        "rm", "rmdir", "set", "sha224sum", "sha384sum", "shift", "shred", "shuf", "sum",
        "tac", "tee", "touch", "truncate", "tsort", "tty", "type", "ulimit", "umask",
        "unexpand", "wait", "xxd",
    }
)  # fmt: skip


# The builtins of the shells a command line runs under (dash, bash; busybox's ash runs its
# applets in-process too, and is refused whole by identity where a deny rule names one):
# they run inside the shell, so no exec check sees them. `bash -c 'compgen -b'`, dash(1).
SHELL_BUILTINS = frozenset(
    {
        ".", ":", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "chdir",
        "command", "compgen", "complete", "compopt", "continue", "declare", "dirs", "disown",
        "echo", "enable", "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts",
        "hash", "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile",
        "popd", "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set",
        "shift", "shopt", "source", "suspend", "test", "times", "trap", "true", "type",
        "typeset", "ulimit", "umask", "unalias", "unset", "wait",
    }
)  # fmt: skip


# -- interpreters: code given as text, or a script file, or code read from input ---------


@dataclass(frozen=True)
class _Interpreter:
    """One interpreter family's options: ``code`` letters and long names run code given as
    text; ``script`` letters name the file (or module) run; ``arg`` letters take a value
    attached or in the next word, ``attached`` letters only an attached one (perl's
    ``-i.bak``), ``digits`` letters only attached digits (perl's ``-l0`` in ``-l0e``);
    ``program_operand``: the first operand is the program text (awk)."""

    code: str
    code_long: frozenset[str] = frozenset()
    script: str = ""
    arg: str = ""
    attached: str = ""
    digits: str = ""
    arg_long: frozenset[str] = frozenset()
    program_operand: bool = False


_INTERPRETERS: dict[str, _Interpreter] = {
    "python": _Interpreter("c", frozenset({"--command"}), "m", "WXQ", "",
                           frozenset({"--check-hash-based-pycs"})),
    # -M/-m load a module with `use`, whose text is code; -d loads a debugger module
    "perl": _Interpreter("eEMmd", arg="I", attached="FiCDx", digits="l0"),
    "ruby": _Interpreter(
        "e", arg="rICEF", attached="xK", digits="0WT", arg_long=frozenset({"--encoding"})
    ),
    "node": _Interpreter(
        "epi",
        frozenset({"--eval", "--print", "--interactive"}),
        arg="rC",
        arg_long=frozenset({"--require", "--import", "--loader", "--input-type", "--conditions"}),
    ),
    "php": _Interpreter("rBREFa", script="f", arg="cdzt"),
    "lua": _Interpreter("ei", arg="l"),
    "rscript": _Interpreter("e", frozenset({"--expr"}), script="f",
                            arg_long=frozenset({"--file"})),
    "julia": _Interpreter("eEi", frozenset({"--eval", "--print"}), script="L", arg="JCtp",
                          digits="Og", arg_long=frozenset({"--project", "--load"})),
    "tclsh": _Interpreter(""),
    "expect": _Interpreter("c", arg="bf"),
    # gawk: -e/--source program text, -l/--load an extension (a shared library), -i/-E/-f
    # program files
    "awk": _Interpreter(
        "el", frozenset({"--source", "--exec", "--load", "--include"}), script="fEi",
        arg="vFW", arg_long=frozenset({"--assign", "--field-separator", "--file"}),
        program_operand=True,
    ),
    "pwsh": _Interpreter("ce", frozenset({"-command", "-encodedcommand", "-c", "-e"}),
                         script="f", arg_long=frozenset({"-file"})),
}  # fmt: skip

_INTERPRETER_NAMES = re.compile(
    r"(?P<python>(?:python|pypy)[0-9.]*)|(?P<perl>perl[0-9.]*)|(?P<ruby>ruby[0-9.]*)"
    r"|(?P<node>node|nodejs|bun)|(?P<php>php[0-9.]*)|(?P<lua>lua[0-9.]*|luajit)"
    r"|(?P<rscript>Rscript|R)|(?P<julia>julia)|(?P<tclsh>tclsh[0-9.]*|wish[0-9.]*)"
    r"|(?P<expect>expect)|(?P<awk>awk|gawk|mawk|nawk)|(?P<pwsh>pwsh|powershell)"
)


def interpreter_kind(name: str) -> str | None:
    """The interpreter family of a program name (``python3.12`` is ``python``), or None."""
    m = _INTERPRETER_NAMES.fullmatch(name)
    return m.lastgroup if m else None


# awk program text that can start a program or write a file: system(), a pipe to or from
# a command (`print | "cmd"`, `"cmd" | getline`, gawk's `|&`), gawk's indirect calls (@f)
# and extensions (@load), and `print > FILE` (a `>` after print/printf in one statement; a
# `>` elsewhere is a comparison). Unsure is no: "system" inside a string counts too.
_AWK_STARTS = re.compile(r"system|\||@|\bprintf?\b[^;}\n]*>")


def _interpreter(
    kind: str, argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str
) -> None:
    spec = _INTERPRETERS[kind]
    name = argv[0].text
    script: Word | None = None
    i = 1
    while i < len(argv) and script is None:
        w = argv[i]
        if not w.literal:
            acc.unresolved_(f"{name}: an option or operand computed at run time", text)
            acc.commands.append(SimpleCommand(argv, via))
            return
        t = w.text
        if t == "--":
            i += 1
            break
        if t == "-" or not t.startswith("-"):
            break
        if t.startswith("--") or (kind == "pwsh" and len(t) > 2):
            key, eq, value = t.partition("=")
            if kind == "pwsh":
                key = key.lower()
            if key in spec.code_long:
                acc.unresolved_(f"{name} {key} runs code given as text", text)
                acc.commands.append(SimpleCommand(argv, via))
                return
            takes = key in spec.arg_long
            if takes and key in ("--file", "--load", "-file"):
                script = Word(value) if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            i += 2 if takes and not eq else 1
            continue
        step = 1
        k = 1
        while k < len(t):
            letter, rest = t[k], t[k + 1 :]
            k += 1
            if letter in spec.code:
                acc.unresolved_(f"{name} -{letter} runs code given as text", text)
                acc.commands.append(SimpleCommand(argv, via))
                return
            if letter in spec.script or letter in spec.arg:
                value = Word(rest) if rest else (argv[i + 1] if i + 1 < len(argv) else None)
                step = 1 if rest else 2
                if letter in spec.script:
                    script = value
                break
            if letter in spec.digits:  # perl -l0, -0777: digits, then more switches (-le)
                while k < len(t) and t[k] in "0123456789xabcdefABCDEF" and letter == "0":
                    k += 1
                while k < len(t) and t[k].isdigit():
                    k += 1
                continue
            if letter in spec.attached:
                break
        i += step
    if script is not None:
        if not script.literal:
            acc.unresolved_(f"{name} runs a file named at run time", text)
        acc.commands.append(SimpleCommand(argv, via, script=script))
        return
    operand = argv[i] if i < len(argv) else None
    if operand is None or (operand.literal and operand.text == "-"):
        acc.unresolved_(f"{name} reads the code it runs from its input", text)
    elif spec.program_operand:
        if not operand.literal or _AWK_STARTS.search(operand.text):
            acc.unresolved_(
                f"{name}: its program can start commands or write files (system(), pipes, "
                "print > FILE)",
                text,
            )
        operand = None
    elif not operand.literal:
        acc.unresolved_(f"{name} runs a file named at run time", text)
    acc.commands.append(SimpleCommand(argv, via, script=operand))


# -- sed: a script is code; `e` runs a command and `w` writes a file ------------------------

# Commands that neither run nor write (GNU sed): a script made only of these, with
# addresses, s///, y///, text and labels, is read whole.
_SED_PLAIN = frozenset("pPdDnNgGhHxlz=qQF{}")


def _sed_delimited(script: str, i: int, count: int) -> int:
    """Skip ``count`` delimiter-ended parts starting at the delimiter at ``i``; -1 if unclear."""
    if i >= len(script):
        return -1
    delim = script[i]
    if delim in "\\\n" or delim.isalnum() or delim.isspace():
        return -1
    i += 1
    for _ in range(count):
        while i < len(script) and script[i] != delim:
            if script[i] == "[":
                return -1  # a bracket expression may hold the delimiter: do not guess
            i += 2 if script[i] == "\\" else 1
        if i >= len(script):
            return -1
        i += 1
    return i


def _sed_address(script: str, i: int) -> int:
    n = len(script)
    if i < n and script[i].isdigit():
        while i < n and (script[i].isdigit() or script[i] == "~"):
            i += 1
    elif i < n and script[i] == "$":
        i += 1
    elif i < n and script[i] in "/\\":
        if script[i] == "\\":
            i += 1
        i = _sed_delimited(script, i, 1)
        if i < 0:
            return -1
        while i < n and script[i] in "IM":
            i += 1
    return i


def sed_script_is_plain(script: str) -> bool:
    """Whether a sed script only edits the stream: no ``e`` (runs a command), no ``w``/``W``
    (writes a file), nothing this reader does not know. A conservative reader: unsure is no."""
    i, n = 0, len(script)
    while i < n:
        ch = script[i]
        if ch in " \t\n;":
            i += 1
            continue
        if ch == "#":
            while i < n and script[i] != "\n":
                i += 1
            continue
        i = _sed_address(script, i)
        if i < 0:
            return False
        if i < n and script[i] == ",":
            i += 1
            if i < n and script[i] in "+~":
                i += 1
            i = _sed_address(script, i)
            if i < 0:
                return False
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            return False
        command = script[i]
        i += 1
        if command in "sy":
            i = _sed_delimited(script, i, 2)
            if i < 0:
                return False
            if command == "s":
                while i < n and (script[i] in "gpiImM" or script[i].isdigit()):
                    i += 1
            if i < n and script[i] not in " \t\n;}":
                return False  # e, w, or a flag this reader does not know
        elif command in "aicbtTrR:":
            # text, a label or a file read: the rest of the line (a\ text continues it)
            while i < n and script[i] != "\n":
                i += 2 if script[i] == "\\" else 1
        elif command in _SED_PLAIN:
            while i < n and script[i].isdigit():  # q5, l 70
                i += 1
        else:
            return False  # e, w, W, v, and anything unknown
    return True


_SED_ARG_LONG = frozenset({"--expression", "--file", "--line-length"})
_SED_FLAGS_LONG = frozenset(
    {
        "--quiet", "--silent", "--regexp-extended", "--separate", "--unbuffered",
        "--null-data", "--posix", "--debug", "--follow-symlinks", "--binary", "--sandbox",
        "--in-place", "--zero-terminated",
    }
)  # fmt: skip


def _sed(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str) -> None:
    scripts: list[Word] = []
    script_file: Word | None = None
    sandbox = False
    i = 1
    while i < len(argv):
        w = argv[i]
        if not w.literal:
            if not scripts and script_file is None:
                scripts.append(w)  # the script itself, or an option: computed either way
            i += 1
            continue
        t = w.text
        if t == "--":
            i += 1
            break
        if not t.startswith("-") or t == "-":
            if not scripts and script_file is None:
                scripts.append(w)
            i += 1
            continue
        if t.startswith("--"):
            key, eq, value = t.partition("=")
            if key == "--sandbox":
                sandbox = True
            if key in ("--expression", "--file"):
                arg = Word(value) if eq else (argv[i + 1] if i + 1 < len(argv) else Word(""))
                if key == "--expression":
                    scripts.append(arg)
                else:
                    script_file = arg
                i += 1 if eq else 2
                continue
            if key in _SED_ARG_LONG:
                i += 1 if eq else 2
            elif key in _SED_FLAGS_LONG:
                i += 1
            else:
                acc.unresolved_(f"sed option {key!r} is not one this matcher reads", text)
                i += 1
            continue
        step = 1
        for k, letter in enumerate(t[1:], 1):
            if letter in "ef":
                rest = t[k + 1 :]
                arg = Word(rest) if rest else (argv[i + 1] if i + 1 < len(argv) else Word(""))
                step = 1 if rest else 2
                if letter == "e":
                    scripts.append(arg)
                else:
                    script_file = arg
                break
            if letter in "l":
                step = 1 if t[k + 1 :] else 2
                break
            if letter == "i":  # -i[SUFFIX]: the rest of the word is the suffix
                break
            if letter not in "nrEsuzb":
                acc.unresolved_(f"sed option -{letter} is not one this matcher reads", text)
        i += step
    if not sandbox:
        for script in scripts:
            if not script.literal or not sed_script_is_plain(script.text):
                acc.unresolved_(
                    "a sed script that can run commands or write files (e, w), or that this "
                    "matcher cannot read whole",
                    text,
                )
                break
    acc.commands.append(SimpleCommand(argv, via, script=script_file))


# -- git, tar, make: options whose value is a program or code ---------------------------------

# git's global options before the subcommand; -c and --config-env set configuration, which
# names programs git runs (alias.x=!cmd, core.pager, core.sshCommand, core.fsmonitor, …).
_GIT_GLOBAL_ARG = frozenset({"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix"})
_GIT_CONFIG = frozenset({"-c", "--config-env", "--exec-path"})
# subcommand options whose value is a command git runs
_GIT_RUNS = re.compile(
    r"--exec(?:=|$)|-x$|--upload-pack|--receive-pack|--extcmd|-u$|--filter|--tool|"
    r"--ssh|--command|--run|--template"
)
# subcommand -> (the word after it that makes it run a command, or None for any; why)
_GIT_RUNNING_SUBCOMMANDS: dict[str, tuple[str | None, str]] = {
    "bisect": ("run", "git bisect run runs a command"),
    "submodule": ("foreach", "git submodule foreach runs a command"),
    "filter-branch": (None, "git filter-branch runs its filters as shell text"),
    "difftool": (None, "git difftool runs a program"),
    "mergetool": (None, "git mergetool runs a program"),
}


def _git(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str) -> None:
    acc.commands.append(SimpleCommand(argv, via))
    i = 1
    while i < len(argv):
        w = argv[i]
        if not w.literal:
            acc.unresolved_("git: an option or subcommand computed at run time", text)
            return
        t = w.text
        key = t.split("=", 1)[0]
        if key in _GIT_CONFIG or (t.startswith("-c") and len(t) > 2 and not t.startswith("--")):
            acc.unresolved_(
                f"git {key} sets configuration, which names programs git runs (alias.x=!cmd)",
                text,
            )
            return
        if not t.startswith("-"):
            break
        i += 2 if t in _GIT_GLOBAL_ARG else 1
    if i >= len(argv):
        return
    sub = argv[i].text
    running = _GIT_RUNNING_SUBCOMMANDS.get(sub)
    if running is not None:
        after = argv[i + 1].text if i + 1 < len(argv) and argv[i + 1].literal else None
        if running[0] is None or after == running[0]:
            acc.unresolved_(running[1], text)
            return
    for w in argv[i + 1 :]:
        if w.literal and w.text[:1] == "-" and _GIT_RUNS.match(w.text):
            acc.unresolved_(f"git {sub} {w.text.split('=', 1)[0]} names a program it runs", text)
            return


_TAR_RUNS = re.compile(
    r"--checkpoint-action|--to-command|--use-compress-program|--rsh-command|--rmt-command|"
    r"--info-script|--new-volume-script|--index-file"
)


def _tar(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str) -> None:
    acc.commands.append(SimpleCommand(argv, via))
    for position, w in enumerate(argv[1:], 1):
        if not w.literal:
            acc.unresolved_("tar: an option computed at run time can name a program", text)
            return
        t = w.text
        if _TAR_RUNS.match(t):
            acc.unresolved_(f"tar {t.split('=', 1)[0]} names a program or code tar runs", text)
            return
        # -I PROG and -F SCRIPT, also inside a cluster (-xIzstd), and the old-style first word
        if not t.startswith("--") and (t.startswith("-") or position == 1):
            letters = t.lstrip("-")
            if "I" in letters or "F" in letters:
                acc.unresolved_("tar -I/-F names a program tar runs", text)
                return


def _make(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str) -> None:
    script: Word | None = None
    i = 1
    while i < len(argv):
        w = argv[i]
        if not w.literal:
            acc.unresolved_("make: an argument computed at run time", text)
            break
        t = w.text
        key, eq, value = t.partition("=")
        if key in ("--eval", "-E") or (t.startswith("-E") and not t.startswith("--")):
            acc.unresolved_("make --eval reads make code given as text", text)
            break
        if not t.startswith("-") and eq:
            acc.unresolved_(
                f"make {key}=…: a variable set on the command line can change what its recipes run",
                text,
            )
            break
        if key in ("-f", "--file", "--makefile"):
            script = Word(value) if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            i += 1 if eq else 2
            continue
        if t.startswith("-f") and len(t) > 2 and not t.startswith("--"):
            script = Word(t[2:])
        i += 1
    acc.commands.append(SimpleCommand(argv, via, script=script))


_Check = Callable[[tuple[Word, ...], tuple[str, ...], Accumulator, str], None]


# -- bash builtins that take a variable's name -------------------------------------------------

# A name with an array subscript (`a[$(cmd)]`) makes bash evaluate the subscript as arithmetic,
# and arithmetic expands `$(…)`: bash's `test -v NAME`, `printf -v NAME`, `wait -p NAME` run
# the text of a word the parse reads as a plain string. What the judge checks is that state:
# the name such a builtin is given, whatever spells it; only a plain name (or one with a
# subscript that evaluates nothing) is read whole. (read, mapfile, declare, … are unresolved
# whole: they assign variables.)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[(?:[0-9]+|@|\*)\])?")
_SUBSCRIPT_REASON = (
    "{}: bash evaluates an array subscript in a variable's name as arithmetic, which can "
    "run commands"
)


def environment_name(text: str) -> bool:
    """Whether assigning the variable ``text`` may change what later commands run or do: a
    name with no lowercase letter, the namespace POSIX gives the shell's and the utilities'
    variables (``PATH``, ``IFS``, ``CDPATH``, ``ENV``, ``BASH_ENV``, …; lowercase names are the
    applications'). ``for PATH in bin; do ls; done`` ran the workspace's own ``bin/ls``."""
    return not any(c.islower() for c in text)


def plain_name(text: str) -> bool:
    """A variable's name bash looks up without evaluating anything (no subscript, or one of
    digits, ``@`` or ``*``)."""
    return _PLAIN_NAME.fullmatch(text) is not None


def _plain_name(word: Word | None) -> bool:
    return word is None or (word.literal and plain_name(word.text))


def _known_builtin(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator) -> None:
    name = argv[0].text
    known = name in STARTS_NO_PROGRAM and "/" not in name
    acc.commands.append(SimpleCommand(argv, via, known=known))


def _test(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str) -> None:
    """``test``/``[``: the word after ``-v`` is a variable's name; so may be the word after
    one computed at run time (it may be ``-v``), when that word has a subscript."""
    for i in range(1, len(argv) - 1):
        w, name = argv[i], argv[i + 1]
        if w.literal and w.text == "-v":
            bad = not _plain_name(name)
        elif not w.literal:
            bad = not name.literal or ("[" in name.text and not plain_name(name.text))
        else:
            continue
        if bad:
            acc.unresolved_(_SUBSCRIPT_REASON.format(f"{argv[0].text} -v"), text)
            break
    _known_builtin(argv, via, acc)


def _named_by_option(letter: str) -> _Check:
    """A builtin whose option ``-LETTER NAME`` (or ``-LETTERNAME``, in a cluster) assigns
    the variable NAME: ``printf -v``, ``wait -p``."""

    def check(argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str) -> None:
        i = 1
        while i < len(argv):
            w = argv[i]
            if not w.literal or w.text == "--" or not w.text.startswith("-") or w.text == "-":
                break
            at = w.text.find(letter, 1)
            if at > 0:
                attached = w.text[at + 1 :]
                value = Word(attached) if attached else (argv[i + 1] if i + 1 < len(argv) else None)
                if not _plain_name(value):
                    acc.unresolved_(_SUBSCRIPT_REASON.format(f"{argv[0].text} -{letter}"), text)
                    break
                if value is not None and environment_name(value.text):
                    # `printf -v PATH %s bin` made a later `ls` the workspace's own bin/ls
                    acc.unresolved_(
                        f"{argv[0].text} -{letter} assigns the shell's variable {value.text}", text
                    )
                    break
                i += 1 if attached else 2
                continue
            i += 1
        _known_builtin(argv, via, acc)

    return check


_PROGRAMS: dict[str, Callable[[tuple[Word, ...], tuple[str, ...], Accumulator, str], None]] = {
    "test": _test,
    "[": _test,
    "printf": _named_by_option("v"),
    "wait": _named_by_option("p"),
    "sed": _sed,
    "gsed": _sed,
    "git": _git,
    "tar": _tar,
    "gtar": _tar,
    "make": _make,
    "gmake": _make,
}


@functools.lru_cache(maxsize=1024)
def _check_for(name: str) -> _Check | None:
    check = _PROGRAMS.get(name)
    if check is not None:
        return check
    kind = interpreter_kind(name)
    return functools.partial(_interpreter, kind) if kind is not None else None


def check_program(
    name: str, argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, text: str
) -> bool:
    """Report ``argv`` if its program reads code or a program from its arguments; False if
    the program is not one of those (the caller reports it as a plain command)."""
    check = _check_for(name)
    if check is None:
        return False
    check(argv, via, acc, text)
    return True


_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


def is_input(path: str) -> bool:
    """A path that names a program's own input (``/dev/stdin``, ``/dev/fd/0``, …)."""
    return path in ("/dev/stdin", "/dev/tty") or path.startswith(
        ("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/")
    )


def check_scripts(acc: Accumulator) -> None:
    """A script file run in a line that may write it first is unresolved (``echo … > s; sh s``).

    The file's text is the code; the judge reads it only when nothing else in the line can
    have written it: no write redirection, and every other command only reads
    (:data:`READS_ONLY`). Called once per whole line, after its walk.
    """
    runners = [c for c in acc.commands if c.script is not None]
    if not runners:
        return
    for c in runners:
        assert c.script is not None
        if c.script.literal and (c.script.text == "-" or is_input(c.script.text)):
            acc.unresolved_("reads the code it runs from its input", c.display())
            return
    writes = any(
        r.write and not (r.path.literal and r.path.text in _NOT_FILES) for r in acc.redirects
    )
    others = any(
        c.script is None and not (c.argv and c.argv[0].literal and c.argv[0].text in READS_ONLY)
        for c in acc.commands
    )
    if writes or others or len(runners) > 1:
        acc.unresolved_(
            "runs a script file that this same line may write first",
            runners[0].display(),
        )
