"""Wrappers that only run their argument, looked through (``env``, ``sudo``, ``sh -c``, …).

:func:`emit_command` reports one command: a computed name or a builtin that
runs text (``eval``, ``source``, …) is unresolved; a wrapper's inner command
is reported with the wrapper in ``via`` (``sudo``/``doas``, ``su`` and ``find
-exec`` report the outer command too); a string handed to a shell is parsed
through :attr:`Accumulator.parse`. Recursion is bounded by ``MAX_DEPTH``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ._shellparts import MAX_DEPTH, Accumulator, Redirect, SimpleCommand, Word

__all__ = ["emit_command"]

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


def _wrapped_at(
    argv: tuple[Word, ...],
    via: tuple[str, ...],
    acc: Accumulator,
    text: str,
    with_arg: Iterable[str],
    flags: Iterable[str],
    *,
    digits: bool = False,
) -> int | None:
    """:func:`_options`; when they are not all understood, the wrapper is the command."""
    i = _options(argv, with_arg, flags, acc, text, digits=digits)
    if i is None:
        acc.commands.append(SimpleCommand(argv, via[:-1]))
    return i


def _simple_wrapper(
    with_arg: Iterable[str], flags: Iterable[str], *, digits: bool = False, operands: int = 0
) -> Any:
    """A wrapper that takes options, then ``operands`` words (timeout's DURATION), then the command."""

    def unwrap(
        argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
    ) -> None:
        i = _wrapped_at(argv, via, acc, text, with_arg, flags, digits=digits)
        if i is not None:
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
        acc.commands.append(SimpleCommand(argv, via[:-1]))  # plain `env` prints the environment
        return
    _rest(argv, i, via, acc, depth, text)


def _command(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
    if any(w.literal and w.text in ("-v", "-V") for w in argv[1:2]):
        acc.commands.append(SimpleCommand(argv, via[:-1]))  # only looks a name up
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
        _run_string(args[i], via, acc, depth, text, "sh -c")
        return
    if i >= len(args) or any(w.literal and w.text in ("-s", "-i") for w in args[:i]):
        acc.unresolved_("a shell reading commands from its input", text)
        return
    acc.commands.append(SimpleCommand(argv, via[:-1]))  # sh script.sh: a command of its own


def _xargs(
    argv: tuple[Word, ...], via: tuple[str, ...], acc: Accumulator, depth: int, text: str
) -> None:
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
    emit_command(inner, via, acc, depth + 1, text)
    # xargs appends words read from its input: the wrapped command's argv goes on unknown.
    for k in range(before, len(acc.commands)):
        c = acc.commands[k]
        acc.commands[k] = SimpleCommand(c.argv, c.via, open_tail=True)


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
                emit_command(tuple(inner), via, acc, depth + 1, text)
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
    script: Word, via: tuple[str, ...], acc: Accumulator, depth: int, text: str, what: str
) -> None:
    """A wrapper that hands a string to a shell (su -c, watch, flock -c): parse it too."""
    if not script.literal:
        acc.unresolved_(f"{what} runs a string computed at run time", text)
        return
    sub = acc.parse(script.text, depth + 1, via)
    acc.commands.extend(sub.commands)
    acc.redirects.extend(sub.redirects)
    acc.unresolved.extend(sub.unresolved)
    acc.cd = acc.cd or sub.changes_directory


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
    "sudo": _sudo,
    "doas": _sudo,
    "find": _find,
    **{name: _shell for name in _SHELLS},
}
