"""Approvers answer the Gate's ``ask``: once, for this session, or deny.

An approver sees an :class:`ApprovalRequest` (arguments already redacted) and
returns an :class:`ApprovalAnswer`. "For this session" answers become
:class:`Grant` objects held by the kernel's :class:`SessionGrants`, keyed on
the normalized call so an equivalent call is not asked again and a different
one is.

What a person is shown (:meth:`ApprovalRequest.describe`) is
:func:`._render.render_approval`, the one renderer for the terminal prompt, the
MCP elicitation of ``ringfence serve`` and any host; its rules, and what it does
not promise, are in :mod:`._render`.
"""

from __future__ import annotations

import enum
import posixpath
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol, TextIO, runtime_checkable

import trio

from ._canonical import canonical_json
from ._redact import name_segments
from ._render import render_approval
from .policy._matchers import ArgvMatcher, RuleError, Tri
from .policy._rules import command_pattern
from .shell._words import parse_argv, parse_command

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "Choice",
    "Grant",
    "HeadlessDenyApprover",
    "ScriptedApprover",
    "SessionGrants",
    "TerminalApprover",
    "api_headless_fix",
    "default_approver",
    "grant_pattern",
    "posture_that_allows",
    "render_approval",
]


class Choice(enum.StrEnum):
    ONCE = "once"
    SESSION = "session"
    DENY = "deny"


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked about. ``arguments`` are redacted.

    ``runs_on`` says where the call would run when the tool declares it
    (``ToolSpec.meta["runs_on"]``: ``run_shell``'s backend, whether it is
    confined and whether it has the network), shown under the first line.
    """

    tool: str
    arguments: Mapping[str, Any]
    consequence: str
    rule: str
    reason: str
    origin: str
    trace_id: str
    runs_on: str = ""

    def describe(self) -> str:
        """What a person is shown: ``tool (consequence, via origin)``, one line (or a
        gutter block) per argument, decisive ones first, then ``why asked``. The
        rules are in the module docstring; every approver should show this text."""
        return render_approval(self)


@dataclass(frozen=True)
class ApprovalAnswer:
    """An approver's answer. ``pattern`` widens a session grant to matching calls.

    ``pattern`` maps argument names to glob patterns (``{"path": "src/*"}``); a
    path argument is matched per component on its normalized path, ``command``
    shell-aware (every command of the line, like an allow rule), any other on
    its string form; arguments it does not name must be equal (see :class:`Grant`).
    """

    choice: Choice
    reason: str = ""
    pattern: Mapping[str, str] | None = None

    @classmethod
    def once(cls, reason: str = "approved once") -> ApprovalAnswer:
        return cls(Choice.ONCE, reason)

    @classmethod
    def session(
        cls, reason: str = "approved for this session", pattern: Mapping[str, str] | None = None
    ) -> ApprovalAnswer:
        return cls(Choice.SESSION, reason, pattern)

    @classmethod
    def deny(cls, reason: str = "denied by the approver") -> ApprovalAnswer:
        return cls(Choice.DENY, reason)


@runtime_checkable
class Approver(Protocol):
    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer: ...


# Argument names (last segment) whose value is a path: a pattern on them is matched
# component by component on the normalized path, never on the raw text.
_PATH_SEGMENTS = frozenset(
    {
        "path", "paths", "file", "files", "filename", "destination", "dest", "target",
        "source", "src", "cwd", "dir", "directory", "workdir", "root",
    }
)  # fmt: skip


# Components a glob never matches: the root of an absolute path (""), the base itself
# (".") and a step out of it (".."); a pattern names them literally or not at all.
_LITERAL_ONLY = frozenset({"", ".", ".."})


def is_path_argument(name: str) -> bool:
    """Whether argument ``name`` holds a path, by its last name segment (``dest_path``)."""
    segments = name_segments(name)
    return bool(segments) and segments[-1] in _PATH_SEGMENTS


def match_path(value: str, pattern: str) -> bool:
    """Whether the path ``value`` matches the glob ``pattern`` per component.

    ``value`` is normalized first (``notes/sub/../../a.txt`` is ``a.txt``), so a
    ``..`` cannot walk out of what the pattern names. Each ``*``, ``?`` or
    ``[..]`` matches within one component only; a ``**`` component matches any
    number of whole components. A ``..`` left after normalization (the path
    leaves its base) matches only a literal ``..`` in the pattern, an absolute
    path only an absolute pattern, and the base itself (``.``) only ``.``.
    """
    parts = posixpath.normpath(value.replace("\\", "/")).split("/")
    # The components matched so far, as the set of positions the next glob may start at: one
    # pass per glob, so ``**/a/**/b/**`` over a long path costs (globs x components), where
    # backtracking cost components to the power of the ``**`` count (seconds at 300).
    starts = {0}
    for glob in pattern.split("/"):
        if glob == "**":
            reach: set[int] = set()
            for i in sorted(starts):
                k = i
                while k not in reach:
                    reach.add(k)
                    if k == len(parts) or parts[k] in _LITERAL_ONLY:
                        break  # ** never swallows the root, "." or a step out
                    k += 1
            starts = reach
            continue
        starts = {
            i + 1
            for i in starts
            if i < len(parts)
            and (
                parts[i] == glob  # the root of an absolute path, or a step out: only literally
                if parts[i] in _LITERAL_ONLY or glob in _LITERAL_ONLY
                else fnmatchcase(parts[i], glob)
            )
        }
        if not starts:
            return False
    return len(parts) in starts


# The argument a pattern matches shell-aware (the one the policy judges as a command line).
COMMAND_ARGUMENT = "command"
# Redirection targets that write no file.
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


def match_command(value: Any, pattern: str) -> bool:
    """Whether the command line ``value`` is covered by the command pattern ``pattern``.

    ``pattern`` has the syntax of a rule's command pattern (``ls*``, ``git
    status*``: a last word ending in ``*`` admits any further words) and is
    matched like an allow rule, per simple command: the line must be read whole
    (no unresolved part: substitutions, ``eval``, a shell fed its input, …),
    write no file through a redirection, and every command in it, wrappers'
    inner commands included, must match. So ``ls*`` covers ``ls -la | ls`` and
    not ``ls; touch x`` (``*`` never crosses a ``;``). A pattern that is not
    one is never matched.
    """
    try:
        matcher = ArgvMatcher((command_pattern(pattern),))
    except RuleError:
        return False
    if isinstance(value, str):
        parsed = parse_command(value)
    elif isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        parsed = parse_argv(value)
    else:
        return False
    if not parsed.resolved or not parsed.commands:
        return False
    if any(
        r.write and not (r.path.literal and r.path.text in _NOT_FILES) for r in parsed.redirects
    ):
        return False
    return all(matcher.match_command(c, deny_side=False) is Tri.YES for c in parsed.commands)


@dataclass(frozen=True)
class Grant:
    """A "for this session" approval of one tool, for one call or a pattern of calls.

    Without a pattern the grant covers calls whose normalized arguments equal the
    approved call's. With one, every argument the pattern names must be present
    and match its glob (a path argument per component on its normalized path, see
    :func:`match_path`; ``command`` shell-aware, every command of the line, see
    :func:`match_command`; any other value on its string form), and every argument
    it does not name must be equal to the approved call's (``rest_key``): a grant
    of ``{"cwd": "sub"}`` never covers another command. Not promised: a pattern
    is matched on the argument as given, before any tool resolves it (symlinks).
    """

    tool: str
    arguments_key: bytes | None = None
    pattern: Mapping[str, str] | None = None
    rest_key: bytes | None = None

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        if tool != self.tool:
            return False
        if self.pattern is None:
            return canonical_json(dict(arguments)) == self.arguments_key
        # Every pattern key must be present; otherwise the grant says nothing about the call.
        if not all(name in arguments for name in self.pattern):
            return False
        rest = {k: v for k, v in arguments.items() if k not in self.pattern}
        if canonical_json(rest) != self.rest_key:
            return False
        for name, glob in self.pattern.items():
            value = arguments[name]
            if name == COMMAND_ARGUMENT:
                if not match_command(value, glob):
                    return False
                continue
            if is_path_argument(name):
                if not isinstance(value, str) or not match_path(value, glob):
                    return False  # a path pattern says nothing about a list or a number
                continue
            text = value if isinstance(value, str) else canonical_json(value).decode()
            if not fnmatchcase(text, glob):
                return False
        return True


@dataclass
class SessionGrants:
    _grants: list[Grant] = field(default_factory=list)

    def add(
        self, tool: str, arguments: Mapping[str, Any], pattern: Mapping[str, str] | None
    ) -> Grant:
        if pattern is not None:
            rest = {k: v for k, v in arguments.items() if k not in pattern}
            grant = Grant(tool, pattern=dict(pattern), rest_key=canonical_json(rest))
        else:
            grant = Grant(tool, arguments_key=canonical_json(dict(arguments)))
        self._grants.append(grant)
        return grant

    def find(self, tool: str, arguments: Mapping[str, Any]) -> Grant | None:
        return next((g for g in self._grants if g.matches(tool, arguments)), None)

    def clear(self) -> None:
        self._grants.clear()


class HeadlessDenyApprover:
    """Denies every request: the default when nobody is there to ask.

    The reason names what would let the call run: ``fix(request)`` says it in the
    caller's words (the command line names its flags); by default, in the API's.
    """

    def __init__(self, fix: Callable[[ApprovalRequest], str] | None = None) -> None:
        self._fix = fix or api_headless_fix

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer.deny(
            f"no approver is attached (headless): asking means no; {self._fix(request)}"
        )


def posture_that_allows(request: ApprovalRequest) -> str | None:
    """The loosest-needed posture that would run ``request`` without asking, or None when
    no posture short of ``unrestricted`` would (an ask rule asks under every posture)."""
    if request.rule.startswith("ask:"):
        return None
    if request.rule == "residual":
        return "unrestricted"
    return "allow-reversible" if request.consequence == "reversible" else "allow-all"


def api_headless_fix(request: ApprovalRequest) -> str:
    """What lets ``request`` run, in the embedding API's words."""
    if request.rule.startswith("ask:"):
        return (
            f"the rule {request.rule!r} asks under every posture: give create_kernel an "
            "approver (approver=...) that can answer it"
        )
    posture = posture_that_allows(request)
    return (
        f"to let it run, give create_kernel an approver (approver=...), a posture that "
        f"allows it (posture={posture!r}), or an allow rule for {request.tool} "
        "(rules=Rules(...) or a policy file)"
    )


