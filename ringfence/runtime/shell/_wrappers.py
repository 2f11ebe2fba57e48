"""Wrappers that only run their argument, looked through (``env``, ``sudo``, ``sh -c``, …).

:func:`emit_command` reports one command: a computed name or a builtin that
runs text (``eval``, ``source``, …) is unresolved; a wrapper's inner command
is reported with the wrapper in ``via`` (``sudo``/``doas``, ``su`` and ``find
-exec`` report the outer command too); a string handed to a shell is parsed
through :attr:`Accumulator.parse`. Programs whose arguments are code
(interpreters, ``sed``, ``git -c``, …) are :mod:`._programs`'. Recursion
is bounded by ``MAX_DEPTH``.

The wrapper list is a fast filter, so deny rules see through the usual
launchers (``taskset``, ``unshare``, ``strace``, ``script -c``, …); it is not
the guarantee. A program on no list is reported as itself, not ``known``: the
judge assumes it may start anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ._parts import MAX_DEPTH, Accumulator, Redirect, SimpleCommand, Word
from ._programs import STARTS_NO_PROGRAM, check_program, interpreter_kind, is_input

__all__ = ["emit_command", "runs_arguments"]

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
    "getopts": "getopts assigns shell variables",
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
# Wrappers that start their command in another directory (or root) when given one of these
# options; None: always. Like a `cd`, they leave a relative redirection's directory unknown:
# `env -C sub sh -c 'echo x > .env'` wrote sub/.env, judged as the root's .env.
_CHDIR: dict[str, tuple[str, ...] | None] = {
    "env": ("-C", "--chdir"),
    "sudo": ("-D", "--chdir", "-i", "--login"),
    "su": ("-", "-l", "--login"),
    "runuser": ("-", "-l", "--login"),
    "unshare": ("-w", "--wd"),
    "nsenter": ("-w", "--wd"),
    "chroot": None,
    "find": ("-execdir", "-okdir"),
    "start-stop-daemon": ("-d", "--chdir"),
}


# bash's keyword option (`set -k`, `set -o keyword`, `bash -k`): every NAME=value word of a
# command, not only the leading ones, goes into its environment, and bash looks the program
# up on that PATH, so `set -k; ls PATH=bin` runs the workspace's `bin/ls`, a known name.
_KEYWORD = "the keyword option (-k) makes assignment words anywhere set a command's PATH"


def _keyword_option(words: tuple[Word, ...]) -> bool | None:
    """Whether ``set``'s or a shell's leading option words turn the keyword option on:
    True, False, or None when an option word is computed at run time (it may)."""
    i = 0
    while i < len(words):
        w = words[i]
        if not w.literal:
            return None
        t = w.text
        if t in ("--", "-", "+") or not t.startswith(("-", "+")) or t.startswith("--"):
            return False
        letters = t[1:]
        if "o" in letters or "O" in letters:
            value = words[i + 1] if i + 1 < len(words) else None
            if value is not None and not value.literal:
                return None
            if t[0] == "-" and "o" in letters and value is not None and value.text == "keyword":
                return True
            i += 2
        else:
            i += 1
        if t[0] == "-" and "k" in letters:
            return True
    return False


# Wrappers that start their command under another root directory when given one of these
# options (None: always): the command's name is then looked up there, below a directory
# commands may write, so `chroot . ls` or `unshare -r -R . ls` runs `./usr/bin/ls`.
_CHROOT: dict[str, tuple[str, ...] | None] = {
    "chroot": None,
    "unshare": ("-R", "--root"),
    "nsenter": ("-r", "--root"),
}


def _changes_root(name: str, argv: tuple[Word, ...]) -> bool:
    """Whether wrapper ``name`` may start its command under another root (:data:`_CHROOT`),
    read as :func:`_changes_directory` reads its options (it may over-match)."""
    options = _CHROOT[name]
    return options is None or _has_option(options, argv)


def _changes_directory(name: str, argv: tuple[Word, ...]) -> bool:
    """Whether wrapper ``name`` may start its command elsewhere (see :data:`_CHDIR`): an
    option word of it, given alone, with ``=value``, attached (``-Csub``) or in a cluster of
    short options (``-iu``); a computed word may be one. It may over-match (the wrapped
    command's own options), never under-match."""
    options = _CHDIR[name]
    if options is None:
        return True
    return _has_option(options, argv)


def _has_option(options: tuple[str, ...], argv: tuple[Word, ...]) -> bool:
    """Whether a word of ``argv`` after the program may be one of ``options``."""
    for word in argv[1:]:
        if not word.literal:
            return True
        text = word.text
        for option in options:
            if text == option or (option.startswith("--") and text.startswith(option + "=")):
                return True
            if (
                len(option) == 2
                and option[0] == "-"
                and option[1] != "-"
                and text.startswith("-")
                and not text.startswith("--")
                and option[1] in text[1:]
            ):
                return True
    return False


def emit_command(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
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
    if name == "set" and head.text == "set" and _keyword_option(argv[1:]) is not False:
        acc.unresolved_(f"set: {_KEYWORD}", text)
        acc.commands.append(SimpleCommand(argv, via))
        return
    if name in _UNRESOLVED_BUILTINS and name == head.text:
        acc.unresolved_(_UNRESOLVED_BUILTINS[name], text)
        acc.commands.append(SimpleCommand(argv, via))
        return
    if name in _CD or (name in _CHDIR and _changes_directory(name, argv)):
        acc.cd = True
    if name in _CHROOT and _changes_root(name, argv):
        acc.unresolved_(
            f"{name} starts its command under another root directory, where its name may "
            "reach a file commands wrote",
            text,
        )  # (still looked through: a denied program it names stays denied)
    unwrap = _WRAPPERS.get(name)
    if unwrap is not None:
        unwrap(argv, (*via, name), acc, depth, text)
    elif not check_program(name, argv, via, acc, text):
        known = name in STARTS_NO_PROGRAM and name == head.text
        acc.commands.append(SimpleCommand(argv, via, known=known))


def runs_arguments(name: str) -> bool:
    """Whether program ``name`` runs its arguments as a command or as code (a wrapper, a
    shell, an interpreter): given words it did not choose (xargs), it may run anything."""
    return name in _WRAPPERS or interpreter_kind(name) is not None or name in _CODE_PROGRAMS


_CODE_PROGRAMS = frozenset({"sed", "gsed", "git", "tar", "gtar", "make", "gmake"})


def _rest(
    argv: tuple[Word, ...], i: int, via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    if i < len(argv):
        emit_command(argv[i:], via, acc, depth + 1, text)


def _options(
    argv: tuple[Word, ...],
    with_arg: Iterable[str],
    flags: Iterable[str],
    acc: Accumulator,
    text: str,
    *,
    digits: bool = False,
    optional: Iterable[str] = (),
) -> int | None:
    """Skip leading options; the index of the wrapped command, or None if one is not known.

    ``with_arg`` options take a value (``-n 5``, ``-n5``, ``--adjustment=5``, ``--adjustment
    5``); ``optional`` ones take a value only attached (``-n1024``, ``--mount=FILE``);
    ``flags`` take none, and short ones may be clustered (``-fp``). Anything else is an
    option this reader does not know: unresolved.
    """
    with_arg = set(with_arg)
    flags = set(flags)
    optional = set(optional)
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
        if key in flags or key in optional:
            i += 1
        elif key in with_arg:
            i += 1 if "=" in t else 2
        elif len(t) > 2 and not t.startswith("--") and (t[:2] in with_arg or t[:2] in optional):
            i += 1  # -n5, -oL: option and value in one word
        elif (
            len(t) > 2
            and not t.startswith("--")
            and all(f"-{c}" in flags for c in t[1:-1])
            and (f"-{t[-1]}" in flags or f"-{t[-1]}" in with_arg)
        ):
            # -fp, or flags ending in an option whose value is the next word (-fo FILE)
            i += 2 if f"-{t[-1]}" in with_arg and f"-{t[-1]}" not in flags else 1
        else:
            acc.unresolved_(f"wrapper option {t!r} is not one this matcher reads", text)
            return None
    return i


def _wrapped_at(
    argv: tuple[Word, ...],
    via: tuple[str, ...],
    acc: Accumulator,
    text: str,
    with_arg: Iterable[str],
    flags: Iterable[str],
    *,
    digits: bool = False,
    optional: Iterable[str] = (),
) -> int | None:
    """:func:`_options`; when they are not all understood, the wrapper is the command."""
    i = _options(argv, with_arg, flags, acc, text, digits=digits, optional=optional)
    if i is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
    return i


def _simple_wrapper(
    with_arg: Iterable[str],
    flags: Iterable[str],
    *,
    digits: bool = False,
    operands: int = 0,
    optional: Iterable[str] = (),
    shell: bool = False,
) -> Any:
    """A wrapper that takes options, then ``operands`` words (timeout's DURATION), then the command.

    ``shell``: without a command it starts a shell, which reads commands from its input
    (``unshare``, ``chroot``, ``nsenter``). Options that make it act on something else
    (``taskset -p PID``) are not special: what follows is judged as a command, which at
    worst is a program that does not exist.
    """

    def unwrap(
        argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
    ) -> None:
        i = _wrapped_at(argv, via, acc, text, with_arg, flags, digits=digits, optional=optional)
        if i is None:
            return
        if i + operands >= len(argv):
            if shell:
                acc.unresolved_(f"{argv[0].text} without a command starts a shell", text)
            acc.commands.append(SimpleCommand(argv, via[:-1]))
            return
        _rest(argv, i + operands, via, acc, depth, text)

    return unwrap


def _env(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    i = _wrapped_at(
        argv,
        via,
        acc,
        text,
        ("-u", "--unset", "-C", "--chdir"),
        ("-i", "--ignore-environment", "-0", "--null"),
    )
    if i is None:
        return
    while i < len(argv) and argv[i].literal and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[i].text):
        acc.unresolved_("env sets a variable for the command (it can change what runs)", text)
        i += 1
    if i >= len(argv):
        # plain `env` prints the environment
        acc.commands.append(SimpleCommand(argv, via[:-1], known=True))
        return
    _rest(argv, i, via, acc, depth, text)


def _command(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    if any(w.literal and w.text in ("-v", "-V") for w in argv[1:2]):
        acc.commands.append(SimpleCommand(argv, via[:-1], known=True))  # only looks a name up
        return
    _simple_wrapper((), ("-p",))(argv, via, acc, depth, text)


def _shell(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
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
            if has_c:
                break  # the script itself is computed: said below
            acc.unresolved_("a shell option is computed at run time", text)
            acc.commands.append(SimpleCommand(argv, via[:-1]))
            return
        t = w.text
        if t in ("-i", "-l", "--login", "--rcfile", "--init-file") or (
            t.startswith("-") and not t.startswith("--") and ("i" in t or "l" in t)
        ):
            # startup files (~/.bashrc, ~/.profile) run whatever they say first
            acc.unresolved_("a shell that reads startup files", text)
            return
        if t in ("-o", "+o", "-O", "+O"):
            if t == "-o" and (
                i + 1 >= len(args) or not args[i + 1].literal or args[i + 1].text == "keyword"
            ):
                acc.unresolved_(f"a shell started with {_KEYWORD}", text)
                acc.commands.append(SimpleCommand(argv, via[:-1]))
                return
            i += 2
            continue
        if t == "--":
            i += 1
            break
        if t.startswith(("-", "+")) and len(t) > 1:
            if t.startswith("-") and not t.startswith("--") and "k" in t[1:]:
                acc.unresolved_(f"a shell started with {_KEYWORD}", text)
                acc.commands.append(SimpleCommand(argv, via[:-1]))
                return
            if "c" in t[1:] and t.startswith("-"):
                has_c = True
            i += 1
            continue
        break
    if has_c:
        if i >= len(args):
            acc.unresolved_("sh -c without a command", text)
            return
        _run_string(args[i], via, acc, depth, text, "sh -c")
        return
    script = args[i] if i < len(args) else None
    if (
        script is None
        or any(w.literal and w.text in ("-s", "-i") for w in args[:i])
        or (script.literal and (script.text == "-" or is_input(script.text)))
    ):
        acc.unresolved_("a shell reading commands from its input", text)
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    if not script.literal:
        acc.unresolved_("a shell running a script file named at run time", text)
    # sh script.sh: a command of its own, whose code is the file's (see check_scripts)
    acc.commands.append(SimpleCommand(argv, via[:-1], script=script))


# GNU and busybox xargs: options with a value (attached or the next word), options whose
# value is optional and only ever attached (-i[R], --replace[=R], -e[E], -l[N]), and flags.
_XARGS_ARG_SHORT = "ILnPsdEa"
_XARGS_OPTIONAL_SHORT = "iel"
_XARGS_FLAG_SHORT = "0rtxpo"
_XARGS_ARG_LONG = frozenset(
    {"--max-args", "--max-procs", "--delimiter", "--arg-file", "--max-chars",
     "--process-slot-var"}
)  # fmt: skip
_XARGS_OPTIONAL_LONG = frozenset({"--replace", "--eof", "--max-lines"})
_XARGS_FLAG_LONG = frozenset(
    {"--null", "--no-run-if-empty", "--verbose", "--exit", "--interactive", "--open-tty",
     "--show-limits"}
)  # fmt: skip


def _xargs_options(
    argv: tuple[Word, ...], acc: Accumulator, text: str
) -> tuple[int, str | None] | None:
    """Where xargs's command starts and its replace string (-I/-i/--replace), or None when an
    option is not one this reader knows."""
    replace: str | None = None
    i = 1
    while i < len(argv):
        w = argv[i]
        if not w.literal:
            acc.unresolved_("an xargs option is computed at run time", text)
            return None
        t = w.text
        if t == "--":
            return i + 1, replace
        if not t.startswith("-") or t == "-":
            return i, replace
        if t.startswith("--"):
            key, eq, value = t.partition("=")
            if key == "--process-slot-var":
                # each child gets this variable, set before its program is looked up: with
                # PATH, `xargs --process-slot-var=PATH ls` ran the workspace's `0/ls`
                acc.unresolved_(
                    "xargs --process-slot-var sets a variable of the command's environment "
                    "(PATH decides which program its name runs)",
                    text,
                )
                return None
            if key in _XARGS_ARG_LONG:
                i += 1 if eq else 2
            elif key in _XARGS_OPTIONAL_LONG:
                if key == "--replace":
                    replace = value if eq else "{}"
                i += 1
            elif key in _XARGS_FLAG_LONG:
                i += 1
            else:
                acc.unresolved_(f"xargs option {key!r} is not one this matcher reads", text)
                return None
            continue
        step = 1
        for k, letter in enumerate(t[1:], 1):
            rest = t[k + 1 :]
            if letter in _XARGS_ARG_SHORT:
                if rest:
                    value = rest
                elif i + 1 < len(argv) and argv[i + 1].literal:
                    value, step = argv[i + 1].text, 2
                else:
                    acc.unresolved_(f"xargs -{letter} takes a value this matcher cannot read", text)
                    return None
                if letter == "I":
                    replace = value
                break
            if letter in _XARGS_OPTIONAL_SHORT:
                if letter == "i":
                    replace = rest or "{}"
                break
            if letter not in _XARGS_FLAG_SHORT:
                acc.unresolved_(f"xargs option -{letter} is not one this matcher reads", text)
                return None
        i += step
    return i, replace


def _xargs(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    found = _xargs_options(argv, acc, text)
    if found is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
        return
    i, replace = found
    inner = argv[i:] or (Word("echo"),)
    if replace:
        # each word holding the replace string is made from input at run time
        inner = tuple(Word(w.text, False) if replace in w.text else w for w in inner)
    before = len(acc.commands)
    emit_command(inner, via, acc, depth + 1, text)
    # xargs appends words read from its input: the wrapped command's argv goes on unknown.
    for k in range(before, len(acc.commands)):
        c = acc.commands[k]
        acc.commands[k] = SimpleCommand(
            c.argv, c.via, open_tail=True, known=c.known, script=c.script
        )
        head = c.argv[0] if c.argv else None
        if head is not None and head.literal and runs_arguments(head.text.rsplit("/", 1)[-1]):
            acc.unresolved_(
                "xargs gives words from its input to a program that runs its arguments", text
            )


def _sudo(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
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


def _find(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    # find starts only the -exec/-ok commands reported below, once its expression is read
    acc.commands.append(SimpleCommand(argv, via[:-1], known=all(w.literal for w in argv)))
    i = 1
    while i < len(argv):
        w = argv[i]
        if not w.literal:
            acc.unresolved_(
                "a find expression computed at run time can start programs (-exec)", text
            )
            i += 1
        elif w.text in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            inner: list[Word] = []
            while j < len(argv) and not (argv[j].literal and argv[j].text in (";", "+")):
                inner.append(Word(argv[j].text, False) if "{}" in argv[j].text else argv[j])
                j += 1
            if inner:
                emit_command(tuple(inner), via, acc, depth + 1, text)
            i = j + 1
        elif w.text in ("-fprint", "-fprint0", "-fprintf", "-fls") and i + 1 < len(argv):
            acc.redirects.append(Redirect(argv[i + 1], True, w.text))
            i += 2
        else:
            i += 1


def _run_string(
    script: Word, via: tuple[str, ...], acc: Accumulator, depth: int, text: str, what: str
) -> None:
    """A wrapper that hands a string to a shell (su -c, watch, flock -c): parse it too."""
    if not script.literal:
        acc.unresolved_(f"{what} runs a string computed at run time", text)
        return
    acc.merge(acc.parse(script.text, depth + 1, via))


def _su(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    acc.commands.append(SimpleCommand(argv, via[:-1]))  # a privilege change, like sudo
    for i, w in enumerate(argv[1:], 1):
        if w.literal and w.text in ("-c", "--command") and i + 1 < len(argv):
            _run_string(argv[i + 1], via, acc, depth, text, "su -c")
            return
        if w.literal and w.text.startswith("--command="):
            _run_string(Word(w.text.split("=", 1)[1]), via, acc, depth, text, "su -c")
            return
    acc.unresolved_("su without -c starts a shell", text)


def _watch(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
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


def _flock(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
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


def _runuser(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    """``runuser -u USER [--] CMD`` runs CMD; ``runuser [-c CMD] USER`` is su's form."""
    if not any(w.literal and w.text.split("=", 1)[0] in ("-u", "--user") for w in argv[1:]):
        _su(argv, via, acc, depth, text)
        return
    acc.commands.append(SimpleCommand(argv, via[:-1]))  # a privilege change, like sudo
    i = _options(
        argv,
        ("-u", "--user", "-g", "--group", "-G", "--supp-group", "-w", "--whitelist-environment"),
        ("-l", "--login", "-m", "-p", "--preserve-environment", "-P", "--pty"),
        acc,
        text,
    )
    if i is None:
        return
    if i >= len(argv):
        acc.unresolved_("runuser without a command starts a shell", text)
        return
    _rest(argv, i, via, acc, depth, text)


def _script(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    """``script -c CMD [file]`` hands CMD to a shell; without -c it starts an interactive one."""
    for i, w in enumerate(argv[1:], 1):
        if not w.literal:
            break
        t = w.text
        if t.startswith("--command="):
            _run_string(Word(t.split("=", 1)[1]), via, acc, depth, text, "script -c")
            return
        if t == "--command" or (t.startswith("-") and not t.startswith("--") and "c" in t):
            rest = t[t.index("c") + 1 :] if t != "--command" else ""
            if rest:
                _run_string(Word(rest), via, acc, depth, text, "script -c")
            elif i + 1 < len(argv):
                _run_string(argv[i + 1], via, acc, depth, text, "script -c")
            else:
                break
            return
    acc.unresolved_("script without -c starts a shell", text)
    acc.commands.append(SimpleCommand(argv, via[:-1]))


def _sg(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    """``sg GROUP [-c] COMMAND``: COMMAND is one string handed to /bin/sh."""
    words = [w for w in argv[1:] if not (w.literal and w.text == "-")]
    rest = words[1:]
    if rest and rest[0].literal and rest[0].text == "-c":
        rest = rest[1:]
    if len(rest) == 1:
        _run_string(rest[0], via, acc, depth, text, "sg")
        return
    acc.unresolved_("sg without one command string starts a shell", text)
    acc.commands.append(SimpleCommand(argv, via[:-1]))


def _parallel(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    acc.unresolved_("parallel runs its arguments and its input as shell text", text)
    acc.commands.append(SimpleCommand(argv, via[:-1]))


# Resource options of prlimit: a value only attached (-n1024, --nofile=1024).
_PRLIMIT_RESOURCES = (
    *(f"-{c}" for c in "cdefilmnqrstuvxy"),
    "--as", "--core", "--cpu", "--data", "--fsize", "--locks", "--memlock", "--msgqueue",
    "--nice", "--nofile", "--nproc", "--rss", "--rtprio", "--rttime", "--sigpending",
    "--stack",
)  # fmt: skip
_NAMESPACES = (
    "-m", "--mount", "-u", "--uts", "-i", "--ipc", "-n", "--net", "-p", "--pid", "-U",
    "--user", "-C", "--cgroup", "-T", "--time",
)  # fmt: skip


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
    "timeout": _simple_wrapper(
        ("-s", "--signal", "-k", "--kill-after"),
        ("--preserve-status", "--foreground", "-v", "--verbose"),
        operands=1,  # DURATION
    ),
    "xargs": _xargs,
    "taskset": _simple_wrapper(
        (),
        ("-a", "--all-tasks", "-c", "--cpu-list", "-p", "--pid"),
        operands=1,
    ),
    "chrt": _simple_wrapper(
        ("-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"),
        (
            "-a",
            "--all-tasks",
            "-b",
            "--batch",
            "-d",
            "--deadline",
            "-f",
            "--fifo",
            "-i",
            "--idle",
            "-o",
            "--other",
            "-r",
            "--rr",
            "-R",
            "--reset-on-fork",
            "-v",
            "--verbose",
            "-p",
            "--pid",
            "-m",
            "--max",
        ),
        operands=1,
    ),
    "prlimit": _simple_wrapper(
        ("-p", "--pid", "-o", "--output"),
        ("--noheadings", "--raw", "--verbose"),
        optional=_PRLIMIT_RESOURCES,
    ),
    "setpriv": _simple_wrapper(
        (
            "--reuid",
            "--regid",
            "--ruid",
            "--euid",
            "--rgid",
            "--egid",
            "--groups",
            "--inh-caps",
            "--ambient-caps",
            "--bounding-set",
            "--securebits",
            "--pdeathsig",
            "--selinux-label",
            "--apparmor-profile",
            "--landlock-access",
            "--landlock-rule",
        ),
        (
            "-d",
            "--dump",
            "--nnp",
            "--no-new-privs",
            "--clear-groups",
            "--keep-groups",
            "--init-groups",
            "--reset-env",
        ),
    ),
    "unshare": _simple_wrapper(
        (
            "-S",
            "--setuid",
            "-G",
            "--setgid",
            "-R",
            "--root",
            "-w",
            "--wd",
            "--propagation",
            "--setgroups",
            "--map-user",
            "--map-group",
            "--map-users",
            "--map-groups",
        ),
        (
            "-f",
            "--fork",
            "-r",
            "--map-root-user",
            "-c",
            "--map-current-user",
            "--map-auto",
            "--keep-caps",
            "--kill-child",
            "--mount-proc",
            "--monotonic",
            "--boottime",
            *_NAMESPACES,
        ),
        shell=True,
    ),
    "nsenter": _simple_wrapper(
        ("-t", "--target", "-S", "--setuid", "-G", "--setgid"),
        (
            "-a",
            "--all",
            "--preserve-credentials",
            "-r",
            "--root",
            "-w",
            "--wd",
            "-W",
            "--wdns",
            "-F",
            "--no-fork",
            "-Z",
            "--follow-context",
            "--user-parent",
            "--keep-caps",
            *_NAMESPACES,
        ),
        shell=True,
    ),
    "chroot": _simple_wrapper(
        ("--userspec", "--groups"), ("--skip-chdir",), operands=1, shell=True
    ),
    "pkexec": _simple_wrapper(("--user",), ("--disable-internal-agent", "--keep-cwd"), shell=True),
    "fakeroot": _simple_wrapper(
        ("-l", "--lib", "--faked", "-s", "-i", "-b"), ("-u", "--unknown-is-real"), shell=True
    ),
    "cgexec": _simple_wrapper(("-g",), ("--sticky",)),
    "strace": _simple_wrapper(
        (
            "-a",
            "-b",
            "-e",
            "-I",
            "-o",
            "-O",
            "-p",
            "-P",
            "-s",
            "-S",
            "-u",
            "-X",
            "--trace",
            "--signal",
            "--status",
            "--output",
            "--attach",
            "--string-limit",
            "--user",
            "--columns",
            "--detach-on",
            "--trace-path",
            "--summary-sort-by",
            "--const-print-style",
            "--absolute-timestamps",
            "--timestamps",
            "--relative-timestamps",
        ),
        (
            "-c",
            "-C",
            "-d",
            "-D",
            "-f",
            "-F",
            "-i",
            "-k",
            "-n",
            "-q",
            "-r",
            "-t",
            "-T",
            "-v",
            "-w",
            "-x",
            "-y",
            "-z",
            "-Z",
            "-ff",
            "-qq",
            "-tt",
            "-ttt",
            "-xx",
            "-yy",
            "--follow-forks",
            "--output-separately",
            "--summary-only",
            "--summary",
            "--summary-wall-clock",
            "--failed-only",
            "--successful-only",
            "--syscall-times",
            "--stack-traces",
            "--decode-fds",
            "--no-abbrev",
            "--quiet",
            "--instruction-pointer",
            "--syscall-number",
            "--daemonize",
            "--seccomp-bpf",
            "--kill-on-exit",
        ),
    ),
    "ltrace": _simple_wrapper(
        ("-a", "-A", "-D", "-e", "-F", "-l", "-n", "-o", "-p", "-s", "-u", "-x", "-L"),
        ("-b", "-c", "-C", "-f", "-i", "-r", "-S", "-t", "-tt", "-ttt", "-T", "-w"),
    ),
    "runuser": _runuser,
    "script": _script,
    "sg": _sg,
    "parallel": _parallel,
    "sudo": _sudo,
    "doas": _sudo,
    "find": _find,
    **{name: _shell for name in _SHELLS},
}
