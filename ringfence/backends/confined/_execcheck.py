"""Exec checks inside the confined sandbox: every ``execve``/``execveat`` against the deny rules.

Imported by the supervisor (:mod:`._supervisor`, ``python -I -S``; standard
library and :mod:`ringfence._confine` only) the first time a command carries deny rules. Each command's child
installs :func:`install_notifier` (``SECCOMP_RET_USER_NOTIF`` on ``execve`` and
``execveat``, ``SECCOMP_FILTER_FLAG_NEW_LISTENER``) right before its own ``exec`` and
hands the listener to the supervisor over a socketpair; every process of the command
inherits the filter (seccomp filters cannot be removed). For each notification the
supervisor (:meth:`Checker.answer`) reads the path and argv from the process's memory
(``process_vm_readv``, :class:`_Remote`, under change sets, where the commands' own filter
denies the call to them; ``/proc/<pid>/mem`` otherwise), resolves the program as the kernel
will, checks it and answers: continue, or fail the ``exec`` with ``EACCES`` and record the
denial (rule, program, argv) for the result, once the notification is confirmed live
(``SECCOMP_IOCTL_NOTIF_ID_VALID``). An ``execve`` of a plain program on a read-only path
with an argv let go before is let go again at once (the same path and argv, the same
decision).

What one ``exec`` is checked as (each an *invocation*: the names the program goes by
and its argv; a rule matches an invocation when it matches ``[name] + argv[1:]`` for
any of those names, the runtime's own deny-side matching: a first element without a
``/`` is compared with the name's last component):

- the program's names: the path given, ``argv[0]`` (a multi-call binary dispatches on
  it), the path the file really has (the path given resolved against the process's
  working directory or ``execveat``'s descriptor, links followed in the process's view:
  :meth:`Checker._resolve`), and every rule
  name the *file* is: the same inode as a file a rule names on the command's
  ``PATH`` (a hard or symbolic link to ``rm``), or the same bytes (a copy of ``rm``,
  compared by size first, then SHA-256), or for an ELF program the same image (the program
  headers, then the SHA-256 of the loaded segments: bytes appended or a section table
  changed run nowhere, so they do not make another program);
- ``#!`` scripts: the interpreter (and its optional argument) as the kernel reads
  the first line, run with the script's path and the arguments: a script whose
  interpreter is denied is denied; nested interpreters too (up to the kernel's
  depth); and the other way round, a denied ``#!`` script handed to its own interpreter
  (``sh /usr/bin/gunzip f.gz``: the kernel would start the same interpreter on the same
  file) is that script with the words after it (:meth:`Checker._script_argument`): by
  name, and for the interpreter of such a script (known by identity too) by the inode or
  bytes of what any word, an ``--option=value``'s value or its standard input names;
- a rule's relative path (``scripts/deploy.sh``) names that file below each root, and a
  rule's name a file in a ``PATH`` directory commands write: looked up at every exec
  (:meth:`Checker._relative_files`); a program below a root goes by its path there too;
- an ELF program whose ``PT_INTERP`` is not the dynamic loader: that interpreter, which
  the kernel maps and starts with the program's argv;
- valgrind's tools and launcher (``valgrind /usr/bin/rm``: the tool maps the program
  itself): the first word after its options is an invocation too;
- the dynamic loader run directly (``ld.so /usr/bin/rm``): the program it is given
  (after its own options) is an invocation too; a program given without a ``/``
  (the loader searches it like a library) is refused while deny rules apply;
- git run as ``git-<command>`` (``argv[0]`` so named, the file git): ``git <command>
  argv[1:]`` is an invocation too (git runs that builtin, never an alias);
- ``busybox`` (``argv[0]`` named ``busybox…``): ``argv[1:]`` is an invocation too; and
  a multi-call binary (busybox, toybox: found on ``PATH`` by name, then known by inode
  and content) that has an applet a rule names is refused whatever it is called: its
  shell runs applets inside itself, without an exec to check.

**The kernel's backstop (Landlock).** The supervisor reads the path and argv before the
kernel does, and a process with a second thread (or memory shared with another process)
can change them in between; so can a rename between the supervisor's open and the
kernel's. For rules that deny a program whatever its arguments (``rm *``: the argv
pattern is the name and ``**``) the denied files outside the writable places (the host's
read-only programs, busybox when it holds a denied applet) are also refused by a Landlock
layer each command's child adds before its exec (:meth:`Checker.execute_ruleset`): it
handles ``EXECUTE`` and grants it beneath every entry of ``/`` and of each directory on
the way to a denied file, except those files and that way; a rule belongs to an inode,
so every hard link of a denied file (:func:`_hard_links`) is denied and walked to as well.
The kernel checks it on the
file it really executes (and on an interpreter it opens for ``#!``): no race. It does
not see the dynamic loader mapping a program (``ld.so /usr/bin/rm``: the loader is what
executes), copies (another inode), or argv.

The rules come from the kernel as JSON (:mod:`._execrules`): a first-word index,
literal words compared with ``==``, glob words as the runtime's own regex
(``fnmatch.translate``, ``re.DOTALL``), ``**`` any number of words.
"""

from __future__ import annotations

import errno
import os
import struct

from ..._confine import landlock, seccomp
from ..._confine.libc import ProcessMemory

# ``re``, ``json`` and ``hashlib`` are imported where they are first needed (a command with
# deny rules): the session's start probes the notifier and imports only the above (those
# three cost tens of milliseconds of a start under ``python -I -S``).

__all__ = [
    "Checker",
    "Denial",
    "ExecRules",
    "Refused",
    "install_notifier",
    "notifier_program",
    "probe",
    "shebang",
    "sync_wakeups",
]

_NR_EXECVE = seccomp.X86_64["execve"]
_NR_EXECVEAT = seccomp.X86_64["execveat"]
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_BINPRM_BUF_SIZE = 256
_MAX_DEPTH = 8  # interpreters, loaders, busybox, nested (the kernel allows 5 #! levels)
_MAX_ARGV_BYTES = 8 << 20  # more than the kernel takes (E2BIG): refused unread
_MAX_ARGC = 1 << 20
_PAGE = 4096
_CHUNK = 256  # bytes of a string read at a time (to the end of its page at most)
_PATH_LIMIT = 4096
_ARG_LIMIT = 128 << 10  # the kernel's MAX_ARG_STRLEN
_HASH_LIMIT = 256 << 20  # files compared by content are at most this large
_MAX_PHDRS_BYTES = 65536  # the kernel's bound on an ELF's program header table
# The dynamic loader's own options (glibc's rtld): those that take a value, those that do not.
_LOADER_VALUE_OPTIONS = frozenset(
    {
        "--library-path",
        "--inhibit-rpath",
        "--audit",
        "--preload",
        "--argv0",
        "--glibc-hwcaps-prepend",
        "--glibc-hwcaps-mask",
    }
)
_LOADER_FLAG_OPTIONS = frozenset(
    {
        "--list",
        "--verify",
        "--inhibit-cache",
        "--list-tunables",
        "--list-diagnostics",
        "--help",
        "--version",
    }
)
_STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MULTICALL = ("busybox", "toybox")  # binaries whose shell runs their applets without exec
# git's options before its command that take the next word as their value (git(1)).
_GIT_VALUE_OPTIONS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
_GIT_EXEC_PATHS = ("/usr/lib/git-core", "/usr/libexec/git-core", "/usr/local/libexec/git-core")
# Where valgrind keeps its tools (``memcheck-amd64-linux``, …): each loads and runs the program
# its argv names in its own process, as the dynamic loader does, with no exec of it.
_VALGRIND_DIRS = ("/usr/libexec/valgrind", "/usr/lib/valgrind", "/usr/local/libexec/valgrind")


def notifier_program() -> bytes:
    """The filter: ``execve`` and ``execveat`` notify the listener; everything else passes
    (foreign ABIs are killed by the session's first filter already, and here too)."""
    return b"".join(
        [
            *seccomp.prologue(kill_x32=False),
            seccomp.insn(seccomp.JEQ_K, 2, 0, _NR_EXECVE),
            seccomp.insn(seccomp.JEQ_K, 1, 0, _NR_EXECVEAT),
            seccomp.ret(seccomp.RET_ALLOW),
            seccomp.ret(seccomp.RET_USER_NOTIF),
        ]
    )


_NOTIFIER = seccomp.Filter(notifier_program())  # built ahead: the child only installs it


def install_notifier() -> int:
    """Install the exec filter on the calling thread; its listener descriptor. Raises
    LayerUnavailable.

    Needs ``no_new_privs`` (the supervisor set it) or ``CAP_SYS_ADMIN``.
    """
    return _NOTIFIER.install(seccomp.FILTER_FLAG_NEW_LISTENER)


sync_wakeups = seccomp.sync_wakeups


# -- the rules -----------------------------------------------------------------------------


class _Rule:
    __slots__ = ("label", "patterns", "source", "split")

    def __init__(
        self,
        label: str,
        source: str,
        patterns: list[list[object]],
        split: list[list[object]] | None = None,
    ) -> None:
        self.label = label
        self.source = source
        self.patterns = patterns
        # the patterns with each `--name=value` element as two (the runtime's
        # `_matchers.split_long_pattern`), met by an argv read the same way
        self.split = split or []


class _Glob:
    """A glob word: the runtime's regex for it, and whether the glob has a ``/`` (a first
    word without one is compared with the program's last path component)."""

    __slots__ = ("regex", "slash", "text")

    def __init__(self, regex: str, slash: bool, text: str = "") -> None:
        import re

        self.regex = re.compile(regex, re.DOTALL)
        self.slash = slash
        self.text = text  # the glob as the rule spells it (long options, flags)

    def fullmatch(self, word: str) -> object:
        return self.regex.fullmatch(word)


def _element(spec: object) -> object:
    """``"**"``, a literal string, or a glob (from ``["G", regex, has_slash]``)."""
    if spec == "**":
        return "**"
    if isinstance(spec, list) and spec[0] == "G":
        return _Glob(spec[1], bool(spec[2]), str(spec[3]) if len(spec) > 3 else "")
    if isinstance(spec, list) and spec[0] == "L":
        return str(spec[1])
    raise ValueError(f"bad rule element {spec!r}")