class ScriptedApprover:
    """Answers from a script, for tests and for hosts that decide in code.

    ``answers`` is either an iterable consumed one answer per request (running
    out denies) or a callable from request to answer. Every request is kept in
    ``requests`` so tests can assert what was asked.
    """

    def __init__(
        self,
        answers: Iterable[ApprovalAnswer] | Callable[[ApprovalRequest], ApprovalAnswer],
    ) -> None:
        self._fn = answers if callable(answers) else None
        self._queue = [] if callable(answers) else list(answers)
        self.requests: list[ApprovalRequest] = []

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.requests.append(request)
        if self._fn is not None:
            return self._fn(request)
        if not self._queue:
            return ApprovalAnswer.deny("the scripted approver has no answers left")
        return self._queue.pop(0)


_PROMPT_ANSWERS = {
    "y": Choice.ONCE,
    "yes": Choice.ONCE,
    "o": Choice.ONCE,
    "once": Choice.ONCE,
    "s": Choice.SESSION,
    "session": Choice.SESSION,
    "n": Choice.DENY,
    "no": Choice.DENY,
    "d": Choice.DENY,
    "deny": Choice.DENY,
    "": Choice.DENY,
}


class TerminalApprover:
    """Asks a person on a terminal: [o]nce, for this [s]ession, or [d]eny (the default).

    A session answer may name a pattern that widens the grant to calls whose
    named arguments match it: ``s path=notes/*``, ``s command="git status*"``
    (``NAME=GLOB`` words, quoted as in a shell, each ``NAME`` an argument of the
    call asked about; see :class:`Grant` for how paths and commands match and
    that every argument not named must be equal). A pattern that names no
    argument of the call, a command pattern that cannot be read, or an answer
    that is not understood, is asked again. Prompts are serialized so concurrent calls never
    interleave their questions. End of input denies.
    """

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None) -> None:
        self._input = input if input is not None else sys.stdin
        self._output = output if output is not None else sys.stderr
        self._lock = trio.Lock()

    async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
        async with self._lock:
            while True:
                self._output.write(
                    f"\nringfence asks: {request.describe()}\n"
                    "  allow [o]nce, for this [s]ession (s NAME=GLOB widens it), or [d]eny? "
                )
                self._output.flush()
                line = await trio.to_thread.run_sync(self._input.readline, abandon_on_cancel=True)
                if line == "":
                    return ApprovalAnswer.deny("end of input at the approval prompt")
                answer = _parse_terminal_answer(line, request)
                if isinstance(answer, ApprovalAnswer):
                    return answer
                self._output.write(f"  {answer}\n")