class ExecRules:
    """The deny rules one command runs under, indexed by their first word."""

    def __init__(self, payload: bytes) -> None:
        import json

        data = json.loads(payload)
        self.deny: list[_Rule] = []
        # first literal word (its last component for deny-side matching) -> rule indexes
        self.by_name: dict[str, list[int]] = {}
        self.by_path: dict[str, list[int]] = {}
        self.wild: list[int] = []  # first word a glob or **
        self.names: set[str] = set()  # literal names rules start with (identity lookup)
        self.paths: set[str] = set()
        self.globs: list[_Glob] = []
        for index, item in enumerate(data["rules"]):
            patterns = [[_element(e) for e in p] for p in item["patterns"]]
            split = [[_element(e) for e in p] for p in item.get("split", [])]
            self.deny.append(_Rule(item["label"], item.get("source", ""), patterns, split))
            for p in patterns:
                first = p[0]
                if isinstance(first, str) and first != "**":
                    if "/" in first:
                        self.by_path.setdefault(first, []).append(index)
                        self.paths.add(first)
                    else:
                        self.by_name.setdefault(first, []).append(index)
                        self.names.add(first)
                else:
                    self.wild.append(index)
                    if isinstance(first, _Glob):
                        self.globs.append(first)

    def candidates(self, name: str) -> list[int]:
        base = name.rsplit("/", 1)[-1]
        found = self.by_name.get(base, [])
        if "/" in name:
            found = found + self.by_path.get(name, [])
        return found + self.wild if self.wild else found

    def match(self, names: list[str], rest: list[str]) -> _Rule | None:
        """The first rule matching ``[name] + rest`` for one of ``names``; None."""
        split: list[str] | None = None
        for name in names:
            for index in self.candidates(name):
                rule = self.deny[index]
                for pattern in rule.patterns:
                    if _matches(pattern, name, rest):
                        return rule
                if rule.split:
                    if split is None:
                        split = _split_long_words(rest)
                    for pattern in rule.split:
                        if _matches(pattern, name, split):
                            return rule
        return None


def _long_name(text: str) -> bool:
    """``--name`` (not ``--`` itself): the runtime's ``_matchers._long_name``."""
    return len(text) > 2 and text.startswith("--") and text[2] != "-"


def _split_long_words(words: list[str]) -> list[str]:
    """Each ``--name=value`` word as two (``_matchers.split_long_words``)."""
    out: list[str] = []
    for word in words:
        name, eq, value = word.partition("=")
        if eq and _long_name(name):
            out += [name, value]
        else:
            out.append(word)
    return out


def _abbreviates(element: object, word: str) -> bool:
    """A long option the element names, abbreviated (``--recur`` for ``--recursive``): the
    runtime's ``_matchers.abbreviates``."""
    text = element.text if isinstance(element, _Glob) else element
    if not isinstance(text, str) or not text.startswith("--"):
        return False
    typed, eq, value = word.partition("=")
    if not _long_name(typed):
        return False
    end = min((text.find(c) for c in "*?[" if c in text), default=len(text))
    full = text[:end].partition("=")[0]
    if not _long_name(full) or len(typed) >= len(full) or not full.startswith(typed):
        return False
    return _word(element, full + eq + value)


def _arg(element: object, word: str) -> bool:
    """An argument word's deny-side match (the runtime's ``deny_element_matches``)."""
    return _word(element, word) or _abbreviates(element, word)


def _word(element: object, word: str) -> bool:
    if isinstance(element, str):
        return element == word
    return element.fullmatch(word) is not None  # type: ignore[attr-defined]


def _matches(pattern: list[object], name: str, rest: list[str]) -> bool:
    """The runtime's deny-side argv match over literal words (``_matchers._match_argv``)."""
    first = pattern[0]
    slash = first.slash if isinstance(first, _Glob) else "/" in first  # type: ignore[operator]
    word = name if slash else name.rsplit("/", 1)[-1]
    if first != "**":
        if not _word(first, word):
            return False
        memo: dict[tuple[int, int], bool] = {}
        if _tail(pattern, 1, rest, 0, memo):
            return True
        if len(pattern) < 2 or pattern[1] == "**":
            return False
        if _flags_match(pattern, rest):
            return True
        # Past the program's leading options (``git --git-dir=.git push``), every reading,
        # as the runtime's deny side reads a command line (``_matchers.option_ends``).
        if any(_tail(pattern, 1, rest, k, memo) for k in _option_ends(rest) if k):
            return True
        return _permuted(pattern, rest) or _hoisted(pattern, rest)
    return _tail(pattern, 0, [word, *rest], 0, {}, program=True)


def _flag_word(element: object, last: bool) -> str | None:
    """A pattern's flags word (``-rf``; the last may be a glob ``-rf*``), else None."""
    if isinstance(element, _Glob):
        text = element.text
        if not last or not text.endswith("*"):
            return None
        text = text[:-1]
    else:
        text = element  # type: ignore[assignment]
    if (
        isinstance(text, str)
        and len(text) > 1
        and text[0] == "-"
        and text[1:].isascii()
        and text[1:].isalnum()
    ):
        return text
    return None


def _is_option(word: str) -> bool:
    """``-x``, ``--long`` (not ``-`` nor ``--``): the runtime's ``_matchers._is_option``."""
    return len(word) > 1 and word.startswith("-") and word != "--"


def _element_is_option(element: object) -> bool:
    text = element.text if isinstance(element, _Glob) else element
    return isinstance(text, str) and text != "**" and _is_option(text)


def _leading_flags(pattern: list[object]) -> tuple[int, set[str]]:
    """The pattern's leading flags words after the program (the last may be a glob,
    ``-rf*``): how many, and their letters (``_matchers.short_flags``)."""
    count = 0
    flags: list[str] = []
    while 1 + count < len(pattern):
        word = _flag_word(pattern[1 + count], False)
        if word is None:
            break
        flags.append(word)
        count += 1
    if 1 + count < len(pattern) and (word := _flag_word(pattern[1 + count], True)) is not None:
        flags.append(word)  # `rm -rf*`: the runtime's `_SHORT_OPEN`
        count += 1
    return count, set("".join(f[1:] for f in flags).lower())


def _flag_letters(word: str) -> set[str]:
    """The flags an option word gives: the runtime's ``_matchers.flag_letters``."""
    if word.startswith("--"):
        return {word[2].lower()} if len(word) > 2 and word[2].isalnum() else set()
    return {c.lower() for c in word[1:]}


def _option_met(element: object, word: str) -> bool:
    """The runtime's ``_matchers.option_met``: the element itself, abbreviated, or a long
    option's first letter among a short flags word's."""
    if _arg(element, word):
        return True
    text = element.text if isinstance(element, _Glob) else element
    if isinstance(text, str) and _long_name(text) and text[2].isalnum():
        return not word.startswith("--") and text[2].lower() in _flag_letters(word)
    return False


def _permuted(pattern: list[object], rest: list[str]) -> bool:
    """The options anywhere among the operands, as GNU getopt permutes them (``rm d -fr``):
    the runtime's ``_matchers._match_permuted``, for a pattern ending in ``**``."""
    if len(pattern) < 3 or pattern[-1] != "**":
        return False
    # past the program's leading options too, every reading (`git -C . push origin -f`)
    starts = _option_ends(rest)
    if len(rest) + 1 > _PERMUTED_WORDS or len(starts) > _PERMUTED_STARTS:
        return _loose(pattern, rest)
    return any(_permuted_from(pattern, rest[k:]) for k in starts)


# The runtime's bounds on the permuted readings (``_matchers._PERMUTED_WORDS``, ...): past
# them a command is read loosely, refused where the runtime's reading is MAYBE.
_PERMUTED_WORDS = 48
_PERMUTED_STARTS = 6


def _loose(pattern: list[object], rest: list[str]) -> bool:
    """The runtime's ``_matchers._loose``: flags by their union, each named option by some
    option word, each other element by some word, in any order (over-matches)."""
    options = [w for w in rest if _is_option(w)]
    count, wanted = _leading_flags(pattern)
    if wanted and not wanted <= {c for o in options for c in _flag_letters(o)}:
        return False
    for element in pattern[1 + count :]:
        if element == "**":
            continue
        if _element_is_option(element):
            if not any(_option_met(element, o) for o in options):
                return False
        elif not any(_arg(element, w) for w in rest):
            return False
    return True


def _permuted_from(pattern: list[object], rest: list[str]) -> bool:
    """:func:`_permuted` over ``rest`` (the program's leading options already skipped)."""
    options: list[str] = []
    operands: list[str] = []
    ended = False
    for word in rest:
        if not ended and word == "--":
            ended = True
        elif not ended and _is_option(word):
            options.append(word)
        else:
            operands.append(word)
    if not options:
        return False
    count, wanted = _leading_flags(pattern)
    have = {c for o in options for c in _flag_letters(o)}
    if not wanted <= have:
        return False
    tail = pattern[1 + count :]
    for element in tail:
        if _element_is_option(element) and not any(_option_met(element, o) for o in options):
            return False
    kept = [e for e in tail if not _element_is_option(e)]
    return _tail([pattern[0], *kept], 1, operands, 0, {})


def _hoisted_forms(
    words: list[str], limit: int, named: list[object], wanted: set[str]
) -> list[list[str]] | None:
    """The options that follow an operand moved before the first ``p`` operands, each alone
    or with its value, past each place the leading options may end: the runtime's
    ``_matchers.hoisted_forms``; an option ``meets`` the rule's when it gives one of the
    ``wanted`` flags or meets one of its ``named`` options."""

    def meets(word: str) -> bool:
        return bool(wanted & _flag_letters(word)) or any(_option_met(e, word) for e in named)

    forms: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    starts = _option_ends(list(words))
    if len(words) > _PERMUTED_WORDS or len(starts) > _PERMUTED_STARTS:
        return None
    for start in starts:
        head, tail = list(words[:start]), list(words[start:])
        valued = [
            i for i in range(len(tail) - 1)
            if _is_option(tail[i]) and "=" not in tail[i] and tail[i + 1] != "--"
            and not _is_option(tail[i + 1])
        ]  # fmt: skip
        readings = [set(), set(valued), *({i} for i in valued if meets(tail[i]))]
        if len(readings) > 2 + _PERMUTED_STARTS:
            return None
        for takes in readings:
            groups: list[list[str]] = []
            operands: list[str] = []
            rest: list[str] = []
            late = False  # an option after an operand
            i = 0
            while i < len(tail):
                word = tail[i]
                if word == "--":
                    rest = tail[i:]
                    break
                if not _is_option(word):
                    operands.append(word)
                elif i in takes:
                    late = late or bool(operands)
                    groups.append([word, tail[i + 1]])
                    i += 1
                else:
                    late = late or bool(operands)
                    groups.append([word])
                i += 1
            if not late:
                continue
            # the options that meet the rule's first, the others after them (`-q x` would
            # stand between `push` and `--repo o`)
            ordered = [w for g in groups if meets(g[0]) for w in g]
            ordered += [w for g in groups if not meets(g[0]) for w in g]
            for p in range(min(len(operands), limit) + 1):
                form = head + operands[:p] + ordered + operands[p:] + rest
                if tuple(form) not in seen:
                    seen.add(tuple(form))
                    forms.append(form)
    return forms


def _hoisted(pattern: list[object], rest: list[str]) -> bool:
    """The readings of ``_matches`` over each form with the options, values kept, moved
    before the operands (``ssh x -o ProxyCommand=…``): the runtime's
    ``_matchers._match_hoisted``."""
    if len(pattern) < 3 or pattern[-1] != "**":
        return False
    _count, wanted = _leading_flags(pattern)
    named = [e for e in pattern[1:] if _element_is_option(e)]
    forms = _hoisted_forms(rest, len(pattern), named, wanted)
    if forms is None:
        return _loose(pattern, rest)
    for form in forms:
        memo: dict[tuple[int, int], bool] = {}
        if _tail(pattern, 1, form, 0, memo) or _flags_match(pattern, form):
            return True
        if any(_tail(pattern, 1, form, k, memo) for k in _option_ends(form) if k):
            return True
    return False


def _flags_match(pattern: list[object], rest: list[str]) -> bool:
    """A pattern's leading short options as a set (``rm -rf *`` denies ``rm -fr``, ``rm -r
    -f``, ``rm -v -rf``): the runtime's ``_matchers.short_flags``/``_match_flags``."""
    count, wanted = _leading_flags(pattern)
    if not count:
        return False
    last = (_flag_word(pattern[count], True) or "")[-1:].lower()  # the flag that may take a value
    have: set[str] = set()
    memo: dict[tuple[int, int], bool] = {}  # one table for every place tried below

    def attached(value: str, j: int, k: int) -> bool:
        """``value`` as the word at ``k``, then the words after it, from element ``j``."""
        if j == len(pattern):
            return False
        if pattern[j] == "**":
            return _tail(pattern, j, rest, k + 1, memo) or attached(value, j + 1, k)
        return _arg(pattern[j], value) and _tail(pattern, j + 1, rest, k + 1, memo)

    valued = False  # the word before was an option that may take this one as its value
    for k, word in enumerate(rest):
        if not word.startswith("-") or word == "--":
            if valued and word != "--":
                valued = False  # every reading, as `_option_ends`
                continue
            return False
        valued = "=" not in word
        # the value attached to the last flag (`-oProxyCommand=x`), at the letter's first
        # place: the runtime's reading
        i = next((j for j in range(1, len(word)) if word[j].lower() == last), 0)
        if (
            i
            and i < len(word) - 1
            and not word.startswith("--")
            and wanted <= have | {c.lower() for c in word[1 : i + 1]}
            and attached(word[i + 1 :], 1 + count, k)
        ):
            return True
        have |= _flag_letters(word)
        if wanted <= have and _tail(pattern, 1 + count, rest, k + 1, memo):
            return True
    return False


def _option_ends(words: list[str]) -> list[int]:
    """Where a subcommand may begin after ``words``' leading options (``-x``, ``--long``,
    either perhaps followed by its value): the runtime's ``_matchers.option_ends``."""
    ends: list[int] = []
    todo, seen = [0], set()
    while todo:
        j = todo.pop()
        if j in seen:
            continue
        seen.add(j)
        ends.append(j)
        word = words[j] if j < len(words) else ""
        if word.startswith("-") and word != "--":
            todo.append(j + 1)
            if "=" not in word and j + 1 < len(words):
                todo.append(j + 2)
    return ends


def _tail(
    pattern: list[object],
    j: int,
    words: list[str],
    i: int,
    memo: dict[tuple[int, int], bool],
    program: bool = False,
) -> bool:
    """Whether ``words[i:]`` match ``pattern[j:]``; ``program``: ``words[0]`` is the
    program's name (matched as written, never as an abbreviated option). ``memo`` is one
    pattern's and one words list's table, filled whole at the first call (from the ends, no
    recursion: a `**` absorbs nothing or one word and stays, O(1) a cell; before, each `**`
    cell tried every end, and `ssh -o a -o a …` took cubic time in the supervisor)."""
    if not memo:
        n, m = len(words), len(pattern)
        memo[(n, m)] = True
        for k in range(n):
            memo[(k, m)] = False
        for col in range(m - 1, -1, -1):
            element = pattern[col]
            if element == "**":
                memo[(n, col)] = memo[(n, col + 1)]
                for k in range(n - 1, -1, -1):
                    memo[(k, col)] = memo[(k, col + 1)] or memo[(k + 1, col)]
                continue
            memo[(n, col)] = False
            for k in range(n - 1, -1, -1):
                same = _word if program and k == 0 else _arg
                memo[(k, col)] = memo[(k + 1, col + 1)] and same(element, words[k])
    return memo[(i, j)]


# -- one command's checker -----------------------------------------------------------------


class Denial:
    """One refused ``exec``: the rule, the program, what it was run as."""

    __slots__ = ("argv", "program", "reason", "rule", "source")

    def __init__(self, rule: str, source: str, program: str, argv: list[str], reason: str) -> None:
        self.rule = rule
        self.source = source
        self.program = program
        self.argv = argv
        self.reason = reason

    def to_dict(self) -> dict[str, object]:
        argv = self.argv[:32] + ([f"… {len(self.argv) - 32} more"] if len(self.argv) > 32 else [])
        out: dict[str, object] = {
            "rule": self.rule,
            "program": self.program,
            "argv": [a[:512] for a in argv],
        }
        if self.source:
            out["source"] = self.source
        if self.reason:
            out["reason"] = self.reason
        return out