def _parse_terminal_answer(line: str, request: ApprovalRequest) -> ApprovalAnswer | str:
    """A typed answer as an ApprovalAnswer, or what to tell the person before asking again."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        return f"cannot read the answer ({exc}); quote a pattern as in a shell"
    choice = _PROMPT_ANSWERS.get(words[0].lower() if words else "")
    if choice is None:
        return "please answer o, s or d"
    if len(words) == 1:
        return ApprovalAnswer(choice, f"answered {choice.value} at the terminal")
    if choice is not Choice.SESSION:
        return "only a session answer takes a pattern: s NAME=GLOB …"
    pattern = grant_pattern(words[1:], request)
    if isinstance(pattern, str):
        return pattern
    shown = " ".join(f"{k}={v}" for k, v in pattern.items())
    return ApprovalAnswer.session(f"answered session for {shown} at the terminal", pattern)


def grant_pattern(words: Iterable[str], request: ApprovalRequest) -> dict[str, str] | str:
    """``NAME=GLOB`` words (already split as a shell would) as a session grant's pattern
    for ``request``, or what is wrong with them (every approver that offers a pattern reads
    it here: the terminal's ``s NAME=GLOB``, ``serve``'s form)."""
    pattern: dict[str, str] = {}
    for word in words:
        name, sep, glob = word.partition("=")
        if not sep or not name or not glob:
            return f"{word!r}: write a pattern as NAME=GLOB (e.g. path=src/*)"
        if name not in request.arguments:
            names = ", ".join(sorted(request.arguments)) or "none"
            return f"{name!r} is not an argument of {request.tool} (its arguments: {names})"
        if name == COMMAND_ARGUMENT:
            try:
                command_pattern(glob)
            except RuleError as exc:
                return f"command pattern {glob!r}: {exc.message}"
        pattern[name] = glob
    return pattern


def default_approver(headless: Approver | None = None) -> Approver:
    """A terminal prompt when stdin and stderr are a TTY, else ``headless`` (default:
    :class:`HeadlessDenyApprover`)."""
    if sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalApprover()
    return headless if headless is not None else HeadlessDenyApprover()