class Refused(Exception):
    """Fail the exec with ``errno``; ``denial`` when a rule (or the check itself) refused it."""

    def __init__(self, code: int, denial: Denial | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.denial = denial


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class _Mem:
    """Reads a process's memory (``/proc/<pid>/mem``), a page cache for argv strings: where
    ``process_vm_readv`` is denied to the supervisor (without change sets, the sandbox's
    first filter denies it to every process)."""

    def __init__(self, pid: int) -> None:
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        self.pages: dict[int, bytes] = {}
        self.budget = _MAX_ARGV_BYTES

    def close(self) -> None:
        os.close(self.fd)

    def page(self, base: int) -> bytes:
        data = self.pages.get(base)
        if data is None:
            data = os.pread(self.fd, _PAGE, base)
            if not data:
                raise OSError(errno.EFAULT, "unreadable")
            self.budget -= len(data)
            if self.budget < 0:
                raise Refused(errno.E2BIG)
            self.pages[base] = data
        return data

    def string(self, addr: int, limit: int) -> bytes:
        out = b""
        while True:
            base = addr & ~(_PAGE - 1)
            chunk = self.page(base)[addr - base :]
            end = chunk.find(b"\0")
            if end >= 0:
                return out + chunk[:end]
            out += chunk
            if len(out) > limit:
                raise Refused(errno.E2BIG)
            addr = base + len(self.page(base))

    def argv(self, addr: int) -> list[bytes]:
        if addr == 0:
            return []
        words: list[bytes] = []
        while True:
            block = os.pread(self.fd, 512, addr)
            if len(block) < 8:
                raise OSError(errno.EFAULT, "unreadable")
            for (ptr,) in struct.iter_unpack("<Q", block[: len(block) // 8 * 8]):
                if ptr == 0:
                    return words
                words.append(self.string(ptr, 128 << 10))
                if len(words) > _MAX_ARGC:
                    raise Refused(errno.E2BIG)
            addr += len(block) // 8 * 8

    @staticmethod
    def exec_args(pid: int, path_addr: int, argv_addr: int) -> tuple[bytes, list[bytes]]:
        """The path and argv an ``exec`` of ``pid`` passes. Raises OSError or Refused."""
        mem = _Mem(pid)
        try:
            return mem.string(path_addr, _PATH_LIMIT), mem.argv(argv_addr)
        finally:
            mem.close()


def _span(addr: int) -> tuple[int, int]:
    """``_CHUNK`` bytes at ``addr``, fewer at the end of its page: read whole or not at all."""
    return addr, min(_CHUNK, _PAGE - (addr & (_PAGE - 1)))


class _Remote:
    """Reads an ``exec``'s path and argv with ``process_vm_readv`` (the same memory
    ``/proc/<pid>/mem`` reads, without a file opened per exec). One call reads the pages
    that hold the path and argv's pointers, and the page before the path's: a program
    builds its argv strings near them (``make``: just before the path), so they are
    usually read too. The strings found elsewhere take one more call (a span each, none
    across a page), a longer string or argv one more per 256 bytes (per page of pointers).
    """

    def __init__(self, memory: ProcessMemory) -> None:
        self.memory = memory

    def exec_args(self, pid: int, path_addr: int, argv_addr: int) -> tuple[bytes, list[bytes]]:
        """The path and argv an ``exec`` of ``pid`` passes. Raises OSError (EFAULT: memory
        the kernel could not read either) or Refused (E2BIG, ENAMETOOLONG)."""
        read = self.memory.read
        pages = [path_addr & ~(_PAGE - 1)]  # the path's page first: unreadable, EFAULT
        if argv_addr and argv_addr & ~(_PAGE - 1) != pages[0]:
            pages.append(argv_addr & ~(_PAGE - 1))
        if pages[0] >= _PAGE and pages[0] - _PAGE not in pages:
            pages.append(pages[0] - _PAGE)  # last: where the read may stop
        data = read(pid, [(page, _PAGE) for page in pages])
        if len(data) == len(pages) * _PAGE:  # usually all there: parsed without copies
            found = _parse_pages(data, pages, path_addr, argv_addr)
            if found is not None:
                return found
        regions = [(page, data[k * _PAGE : (k + 1) * _PAGE]) for k, page in enumerate(pages)]
        pointers: list[int] = []
        if argv_addr:
            block = b""
            for start, chunk in regions:
                if start <= argv_addr < start + len(chunk):
                    block = chunk[argv_addr - start :]
            addr = argv_addr
            while True:
                whole = len(block) // 8
                if not whole:  # a pointer across a page's end, or none read: this one alone
                    block = read(pid, [(addr, 8)])
                    if len(block) < 8:
                        raise OSError(errno.EFAULT, "unreadable")
                    continue
                words = struct.unpack_from(f"<{whole}Q", block)
                if 0 in words:
                    pointers += words[: words.index(0)]
                    break
                pointers += words
                if len(pointers) > _MAX_ARGC:
                    raise Refused(errno.E2BIG)
                addr += whole * 8
                block = read(pid, [(addr, _PAGE - (addr & (_PAGE - 1)))])
        # The strings: index 0 the path, then argv's; each from the bytes read, or read.
        count = 1 + len(pointers)
        values: list[bytes | None] = [None] * count
        sofar = [b""] * count
        addrs = [path_addr, *pointers]
        pending = []
        for i, at in enumerate(addrs):
            for start, chunk in regions:
                if start <= at < start + len(chunk):
                    rest = chunk[at - start :]
                    end = rest.find(b"\0")
                    if end >= 0:
                        values[i] = rest[:end]
                    else:
                        sofar[i], addrs[i] = rest, at + len(rest)
                    break
            if values[i] is None:
                pending.append(i)
        budget = _MAX_ARGV_BYTES
        limit = ProcessMemory.SPANS
        while pending:
            batch = pending[:limit]
            spans = [_span(addrs[i]) for i in batch]
            data = read(pid, spans)
            budget -= len(data)
            if budget < 0:
                raise Refused(errno.E2BIG)
            left: list[int] = []
            offset = 0
            for k, i in enumerate(batch):
                size = spans[k][1]
                chunk = data[offset : offset + size]
                offset += size
                end = chunk.find(b"\0")
                if end >= 0:
                    values[i] = sofar[i] + chunk[:end]
                else:
                    sofar[i] += chunk
                    addrs[i] += len(chunk)
                    if len(sofar[i]) > (_PATH_LIMIT if i == 0 else _ARG_LIMIT):
                        raise Refused(errno.ENAMETOOLONG if i == 0 else errno.E2BIG)
                    left.append(i)
                if len(chunk) < size:  # the read stopped here: the rest of the batch again
                    left += batch[k + 1 :]
                    break
            pending = left + pending[limit:]
        return values[0], values[1:]  # type: ignore[return-value]


_WORD = struct.Struct("<Q")


def _parse_pages(
    data: bytes, pages: list[int], path_addr: int, argv_addr: int
) -> tuple[bytes, list[bytes]] | None:
    """The path and argv from ``data`` (the whole ``pages``, in that order, the path's
    first), or None when a string or argv's pointers run past the pages read. It runs
    cold after each exec of the command: few steps, no copies but the strings."""
    end = data.find(b"\0", path_addr & (_PAGE - 1), _PAGE)
    if end < 0:
        return None
    path = data[path_addr & (_PAGE - 1) : end]
    if not argv_addr:
        return path, []
    index = {page: k * _PAGE for k, page in enumerate(pages)}
    base = index.get(argv_addr & ~(_PAGE - 1))
    if base is None:
        return None
    at, stop = base + (argv_addr & (_PAGE - 1)), base + _PAGE
    words: list[bytes] = []
    unpack = _WORD.unpack_from
    while at + 8 <= stop:
        (pointer,) = unpack(data, at)
        if not pointer:
            return path, words
        base = index.get(pointer & ~(_PAGE - 1))
        if base is None:
            return None
        start = base + (pointer & (_PAGE - 1))
        end = data.find(b"\0", start, base + _PAGE)
        if end < 0:
            return None
        words.append(data[start:end])
        at += 8
    return None


_READER: object = None  # _Remote, or _Mem where process_vm_readv is denied (see _reader)


def _reader() -> object:
    """How this supervisor reads the processes' memory: ``process_vm_readv`` when its own
    seccomp filter allows it (under change sets), ``/proc/<pid>/mem`` otherwise."""
    global _READER
    if _READER is None:
        memory = ProcessMemory()
        try:
            memory.check()
        except OSError:
            _READER = _Mem
        else:
            _READER = _Remote(memory)
    return _READER


class _Identity:
    """Which rule names a file *is*: by inode, by content (size, then SHA-256), and for an
    ELF program by the image the kernel loads (:func:`_elf_layout`, then its SHA-256): bytes
    no segment maps (appended, a section table) never run, so they do not make another
    program."""

    def __init__(self) -> None:
        self.by_inode: dict[tuple[int, int], set[str]] = {}
        self.by_size: dict[int, list[tuple[str, str]]] = {}  # size -> [(name, path)]
        self.digests: dict[str, bytes | None] = {}  # path -> its SHA-256 (lazily)
        self.by_layout: dict[tuple[int, ...], list[tuple[str, str]]] = {}
        self.image_digests: dict[str, bytes | None] = {}  # path -> its image's SHA-256
        self.files: dict[tuple[int, int], str] = {}  # (device, inode) -> a path it was added by

    def add(self, name: str, path: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_mode & 0o170000) != 0o100000:
            return
        self.by_inode.setdefault((st.st_dev, st.st_ino), set()).add(name)
        self.files.setdefault((st.st_dev, st.st_ino), path)
        if st.st_size > 0:
            entries = self.by_size.setdefault(st.st_size, [])
            if (name, path) not in entries:
                entries.append((name, path))
        layout = _layout_path(path)
        if layout is not None:
            entries = self.by_layout.setdefault(layout, [])
            if (name, path) not in entries:
                entries.append((name, path))

    def names(self, fd: int, st: os.stat_result) -> set[str]:
        found = set(self.by_inode.get((st.st_dev, st.st_ino), ()))
        entries = self.by_size.get(st.st_size)
        if entries and st.st_size <= _HASH_LIMIT:
            digest = _sha256_fd(fd)
            for name, path in entries:
                if path not in self.digests:
                    self.digests[path] = _sha256_path(path)
                if self.digests[path] == digest:
                    found.add(name)
        if self.by_layout:
            layout = _elf_layout(fd)
            entries = self.by_layout.get(layout) if layout is not None else None
            if entries and any(name not in found for name, _ in entries):
                assert layout is not None
                image = _image_sha256(fd, layout)
                for name, path in entries:
                    if path not in self.image_digests:
                        self.image_digests[path] = _image_sha256_path(path, layout)
                    if image is not None and self.image_digests[path] == image:
                        found.add(name)
        return found


_PT_LOAD, _PT_INTERP = 1, 3
_EM_X86_64 = 62


def shebang(head: bytes) -> tuple[bytes, bytes | None]:
    """A ``#!`` file's interpreter and optional argument, read from its first bytes exactly
    as ``fs/binfmt_script.c`` does, so the supervisor checks what the kernel will run.

    The kernel reads 256 bytes (zero-filled past the file's end) and looks for a newline
    only before the first NUL (``strnchr``); without one the line is the first 255 bytes
    (the last becomes the string's end), and an interpreter name with no space, tab or NUL
    after it in them is taken as cut short (``ENOEXEC``). Trailing spaces and tabs are
    trimmed; the name ends at a space, tab or NUL; the argument is the rest, one word
    (inner spaces and tabs kept), ending at a NUL. Raises Refused(ENOEXEC) where the
    kernel refuses.
    """
    buf = head[:_BINPRM_BUF_SIZE].ljust(_BINPRM_BUF_SIZE, b"\0")
    last = _BINPRM_BUF_SIZE - 1  # the kernel's buf_end; its scans include it

    def blank(i: int) -> bool:
        return buf[i] in b" \t"

    def non_blank(first: int, end: int) -> int | None:
        return next((i for i in range(first, end + 1) if not blank(i)), None)

    def terminator(first: int, end: int) -> int | None:
        return next((i for i in range(first, end + 1) if blank(i) or not buf[i]), None)

    nul = buf.find(b"\0")
    newline = buf.find(b"\n", 0, nul if nul >= 0 else len(buf))
    if newline < 0:
        start = non_blank(2, last)
        if start is None or terminator(start, last) is None:
            raise Refused(errno.ENOEXEC)
        end = last
    else:
        end = newline
    while blank(end - 1):
        end -= 1
    name = non_blank(2, end)
    if name is None or name == end:
        raise Refused(errno.ENOEXEC)
    sep = terminator(name, end)
    arg = non_blank(sep, end) if sep is not None and buf[sep] else None
    line = bytearray(buf)
    line[end] = 0
    if arg is not None:
        assert sep is not None
        line[sep] = 0

    def string(i: int) -> bytes:
        return bytes(line[i : line.index(0, i)])

    return string(name), (string(arg) if arg is not None else None)


_SHELLS = frozenset({"sh", "dash", "bash", "ash", "ksh", "mksh", "zsh", "posh", "yash", "busybox"})


def _wanted_interpreter(interpreter: bytes, optional: bytes | None) -> str:
    """The program a ``#!`` line starts, by name: its interpreter's last component, or for
    ``#!/usr/bin/env [options] NAME`` that NAME."""
    wanted = _decode(interpreter).rsplit("/", 1)[-1]
    if wanted == "env" and optional is not None:
        words = [w for w in _decode(optional).split() if not w.startswith("-")]
        wanted = words[0].rsplit("/", 1)[-1] if words else wanted
    return wanted


def _same_interpreter(wanted: str, name: str) -> bool:
    """Whether a program named ``name`` is the interpreter a ``#!`` line names ``wanted``:
    the same name, one a versioned other (``python3``, ``python3.11``), or both shells."""
    if not wanted or not name:
        return False
    if name.startswith(wanted) or wanted.startswith(name):
        return True
    return wanted in _SHELLS and name in _SHELLS


def _elf_layout(fd: int) -> tuple[int, ...] | None:
    """How the kernel loads an x86-64 ELF file: its type, entry point and program headers
    (type, flags, offset, address, sizes), flattened; None for anything else."""
    head = os.pread(fd, 64, 0)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    e_type, machine = struct.unpack_from("<HH", head, 16)
    (entry, phoff) = struct.unpack_from("<QQ", head, 24)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    if phentsize != 56 or not 0 < phnum <= 256:
        return None
    table = os.pread(fd, 56 * phnum, phoff)
    if len(table) < 56 * phnum:
        return None
    layout = [e_type, machine, entry, phoff]
    for i in range(phnum):
        kind, flags, offset, vaddr, _paddr, filesz, memsz = struct.unpack_from(
            "<IIQQQQQ", table, 56 * i
        )
        layout += [kind, flags, offset, vaddr, filesz, memsz]
    return tuple(layout)


def _image_sha256(fd: int, layout: tuple[int, ...]) -> bytes | None:
    """SHA-256 of the bytes the kernel maps or reads (``PT_LOAD`` and ``PT_INTERP``
    ranges, in the table's order; the ELF header's section-table fields, which only
    ``strip`` and debuggers read, as zeros); None past the size compared."""
    import hashlib

    h = hashlib.sha256()
    total = 0
    for i in range(4, len(layout), 6):
        kind, _flags, offset, _vaddr, filesz, _memsz = layout[i : i + 6]
        if kind not in (_PT_LOAD, _PT_INTERP):
            continue
        total += filesz
        if total > _HASH_LIMIT:
            return None
        h.update(struct.pack("<QQ", offset, filesz))
        done = 0
        while done < filesz:
            at = offset + done
            data = os.pread(fd, min(1 << 20, filesz - done), at)
            if not data:
                return None  # a segment past the file's end: the kernel refuses it
            if at < 64:  # the ELF header: its section-table fields are no one's at run time
                head = bytearray(data[: 64 - at])
                for lo, hi in ((40, 48), (58, 64)):  # e_shoff; e_shentsize, e_shnum, e_shstrndx
                    head[max(lo - at, 0) : max(hi - at, 0)] = bytes(
                        max(hi - at, 0) - max(lo - at, 0)
                    )
                data = bytes(head) + data[64 - at :]
            h.update(data)
            done += len(data)
    return h.digest()


def _layout_path(path: str) -> tuple[int, ...] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return _elf_layout(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _image_sha256_path(path: str, layout: tuple[int, ...]) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return _image_sha256(fd, layout) if _elf_layout(fd) == layout else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _sha256_fd(fd: int) -> bytes:
    import hashlib

    h = hashlib.sha256()
    offset = 0
    while True:
        data = os.pread(fd, 1 << 20, offset)
        if not data:
            return h.digest()
        h.update(data)
        offset += len(data)


def _sha256_path(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return _sha256_fd(fd)
    finally:
        os.close(fd)


_APPLETS: dict[tuple[int, int, int, int], list[str] | None] = {}


def _applets(path: str) -> list[str] | bool | None:
    """A multi-call binary's applet names (busybox's NUL-separated table), None when the
    table cannot be found, False when there is no such file. Cached by file identity."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _APPLETS:
        return _APPLETS[key]
    try:
        with open(path, "rb") as f:
            data = f.read(_HASH_LIMIT)
    except OSError:
        return False
    start = data.find(b"\0[\0[[\0")  # sorted: "[", "[[", then the rest
    applets: list[str] | None = None
    if start >= 0:
        applets = []
        for raw in data[start + 1 : start + 65536].split(b"\0"):
            if not raw:
                break
            applets.append(raw.decode("ascii", "replace"))
    _APPLETS[key] = applets
    return applets


def _elf_interpreter(path: str) -> str | None:
    """The ``PT_INTERP`` of an ELF file (the dynamic loader it names), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            (phoff,) = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                (kind,) = struct.unpack_from("<I", table, i * phentsize)
                if kind == 3:  # PT_INTERP
                    (offset,) = struct.unpack_from("<Q", table, i * phentsize + 8)
                    (size,) = struct.unpack_from("<Q", table, i * phentsize + 32)
                    f.seek(offset)
                    return f.read(min(size, 4096)).split(b"\0", 1)[0].decode()
    except (OSError, struct.error, UnicodeDecodeError, IndexError):
        return None
    return None


_WALK_BUDGET = 2_000_000  # directory entries looked at for the hard links of denied files
_LINKS: dict[tuple[int, int, int], frozenset[str]] = {}  # (dev, ino, nlink) -> its names


def _hard_links(
    inodes: dict[tuple[int, int], int], known: set[str], writable: list[str]
) -> set[str]:
    """Every other name (hard link) of the files ``inodes`` (``(dev, ino) -> st_nlink``)
    that the sandbox can reach outside ``writable``: first in the directories of the names
    ``known``, then, for a file with more links than found there, by a walk of its file
    system (``/`` down, that device only, no ``/proc``, ``/sys``, ``/dev``; cached per
    inode). A link in a directory the walk cannot list (or past its budget) is not found."""
    found: dict[tuple[int, int], set[str]] = {key: set() for key in inodes}
    for directory in {os.path.dirname(path) for path in known}:
        try:
            entries = os.scandir(directory)
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in found:
                    found[(st.st_dev, st.st_ino)].add(entry.path)
    missing = {key for key, nlink in inodes.items() if len(found[key]) < nlink}
    for key in list(missing):
        cached = _LINKS.get((*key, inodes[key]))
        if cached is not None:
            found[key] |= cached
            missing.discard(key)
    if missing:
        skip = {"/proc", "/sys", "/dev", *(w.rstrip("/") or "/" for w in writable)}
        devices = {dev for dev, _ in missing}
        numbers = {ino for _, ino in missing}
        stack, budget = ["/"], _WALK_BUDGET
        while stack and budget > 0 and missing:
            directory = stack.pop()
            try:
                entries = os.scandir(directory)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    budget -= 1
                    try:  # (the directory's own type and inode: stat only what may count)
                        if entry.is_dir(follow_symlinks=False):
                            if (
                                entry.path not in skip
                                and entry.stat(follow_symlinks=False).st_dev in devices
                            ):
                                stack.append(entry.path)  # the same file system only
                            continue
                        if entry.inode() not in numbers:
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    key = (st.st_dev, st.st_ino)
                    if key in missing:
                        found[key].add(entry.path)
                        if len(found[key]) >= inodes[key]:
                            missing.discard(key)
        for key in inodes:
            if key not in missing:
                _LINKS[(*key, inodes[key])] = frozenset(found[key])
    return {
        path
        for names in found.values()
        for path in names
        if not any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable)
    }


class Checker:
    """One command's exec checks under one set of rules (and its ``PATH``)."""

    def __init__(self, rules: ExecRules, path_var: str) -> None:
        self.exec_rules = rules
        self.identity = _Identity()
        self.loaders = _Identity()
        self.denials: list[Denial] = []
        self.denied = 0
        self.trusted: int | None = None  # the command's own child: its first exec was checked
        self.checked = 0  # notifications answered for the current command
        self._execute_built = False
        self._execute_fd: int | None = None
        self.execute_denied: list[str] = []  # the files the Landlock backstop refuses
        self._pid: int | None = None  # the process whose exec is being checked
        self._read = _reader().exec_args  # type: ignore[attr-defined]
        self.writable: list[str] = ["/proc", "/tmp", "/var/tmp", "/dev"]  # see set_writable
        self._real_dirs: set[bytes] = set()  # read-only directories that are no links
        # read-only plain programs: real path, rule names, interpreter names it is
        self._plain: dict[bytes, tuple[str, list[str], list[str]]] = {}
        self._cacheable = False  # the last _resolve saw only read-only places
        self._links: dict[bytes, bytes] = {}  # read-only links and their targets
        self._allowed: set[tuple[bytes, ...]] = set()  # (path, *argv) of execve let go
        self._consulted = False  # the last check opened a file an argument names
        try:
            self._proc_dev = os.stat("/proc").st_dev
        except OSError:
            self._proc_dev = -1
        dirs = [d for d in (path_var + ":" + _STANDARD_PATH).split(":") if d.startswith("/")]
        dirs = list(dict.fromkeys(dirs))
        self._dirs = dirs
        for name in rules.names:
            for d in dirs:
                self.identity.add(name, f"{d}/{name}")
        for path in rules.paths:
            if path.startswith("/"):
                self.identity.add(path, path)
        # A relative path (`scripts/deploy.sh`) names a workspace file below each root,
        # looked up at every exec (:meth:`_relative_files`), since commands write the roots.
        self.relative_paths = sorted(p for p in rules.paths if not p.startswith("/"))
        self.roots: list[str] = []
        self._relative_seen: dict[str, tuple[int, ...] | None] = {}
        self._watch: list[tuple[str, str]] = []  # (rule name or path, file): see refresh
        # Rules that may name a file by its path below a root (a relative path, a glob with
        # a `/` such as `scripts/*.sh`): a program below a root goes by that path too.
        self.root_relative = bool(self.relative_paths) or any(g.slash for g in rules.globs)
        if rules.globs:
            for d in dirs:
                try:
                    entries = os.listdir(d)
                except OSError:
                    continue
                for entry in entries:
                    path = f"{d}/{entry}"
                    for glob in rules.globs:  # with a `/` it names a path (`/usr/bin/tou*`)
                        name = path if glob.slash else entry
                        if glob.fullmatch(name):
                            self.identity.add(name, path)
        self._interpreters: set[str] | None = None  # of the #! scripts rules name (lazily)
        self.interpreter_files = _Identity()  # those interpreters' files, known by identity
        # Multi-call binaries with an applet a rule names: refused by identity (see above).
        self.loader_paths: set[bytes] = set()  # PT_INTERP strings naming the loader itself
        self.multicall = _Identity()
        self.multicall_rule: tuple[str, str, str] | None = None
        for name in _MULTICALL:
            for d in dirs:
                hit = self._applet_rule(f"{d}/{name}")
                if hit is not None:
                    self.multicall.add(name, f"{d}/{name}")
                    self.multicall_rule = hit
        # Rules over a git command (``git push*``): git runs an alias in-process, so
        # ``git p`` may be ``git push`` with no exec to check (see :meth:`_git_alias`).
        self.git_rule: _Rule | None = next(
            (
                rule
                for rule in rules.deny
                for p in rule.patterns
                if len(p) > 1 and p[1] != "**" and (p[0] == "**" or _word(p[0], "git"))
            ),
            None,
        )
        self.git_dirs: list[str] = []  # where git's own commands are (only with such a rule)
        if self.git_rule is not None:
            self.git_dirs = [d for d in _GIT_EXEC_PATHS if os.path.isdir(d)][:1] + dirs
        # valgrind's tools (and its launcher): programs that run another program themselves.
        self.emulators = _Identity()
        for where in _VALGRIND_DIRS:
            try:
                entries = sorted(os.listdir(where))
            except OSError:
                continue
            for entry in entries:
                if entry.endswith("-linux"):
                    self.emulators.add("valgrind", f"{where}/{entry}")
        for d in dirs:
            self.emulators.add("valgrind", f"{d}/valgrind.bin")
        # The dynamic loaders programs name (x86-64: other ABIs die at their first call).
        for program in ("/bin/sh", "/usr/bin/env", os.path.realpath("/proc/self/exe")):
            loader = _elf_interpreter(program)
            if loader:
                self.loaders.add(loader, loader)
                if not any(loader.startswith(w + "/") for w in ("/tmp", "/var/tmp", "/dev")):
                    self.loader_paths.add(os.fsencode(loader))

    def _applet_rule(self, path: str) -> tuple[str, str, str] | None:
        """(rule label, source, applet) when the multi-call binary at ``path`` has an applet
        a deny rule names (every applet counts when its table cannot be read)."""
        found = _applets(path)
        if found is False:
            return None
        applets = found if isinstance(found, list) else None
        for rule in self.exec_rules.deny:
            for pattern in rule.patterns:
                first = pattern[0]
                if first == "**":
                    return rule.label, rule.source, "any"
                for applet in applets if applets is not None else ["any"]:
                    if applets is None or _word(first, applet):
                        return rule.label, rule.source, applet
        return None

    def execute_ruleset(self, writable: list[str]) -> int | None:
        """The Landlock backstop for program-wide rules (see the module docstring): a ruleset
        descriptor, built once per rules; None when no such rule names a read-only file.
        Raises OSError or the Landlock layer's error."""
        if self._execute_built:
            return self._execute_fd
        self._execute_built = True
        denied: set[str] = set()
        for path in self._program_wide():
            real = os.path.realpath(path)
            if any(real == w or real.startswith(w.rstrip("/") + "/") for w in writable):
                continue  # a place commands write: a new copy there is a new inode anyway
            if os.path.isfile(real):
                denied.add(real)
        if not denied:
            return None
        # A Landlock rule belongs to an inode, and a granted directory above *any* name of a
        # file lets it run: every hard link of a denied file (perl and perl5.36.0, bzip2 and
        # bzcat) is denied with it, and the way to each is walked as the way to the file.
        inodes: dict[tuple[int, int], int] = {}
        for real in denied:
            st = os.stat(real)
            inodes[(st.st_dev, st.st_ino)] = st.st_nlink
        denied |= _hard_links(inodes, denied, writable)
        way = {"/"}
        for real in denied:
            parent = os.path.dirname(real)
            while parent not in way:
                way.add(parent)
                parent = os.path.dirname(parent)
        grants = []
        for directory in sorted(way):
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.path in way or entry.path in denied or entry.is_symlink():
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in inodes:
                        continue  # a name of a denied file not found before (a new link)
                    grants.append(entry.path)
        self._execute_fd = landlock.ruleset_beneath(
            landlock.FS_EXECUTE,
            0,
            0,
            [(path, landlock.FS_EXECUTE, landlock.FS_EXECUTE) for path in grants],
            open_flags=os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
            what="landlock_create_ruleset(execute)",
        )
        self.execute_denied = sorted(denied)
        return self._execute_fd

    def _program_wide(self) -> list[str]:
        """Paths of the files rules deny whatever their arguments (first word, then ``**``)."""
        paths: list[str] = []
        for rule in self.exec_rules.deny:
            for pattern in rule.patterns:
                if len(pattern) != 2 or pattern[1] != "**":
                    continue
                first = pattern[0]
                for entries in self.identity.by_size.values():  # every file a rule names
                    paths += [path for name, path in entries if _word(first, name)]
        if self.multicall_rule is not None:
            for entries in self.multicall.by_size.values():
                paths += [path for _name, path in entries]
        return paths

    # -- the supervisor's side of the listener ---------------------------------------------

    def answer(self, listener: int) -> None:
        """Receive one notification, check it, answer it. Never raises for the command's doing."""
        try:
            nid, pid, nr, args = seccomp.receive(listener)
        except OSError:  # the task was interrupted or died meanwhile: nothing to answer
            return
        code = 0
        denial = None
        self.checked += 1
        try:
            if pid == self.trusted:
                # The supervisor's own child execs the command it checked before the fork
                # (single-threaded, the supervisor's code until this exec): its first one.
                self.trusted = None
            else:
                self.check_request(pid, nr, args)
        except Refused as refused:
            code, denial = refused.code, refused.denial
        except OSError as exc:  # the process's memory or files could not be read
            code = errno.EFAULT if exc.errno in (errno.EFAULT, errno.EIO) else errno.EACCES
            if code == errno.EACCES:
                denial = Denial("exec check", "", "?", [], f"could not be checked: {exc}")
        except Exception as exc:  # a fault of the check itself: fail closed, keep serving
            code = errno.EACCES
            denial = Denial("exec check", "", "?", [], f"the check failed: {exc!r}")
        # A refusal is recorded only for a live notification: the task may have been killed
        # (or interrupted, to notify again) and its pid reused while we read. An exec let go
        # needs no such check: the kernel answers a dead notification's SEND with ENOENT,
        # and a live one's task still held its pid while we read (it waits for this answer).
        if code and not seccomp.still_valid(listener, nid):
            return
        if denial is not None:
            self.record(denial)
        try:  # noqa: SIM105
            seccomp.answer(listener, nid, code)
        except OSError:
            pass

    def set_writable(self, writable: list[str]) -> None:
        """The places commands write (roots, /tmp, …): links and directories there are
        looked at again at every exec; everything else is read-only, looked at once.

        Besides the places given, every place the mount table says can change
        (:func:`writable_mounts`): the overlays' upper directories are bound read-write
        in the sandbox (where the supervisor mounts each command's overlay), and the
        command's uid may reach them when it is the supervisor's; a copy of ``true``
        written to the workspace and run there by that path was remembered as a
        read-only program, and the copy of ``touch`` written over it was let go."""
        self.writable = [*writable, "/proc", *writable_mounts(writable)]
        self._real_dirs.clear()
        self._links.clear()
        self._plain.clear()
        self._allowed.clear()

    def refresh(self, roots: list[str]) -> None:
        """The workspace roots a rule's relative path (`scripts/deploy.sh`) is below, and
        so the files watched at every exec (:meth:`_relative_files`): those relative paths
        below each root, and a rule's name in each directory of ``PATH`` commands write
        (`$PWD/node_modules/.bin`, `/tmp/bin`: what it is there may come or change)."""
        if roots != self.roots:
            self.roots = list(roots)
            self._relative_seen.clear()
            self._watch = [
                (path, os.path.normpath(os.path.join(root, path)))
                for path in self.relative_paths
                for root in self.roots
            ]
            self._watch += [
                (name, f"{d}/{name}")
                for d in self._dirs
                if not self._read_only(os.fsencode(d))
                for name in sorted(self.exec_rules.names)
            ]

    def _relative_files(self) -> None:
        """Before each check: the files a rule's relative path names below each root, known
        by inode and content from then on. Looked up at every exec (one ``stat`` each): the
        roots are writable (a command may write the script and run it), and under change
        sets each command has an overlay of its own. When one is new or changed, what was
        let go by the argv alone is forgotten, and the interpreters looked at again."""
        changed = False
        for path, where in self._watch:
            try:
                st = os.stat(where)
                seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            except OSError:
                seen = None
            if self._relative_seen.get(where, ()) == seen:
                continue
            self._relative_seen[where] = seen
            self.identity.digests.pop(where, None)
            self.identity.image_digests.pop(where, None)
            self.identity.add(path, where)
            changed = True
        if changed:
            self._interpreters = None  # such a file may be a #! script
            self._allowed.clear()
            self._plain.clear()

    def close(self) -> None:
        """Release the Landlock backstop's ruleset (the rules changed)."""
        if self._execute_fd is not None:
            os.close(self._execute_fd)
            self._execute_fd = None

    def start(self, pid: int) -> None:
        """A new command whose main process is ``pid``: no denial yet; its first exec trusted."""
        self.denials = []
        self.denied = 0
        self.checked = 0
        self.trusted = pid

    def report(self) -> bytes:
        """For the kernel (JSON): how many execs were checked, how many refused and which."""
        data: dict[str, object] = {"checked": self.checked, "denied": self.denied}
        if self.denied:
            data["denials"] = [d.to_dict() for d in self.denials]
        import json

        return json.dumps(data).encode("utf-8", "surrogateescape")

    def record(self, denial: Denial) -> None:
        self.denied += 1
        if len(self.denials) < 50:
            self.denials.append(denial)

    def check_request(self, pid: int, nr: int, args: tuple[int, ...]) -> None:
        if nr == _NR_EXECVEAT:
            dirfd = ((args[0] & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000  # a C int: 32 bits
            path_addr, argv_addr, flags = args[1], args[2], args[4]
        else:
            dirfd, path_addr, argv_addr, flags = _AT_FDCWD, args[0], args[1], 0
        path, words = self._read(pid, path_addr, argv_addr)
        if self._watch:
            self._relative_files()
        key = None
        if nr == _NR_EXECVE and path[:1] == b"/":
            key = (path, *words)
            if key in self._allowed:  # this very path and argv, let go before
                return
        argv = [_decode(w) for w in words]
        if nr == _NR_EXECVEAT and flags & _AT_EMPTY_PATH and not path:
            base, name, shown = f"/proc/{pid}/fd/{dirfd}", b"", f"/dev/fd/{dirfd}"
        elif path.startswith(b"/"):
            base, name, shown = None, path, _decode(path)
        elif dirfd == _AT_FDCWD:
            base, name, shown = f"/proc/{pid}/cwd", path, _decode(path)
        else:
            base, name, shown = f"/proc/{pid}/fd/{dirfd}", path, f"/dev/fd/{dirfd}/{_decode(path)}"
        self._pid = pid
        self._consulted = False
        try:
            self.check(base, name, shown, argv, f"/proc/{pid}/cwd")
        finally:
            self._pid = None
        if self._consulted:
            return  # decided by a file an argument names: looked at again next time
        # Let go, and decided by what cannot change: a plain program on a read-only path
        # (its real path and identity remembered) and the argv. Small ones are remembered.
        if key is not None and path in self._plain and sum(map(len, words)) < 4096:
            if len(self._allowed) >= 4096:
                self._allowed.clear()
            self._allowed.add(key)

    # -- what one exec runs ------------------------------------------------------------------

    def check(
        self, base: str | None, path: bytes, shown: str, argv: list[str], cwd: str | None
    ) -> None:
        """Check the program at ``path`` (relative to the directory ``base``; ``path`` empty:
        ``base`` itself) run with ``argv``; raise Refused to fail the exec.

        ``cwd`` is the directory an interpreter's relative path is resolved in (None: the
        supervisor's own). ``shown`` is how the kernel names the file to an interpreter.
        """
        if self._watch:
            self._relative_files()
        self._check(base, path, shown, argv, cwd, 0)

    def _open(self, base: str | None, path: bytes) -> int:
        """Open the file the process would reach (see :meth:`_resolve`). Raises OSError."""
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        if not path:  # execveat(fd, "", AT_EMPTY_PATH): the descriptor itself
            assert base is not None
            return os.open(base, flags)
        return os.open(self._resolve(os.fsencode(base) if base else None, path), flags)

    def _resolve(self, base: bytes | None, path: bytes, missing: bool = True) -> bytes:
        """``path`` (relative to the directory ``base`` when not absolute; None: the
        supervisor's own working directory) spelled so that the supervisor's ``open``
        reaches the file the process's ``execve`` would.

        The supervisor is another process: ``/proc/self`` and ``/proc/thread-self`` (and
        ``/dev/fd/3``, ``/dev/stdin`` and any link to them) would name *its* descriptors,
        executable and directories. So links are followed here, component by component,
        and procfs's ``self``/``thread-self`` become the process's own ``/proc/<pid>``;
        the magic links below a ``/proc/<pid>`` (``fd/N``, ``exe``, ``cwd``, ``root``) are
        kept as they are, since the kernel follows them for the pid they name, whoever
        opens them. Before the process exists (the command's own program), a path through
        ``self`` is refused. Raises Refused (ELOOP past 40 links) or OSError (with
        ``missing`` False, a missing component too: FileNotFoundError).
        """
        pid = self._pid
        if path.startswith(b"/"):
            cur, opaque = b"", False
        elif base is None:
            cur, opaque = os.getcwdb().rstrip(b"/"), False
        else:  # /proc/<pid>/cwd or /proc/<pid>/fd/<n>: a magic link, followed by the kernel
            cur, opaque = base, True
        todo = path.split(b"/")[::-1]
        links = 0
        while todo:
            part = todo.pop()
            if part in (b"", b"."):
                continue
            if part == b"..":
                cur = cur + b"/.." if opaque else cur.rsplit(b"/", 1)[0]
                continue
            candidate = cur + b"/" + part
            if candidate in self._real_dirs:
                cur = candidate
                continue
            if opaque or not self._read_only(candidate):
                self._cacheable = False
            target = self._links.get(candidate)
            if target is None:
                try:
                    st = os.lstat(candidate)
                except OSError:  # missing: the open says what the kernel would
                    if not missing:
                        raise
                    return b"/".join([candidate, *todo[::-1]])
                if (st.st_mode & 0o170000) != 0o120000:
                    cur = candidate
                    if todo and not opaque and self._read_only(candidate):
                        self._real_dirs.add(candidate)
                    continue
                if st.st_dev == self._proc_dev:
                    if part in (b"self", b"thread-self") and self._is_proc_root(cur):
                        if pid is None:
                            raise Refused(errno.EACCES, Denial("exec check", "", _decode(path),
                                [], "a path through /proc/self before the process exists"))  # fmt: skip
                        # The kernel's ``self`` is the thread group (the process), not
                        # the thread: a thread cloned without CLONE_FILES or CLONE_FS has
                        # descriptors and a directory of its own, and its ``/proc/self/fd/5``
                        # is the group leader's fd 5. ``thread-self`` is the thread.
                        cur = b"/proc/%d" % _thread_group(pid)
                        if part == b"thread-self":
                            cur += b"/task/%d" % pid
                        opaque = False
                    else:  # a magic link of a /proc/<pid>: the kernel follows it for <pid>
                        cur, opaque = candidate, True
                    continue
                target = os.readlink(candidate)
                if not opaque and self._read_only(candidate):
                    self._links[candidate] = target
            links += 1
            if links > 40:
                raise Refused(errno.ELOOP)
            if target.startswith(b"/"):
                cur, opaque = b"", False
            todo.extend(target.split(b"/")[::-1])
        return cur or b"/"

    def _read_only(self, path: bytes) -> bool:
        """Whether ``path`` lies outside every place commands can write (and outside
        /proc): what it is cannot change during the session, so it is remembered."""
        text = os.fsdecode(path)
        return not any(text == w or text.startswith(w.rstrip("/") + "/") for w in self.writable)

    def _is_proc_root(self, path: bytes) -> bool:
        try:
            st = os.lstat(path or b"/")
        except OSError:
            return False
        return st.st_dev == self._proc_dev and st.st_ino == 1

    def _check(
        self,
        base: str | None,
        path: bytes,
        shown: str,
        argv: list[str],
        cwd: str | None,
        depth: int,
    ) -> None:
        if depth > _MAX_DEPTH:
            raise Refused(errno.ELOOP)
        known = self._plain.get(path) if path.startswith(b"/") else None
        if known is not None:  # a plain program on a read-only path, looked at before
            real, identity, interpreting = known
            self._match(shown, real, argv, identity)
        else:
            real, interpreting = self._examine(base, path, shown, argv, cwd, depth)
        self._script_argument([shown, real, *argv[:1], *interpreting], argv, cwd)
        if argv and argv[0].rsplit("/", 1)[-1].startswith("busybox") and len(argv) > 1:
            names = [argv[1]]
            rule = self.exec_rules.match(names, argv[2:])
            if rule is not None:
                raise Refused(
                    errno.EACCES, Denial(rule.label, rule.source, argv[1], argv[1:], "via busybox")
                )

    def _denied_interpreters(self) -> set[str]:
        """The interpreters (by name, :func:`_wanted_interpreter`) of the ``#!`` scripts the
        rules name on ``PATH``: a program by such a name may be handed one of those scripts
        under any name (its real path behind a link, ``/dev/stdin``, a link of its own)."""
        if self._interpreters is None:
            found: set[str] = set()
            for path in self.identity.files.values():
                try:
                    with open(path, "rb") as f:
                        head = f.read(_BINPRM_BUF_SIZE)
                except OSError:
                    continue
                if head[:2] != b"#!":
                    continue
                try:
                    interpreter, optional = shebang(head)
                except Refused:
                    continue
                wanted = _wanted_interpreter(interpreter, optional)
                found.add(wanted)
                # The interpreter's file, known by inode and content like a rule's (a copy
                # of dash at /tmp/x is sh): a shell stands for every shell on PATH.
                names = sorted(_SHELLS) if wanted in _SHELLS else [wanted]
                if (
                    interpreter.startswith(b"/")
                    and wanted == _decode(interpreter).rsplit("/", 1)[-1]
                ):
                    self.interpreter_files.add(wanted, _decode(interpreter))
                for name in names:
                    for d in self._dirs:
                        self.interpreter_files.add(name, f"{d}/{name}")
            self._interpreters = found
        return self._interpreters

    def _script_argument(self, program: list[str], argv: list[str], cwd: str | None) -> None:
        """A denied ``#!`` script handed to its own interpreter (``sh /usr/bin/gunzip f.gz``,
        ``node /usr/bin/npm publish``) runs as if it were exec'd: the kernel would start the
        same interpreter on the same file. So a word of argv (any: options may come first,
        as many as the interpreter takes) that names a file a rule names,
        whose ``#!`` interpreter is the program being run (its name, or both shells), is
        matched as that program with the words after it. Such a file is found by the word's
        name (then known by inode and content: a copy under a rule's name) and, when the
        program is the interpreter of a script a rule names, by the inode or bytes of
        whatever the word (or an ``--option=value`` word's value) names in the process's
        view: the script's real path behind the link a rule names (``node
        /usr/lib/node_modules/npm/bin/npm-cli.js``), another link to it, ``/dev/stdin``, a
        copy under any name. The same for the script given as the interpreter's standard
        input (``sh -s f.gz < /usr/bin/gunzip``), matched with any tail of the arguments
        (it may over-match)."""
        ours = {n.rsplit("/", 1)[-1] for n in program if n}
        interpreter = any(
            _same_interpreter(wanted, name)
            for wanted in self._denied_interpreters()
            for name in ours
        )
        seen: set[str] = set()
        # Every word: an interpreter takes any number of options before its script (17
        # `-e` made `sh` run gunzip when only the first 16 words were looked at).
        for i, word in enumerate(argv[1:], 1):
            if word in seen:
                continue
            seen.add(word)
            base = word.rsplit("/", 1)[-1]
            named = bool(base) and (
                base in self.exec_rules.names
                or word in self.exec_rules.paths
                or any(g.fullmatch(word if g.slash else base) for g in self.exec_rules.globs)
            )
            if not word or not (named or interpreter):
                continue
            self._consulted = True  # a file's decision: not remembered with the argv
            raw = os.fsencode(word)
            where = None if raw.startswith(b"/") else cwd
            names = self._denied_script(where, raw, ours, named, [word, base])
            if names is None and interpreter and word.startswith("-") and "=" in word:
                # An option's value (`node --require=/usr/bin/npm`): the file it names.
                value = os.fsencode(word.split("=", 1)[1])
                where = None if value.startswith(b"/") else cwd
                names = self._denied_script(where, value, ours, False, [_decode(value)])
            if names is None:
                continue
            rule = self.exec_rules.match(names, argv[i + 1 :])
            if rule is not None:
                raise Refused(
                    errno.EACCES,
                    Denial(
                        rule.label,
                        rule.source,
                        word,
                        argv[i:],
                        f"a script run by its interpreter {argv[0] if argv else '?'}",
                    ),
                )
        if interpreter and self._pid is not None:
            self._consulted = True
            stdin = f"/proc/{self._pid}/fd/0"
            names = self._denied_script(None, os.fsencode(stdin), ours, False, [])
            if names is None:
                return
            try:
                shown = _decode(os.readlink(os.fsencode(stdin)))
            except OSError:
                shown = names[0]
            for k in range(1, len(argv) + 1):
                rule = self.exec_rules.match(names, argv[k:])
                if rule is not None:
                    raise Refused(
                        errno.EACCES,
                        Denial(
                            rule.label,
                            rule.source,
                            shown,
                            argv,
                            f"a script given as the standard input of its interpreter "
                            f"{argv[0] if argv else '?'}",
                        ),
                    )

    def _denied_script(
        self, base: str | None, path: bytes, ours: set[str], named: bool, spelled: list[str]
    ) -> list[str] | None:
        """The rule names the file at ``path`` goes by when it is a ``#!`` script whose
        interpreter is one of ``ours``; None otherwise. A file not ``named`` by the word that
        gave it counts only when it is a rule's file itself (by inode) or a copy of one (the
        same size, then the same bytes). Nothing but a regular file is opened."""
        try:
            resolved = self._resolve(os.fsencode(base) if base else None, path, missing=False)
            st = os.stat(resolved)
        except (OSError, Refused):
            return None
        if (st.st_mode & 0o170000) != 0o100000:
            return None
        if (
            not named
            and (st.st_dev, st.st_ino) not in self.identity.by_inode
            and st.st_size not in self.identity.by_size
        ):
            return None
        try:
            fd = os.open(resolved, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (st.st_mode & 0o170000) != 0o100000:
                return None
            head = os.pread(fd, _BINPRM_BUF_SIZE, 0)
            if head[:2] != b"#!":
                return None
            try:
                wanted = _wanted_interpreter(*shebang(head))
            except Refused:
                return None
            if not any(_same_interpreter(wanted, name) for name in ours):
                return None
            return sorted({*spelled, *self.identity.names(fd, st)})
        finally:
            os.close(fd)

    def _below_roots(self, real: str) -> list[str]:
        """``real``'s path below each root that holds it, as written and as ``./path``."""
        names = []
        for root in self.roots:
            prefix = root.rstrip("/") + "/"
            if real.startswith(prefix) and len(real) > len(prefix):
                rel = real[len(prefix) :]
                names += [rel, "./" + rel]
        return names

    def _match(self, shown: str, real: str, argv: list[str], identity: list[str]) -> None:
        names = [shown, real, *argv[:1], *identity]
        if self.root_relative:
            names += self._below_roots(real)
        rule = self.exec_rules.match(names, argv[1:])
        if rule is not None:
            raise Refused(
                errno.EACCES, Denial(rule.label, rule.source, real, [shown, *argv[1:]], "")
            )
        git = [n for n in (shown, real, *identity) if n.rsplit("/", 1)[-1] == "git"]
        dashed = argv[0].rsplit("/", 1)[-1] if argv else ""
        if git and dashed.startswith("git-") and len(dashed) > 4:
            # git run as ``git-<command>`` (its exec path's links, a link so named, ``exec
            # -a``): git takes the command from argv[0] and runs that builtin with argv[1:],
            # never an alias (git.c, cmd_main), so it is matched as ``git <command> …``.
            rule = self.exec_rules.match(git, [dashed[4:], *argv[1:]])
            if rule is not None:
                raise Refused(
                    errno.EACCES,
                    Denial(
                        rule.label,
                        rule.source,
                        real,
                        [shown, *argv[1:]],
                        f"git run as {dashed}: `git {dashed[4:]}`",
                    ),
                )
            return
        if self.git_rule is not None and any(n.rsplit("/", 1)[-1] == "git" for n in names):
            self._git_alias(real, shown, argv)

    def _git_alias(self, real: str, shown: str, argv: list[str]) -> None:
        """Refuse a git command that is none of git's own: git expands an alias (from any
        configuration: ``-c``, files, ``GIT_CONFIG_*``; or ``help.autocorrect``) in the same
        process, so a deny rule over git's commands could not see what it runs. A command
        of git's own is a builtin or external one, found as ``git-<command>`` in git's exec
        path or on ``PATH`` (read-only directories only), the way git finds it before it
        looks for an alias (externals are then checked at their own exec)."""
        rest = argv[1:]
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            i += 2 if rest[i] in _GIT_VALUE_OPTIONS else 1
        if i >= len(rest):
            return  # no command: git prints its help or runs an option's action
        command = rest[i]
        if "/" not in command and any(
            self._read_only(os.fsencode(d)) and os.path.exists(f"{d}/git-{command}")
            for d in self.git_dirs
        ):
            return  # (only where it cannot come or go during the session)
        rule = self.git_rule
        assert rule is not None
        raise Refused(
            errno.EACCES,
            Denial(
                rule.label,
                rule.source,
                real,
                [shown, *rest],
                f"`{command}` is not one of git's commands: an alias, refused while a deny "
                "rule names git commands",
            ),
        )

    def _examine(
        self,
        base: str | None,
        path: bytes,
        shown: str,
        argv: list[str],
        cwd: str | None,
        depth: int,
    ) -> tuple[str, list[str]]:
        """Open the program as the process would and check everything it runs as; its real
        path, and the names of the interpreters of denied scripts the file is (by identity:
        a copy of dash under any name is a shell)."""
        self._cacheable = True
        try:
            fd = self._open(base, path)
        except OSError as exc:  # the kernel would fail the same way: say what it would
            raise Refused(exc.errno or errno.EACCES) from None
        try:
            st = os.fstat(fd)
            if (st.st_mode & 0o170000) != 0o100000:
                raise Refused(errno.EACCES)
            real = os.readlink(f"/proc/self/fd/{fd}")
            identity = sorted(self.identity.names(fd, st))
            interpreting = (
                sorted(self.interpreter_files.names(fd, st)) if self._denied_interpreters() else []
            )
            if self.multicall_rule is not None and self.multicall.names(fd, st):
                label, source, applet = self.multicall_rule
                raise Refused(
                    errno.EACCES,
                    Denial(
                        label,
                        source,
                        real,
                        [shown, *argv[1:]],
                        f"a multi-call binary with the applet {applet}, which its shell and "
                        "tools run without an exec",
                    ),
                )
            self._match(shown, real, argv, identity)
            head = os.pread(fd, 1024, 0)
            plain = False
            if head[:2] == b"#!":
                self._script(head[:_BINPRM_BUF_SIZE], shown, argv, cwd, depth)
            elif head[:4] == b"\x7fELF":
                if self._is_loader(fd, st):
                    self._loader(argv, cwd, depth)
                elif self.emulators.by_inode and self.emulators.names(fd, st):
                    self._emulated(argv, cwd, depth)
                else:
                    plain = self._elf_interpreter(fd, head, argv, cwd, depth)
            if plain and self._cacheable and path.startswith(b"/") and len(self._plain) < 4096:
                self._plain[path] = (real, identity, interpreting)
            return real, interpreting
        finally:
            os.close(fd)

    def _script(self, head: bytes, shown: str, argv: list[str], cwd: str | None, d: int) -> None:
        """The interpreter and its optional argument as the kernel reads them (:func:`shebang`)."""
        interpreter, optional = shebang(head)
        new_argv = [_decode(interpreter), *([_decode(optional)] if optional is not None else [])]
        new_argv += [shown, *argv[1:]]
        base = None if interpreter.startswith(b"/") else cwd
        self._check(base, interpreter, _decode(interpreter), new_argv, cwd, d + 1)

    def _elf_interpreter(
        self, fd: int, head: bytes, argv: list[str], cwd: str | None, depth: int
    ) -> bool:
        """An ELF program's ``PT_INTERP``: the kernel maps that file and starts it with the
        program's argv, so an interpreter other than the dynamic loader (a static binary,
        ``busybox``) is checked as the program too. True when there is none but the loader
        (a plain program)."""
        # The kernel's x86-64 ELF loader reads the magic and e_machine (elf_check_arch), not
        # EI_CLASS or EI_DATA: any file it takes is read here as it does (native order).
        # Other machines' files it refuses (i386 ones run compat and die at their first call).
        if len(head) < 64 or struct.unpack_from("<H", head, 18)[0] != _EM_X86_64:
            return False
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        size = phentsize * phnum
        if phentsize != 56 or not 0 < size <= _MAX_PHDRS_BYTES:
            return False  # the kernel refuses it (ENOEXEC, load_elf_phdrs): nothing runs
        # The whole table, as the kernel reads it (up to 64 KiB: 1,170 headers); a
        # PT_INTERP past the first 256 was not looked at, and a copy of busybox named there
        # ran as the interpreter past `run_shell(touch *)`.
        table = (
            head[phoff : phoff + size] if phoff + size <= len(head) else os.pread(fd, size, phoff)
        )
        for i in range(0, len(table) - 55, 56):
            if struct.unpack_from("<I", table, i)[0] != 3:  # PT_INTERP
                continue
            (offset,) = struct.unpack_from("<Q", table, i + 8)
            (length,) = struct.unpack_from("<Q", table, i + 32)
            interpreter = os.pread(fd, min(length, 4096), offset).split(b"\0", 1)[0]
            if interpreter in self.loader_paths or not interpreter:
                return True  # the dynamic loader: the usual case
            base = None if interpreter.startswith(b"/") else cwd
            self._check(base, interpreter, _decode(interpreter), argv, cwd, depth + 1)
            return False
        return True  # static

    def _is_loader(self, fd: int, st: os.stat_result) -> bool:
        return bool(self.loaders.names(fd, st))

    def _emulated(self, argv: list[str], cwd: str | None, depth: int) -> None:
        """``valgrind [options] PROGRAM args`` (its launcher or a tool): PROGRAM is an
        invocation too. valgrind's options are single words; the first other word is the
        program, which the tool maps and runs itself (no exec of it to check). A program
        without a ``/`` is found on the process's ``PATH`` as it runs: refused while deny
        rules apply, as the loader's is."""
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            i += 1
        if i >= len(argv):
            return  # no program: valgrind's help or version
        program = argv[i]
        if "/" not in program:
            raise Refused(
                errno.EACCES,
                Denial(
                    "exec check",
                    "",
                    argv[0],
                    argv,
                    "valgrind given a program without a '/' (found on PATH as it runs)",
                ),
            )
        raw = os.fsencode(program)
        base = None if raw.startswith(b"/") else cwd
        self._check(base, raw, program, [program, *argv[i + 1 :]], cwd, depth + 1)

    def _loader(self, argv: list[str], cwd: str | None, depth: int) -> None:
        """``ld.so [options] PROGRAM args``: PROGRAM is an invocation too."""
        i, argv0 = 1, None
        while i < len(argv):
            word = argv[i]
            if word in _LOADER_FLAG_OPTIONS:
                i += 1
            elif word in _LOADER_VALUE_OPTIONS:
                if word == "--argv0" and i + 1 < len(argv):
                    argv0 = argv[i + 1]
                i += 2
            else:
                break
        if i >= len(argv):
            return  # the loader alone (--help, --list-tunables): runs no program
        program = argv[i]
        if "/" not in program:
            raise Refused(
                errno.EACCES,
                Denial(
                    "exec check",
                    "",
                    argv[0],
                    argv,
                    "the dynamic loader given a program without a '/' (searched like a library)",
                ),
            )
        new_argv = [argv0 or program, *argv[i + 1 :]]
        raw = os.fsencode(program)
        base = None if raw.startswith(b"/") else cwd
        self._check(base, raw, program, new_argv, cwd, depth + 1)


def _mount_path(raw: bytes) -> str:
    """A path field of ``mountinfo`` (space, tab, newline and backslash octal-escaped)."""
    out = bytearray()
    i = 0
    while i < len(raw):
        octal = raw[i + 1 : i + 4]
        if raw[i] == 0x5C and len(octal) == 3 and all(0x30 <= c <= 0x37 for c in octal):
            out.append(int(octal, 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return os.fsdecode(bytes(out))


def _below(path: str, top: str) -> str | None:
    """``path`` relative to ``top`` ("" for ``top`` itself, "/x" below it); None outside."""
    top = top.rstrip("/")
    if path == top or (not top and path == "/"):
        return ""
    return path[len(top) :] if path.startswith(top + "/") else None


def writable_mounts(given: list[str], mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Every path below which a file may change while the session runs, from the kernel's
    mount table (this process's namespace, the commands'): each read-write mount, and
    the same directories (those and the ``given`` places commands write) reached through
    any other mount of their file system (a mount whose root holds theirs, at the
    corresponding path: a read-only bind elsewhere of a root whose files the merge
    writes, a read-only ``/`` showing the upper directories' host path). A table that
    cannot be read makes everything changeable (``/``: nothing is remembered)."""
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return ["/"]
    mounts: list[tuple[bytes, str, str, bool]] = []
    for line in lines:
        fields = line.split(b" ")
        if len(fields) < 6:
            continue
        options = fields[5].split(b",")
        mounts.append((fields[2], _mount_path(fields[3]), _mount_path(fields[4]), b"rw" in options))
    places: set[str] = set()
    changing: set[tuple[bytes, str]] = set()  # (device, directory in that file system)
    for device, root, point, rw in mounts:
        if rw or any(_below(point, w) is not None for w in given):
            places.add(point)
            changing.add((device, root))
    for w in given:  # a place inside a mount: its directory in the mount's file system
        inside = [(len(point), device, root, point) for device, root, point, _ in mounts]
        for _n, device, root, point in sorted(inside, reverse=True):
            rel = _below(w, point)
            if rel is not None:
                changing.add((device, root.rstrip("/") + rel or "/"))
                break
    for device, directory in changing:
        for other_device, other_root, other_point, _ in mounts:
            rel = _below(directory, other_root) if other_device == device else None
            if rel is not None:
                places.add(other_point.rstrip("/") + rel or "/")
    return sorted(places)


def _thread_group(tid: int) -> int:
    """The thread group (process) id of the task ``tid``, what procfs's ``self`` names for
    it (``Tgid`` of ``/proc/<tid>/status``). Raises OSError when it cannot be read."""
    with open(f"/proc/{tid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"Tgid:"):
                return int(line.split()[1])
    raise OSError(errno.ESRCH, f"no Tgid in /proc/{tid}/status")


def probe(listener: int, pid: int, expected: bytes) -> str:
    """At session start: one notification from the probe child ``pid`` (an ``execve`` of
    ``expected``), its path read from its memory, answered ``EACCES``. Raises OSError."""
    nid, got, _nr, args = seccomp.receive(listener)
    if got != pid:
        raise OSError(errno.ESRCH, f"a notification from pid {got}, not the probe's {pid}")
    path, argv = _reader().exec_args(pid, args[0], args[1])  # type: ignore[attr-defined]
    if path != expected or argv != [expected]:
        raise OSError(errno.EIO, f"read {path!r} from the probe's memory, not {expected!r}")
    if not seccomp.still_valid(listener, nid):
        raise OSError(errno.ESRCH, "the probe's notification is no longer valid")
    seccomp.answer(listener, nid, errno.EACCES)
    how = "process_vm_readv" if isinstance(_reader(), _Remote) else "/proc/<pid>/mem"
    return (
        "every execve/execveat checked against the deny rules (seccomp user notification; "
        f"path and argv read with {how})"
    )
