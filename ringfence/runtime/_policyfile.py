"""Policy files: managed > session > user > project, read with stdlib ``tomllib``.

Layers (highest first) and where they come from:

==========  ==========================================================  ==================
layer       file                                                        may add
==========  ==========================================================  ==================
managed     ``/etc/ringfence/policy.toml`` (``RINGFENCE_MANAGED_POLICY``)  deny, ask, allow
session     ``--policy FILE`` and ``--deny/--ask/--allow RULE``           deny, ask, allow
user        ``$RINGFENCE_HOME/policy.toml``                               deny, ask, allow
project     ``<first root>/.ringfence/policy.toml``                       deny, ask; allow
                                                                        only if trusted
==========  ==========================================================  ==================

All rules are merged and judged deny > ask > allow, so no layer can undo a
deny or ask of another; the only loosening a rule can do is an ``allow`` over
the posture, and that is refused to an untrusted project (its allow rules are
loaded, shown by ``policy show`` as inactive, and never applied) and, when the
managed file says ``lock_allow = true``, to every layer but managed.

A file that cannot be read whole is an error naming the file, the line and
the key; nothing of it (or of any other layer) is used.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._errors import InvalidArguments
from ._files import ringfence_home
from ._judge import Policy
from ._rules import EFFECTS, Effect, Rule, RuleError, parse_rule, rule_from_table

__all__ = [
    "LAYERS",
    "PolicyFileError",
    "load_layers",
    "load_policy_file",
    "managed_policy_path",
]

LAYERS = ("managed", "session", "user", "project")
MANAGED_DEFAULT = Path("/etc/ringfence/policy.toml")
MAX_FILE_BYTES = 1 << 20
_TOP_KEYS = frozenset({"version", "deny", "ask", "allow", "rules", "trust", "lock_allow"})


class PolicyFileError(InvalidArguments):
    """A policy file that cannot be used; the message starts with ``file:line: key:``."""


def managed_policy_path() -> Path:
    env = os.environ.get("RINGFENCE_MANAGED_POLICY")
    return Path(env) if env else MANAGED_DEFAULT


@dataclass(frozen=True)
class PolicyFile:
    path: Path
    layer: str
    rules: tuple[Rule, ...]
    # (project directory, sha256 its policy.toml must have, or "" for any content)
    trusted_projects: tuple[tuple[str, str], ...] = ()
    lock_allow: bool = False
    sha256: str = ""


def _fail(path: Path, line: int | None, key: str, message: str) -> PolicyFileError:
    where = f"{path}:{line}" if line else str(path)
    return PolicyFileError(f"{where}: {key}: {message}", field=f"{where}:{key}")


def load_policy_file(path: str | os.PathLike[str], layer: str) -> PolicyFile:
    """Read one policy file whole, or raise PolicyFileError naming file, line and key."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail(path, None, "file", f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise _fail(path, None, "file", f"larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise _fail(path, None, "file", f"is not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        line = _toml_error_line(str(exc))
        raise _fail(path, line, "toml", str(exc)) from None
    lines = _Locator(text)
    for key in data:
        if key not in _TOP_KEYS:
            raise _fail(
                path,
                lines.key_line(key),
                key,
                f"unknown key (a policy file has {', '.join(sorted(_TOP_KEYS))})",
            )
    version = data.get("version", 1)
    if version != 1:
        raise _fail(path, lines.key_line("version"), "version", f"must be 1, not {version!r}")
    rules: list[Rule] = []
    for effect in EFFECTS:
        values = data.get(effect, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise _fail(
                path,
                lines.key_line(effect),
                effect,
                'must be a list of rule strings such as "run_shell(git status*)"',
            )
        element_lines = lines.array_string_lines(effect)
        for index, value in enumerate(values):
            line = element_lines[index] if index < len(element_lines) else lines.key_line(effect)
            try:
                rules.append(parse_rule(value, effect, source=f"{path}:{line}", layer=layer))
            except RuleError as exc:
                raise _fail(path, line, f"{effect}[{index}]", exc.message) from None
    tables = data.get("rules", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise _fail(path, lines.key_line("rules"), "rules", "must be [[rules]] tables")
    header_lines = lines.table_array_lines("rules")
    for index, table in enumerate(tables):
        line = header_lines[index] if index < len(header_lines) else None
        try:
            rules.append(rule_from_table(table, source=f"{path}:{line}", layer=layer))
        except RuleError as exc:
            at = lines.table_key_line("rules", index, str(exc.field)) or line
            raise _fail(path, at, f"rules[{index}].{exc.field}", exc.message) from None
    trusted: tuple[str, ...] = ()
    if "trust" in data:
        trust = data["trust"]
        if layer == "project":
            raise _fail(
                path,
                lines.key_line("trust"),
                "trust",
                "a project cannot trust itself; list it in $RINGFENCE_HOME/policy.toml",
            )
        projects = trust.get("projects", []) if isinstance(trust, dict) else None
        if (
            not isinstance(trust, dict)
            or set(trust) - {"projects"}
            or not isinstance(projects, list)
            or not all(_trust_entry(p) is not None for p in projects)
        ):
            raise _fail(
                path,
                lines.key_line("trust"),
                "trust",
                'must be a table with projects = ["/path/to/repo", '
                '{ path = "/path/to/repo", sha256 = "<of its .ringfence/policy.toml>" }, …]',
            )
        trusted = tuple(e for p in projects if (e := _trust_entry(p)) is not None)
    lock = data.get("lock_allow", False)
    if not isinstance(lock, bool) or (lock and layer != "managed"):
        raise _fail(
            path,
            lines.key_line("lock_allow"),
            "lock_allow",
            "is true or false, and only the managed file may set it",
        )
    return PolicyFile(path, layer, tuple(rules), trusted, lock, hashlib.sha256(raw).hexdigest())


def _trust_entry(value: Any) -> tuple[str, str] | None:
    if isinstance(value, str) and value:
        return (value, "")
    if (
        isinstance(value, dict)
        and set(value) <= {"path", "sha256"}
        and isinstance(value.get("path"), str)
        and isinstance(value.get("sha256", ""), str)
        and re.fullmatch(r"[0-9a-f]{64}|", value.get("sha256", "").lower())
    ):
        return (value["path"], value.get("sha256", "").lower())
    return None


def cli_rules(
    deny: Iterable[str] = (), ask: Iterable[str] = (), allow: Iterable[str] = ()
) -> tuple[Rule, ...]:
    """``--deny/--ask/--allow RULE`` values as session-layer rules."""
    out: list[Rule] = []
    for effect, values in (("deny", deny), ("ask", ask), ("allow", allow)):
        for value in values:
            try:
                out.append(parse_rule(value, effect, source=f"--{effect}", layer="session"))
            except RuleError as exc:
                raise PolicyFileError(
                    f"--{effect} {value!r}: {exc.message}", field=f"--{effect}"
                ) from None
    return tuple(out)


def load_layers(
    roots: Sequence[str | os.PathLike[str]],
    *,
    policy_files: Iterable[str | os.PathLike[str]] = (),
    rules: Iterable[Rule] = (),
    managed: str | os.PathLike[str] | None = None,
    user: str | os.PathLike[str] | None = None,
    project: bool = True,
) -> Policy:
    """The merged policy of every layer for a session over ``roots``.

    Raises PolicyFileError (nothing is loaded) when any file is bad. A missing
    user or project file, or a missing ``/etc/ringfence/policy.toml``, is no
    layer; a missing ``--policy`` file, or a managed file named by
    ``RINGFENCE_MANAGED_POLICY``, is an error.
    """
    managed_path = Path(managed) if managed is not None else managed_policy_path()
    user_path = Path(user) if user is not None else ringfence_home() / "policy.toml"
    files: list[PolicyFile] = []
    if managed_path.exists() or managed_path != MANAGED_DEFAULT:
        # A managed file someone named (RINGFENCE_MANAGED_POLICY, managed=) must be there:
        # a missing one refuses the session rather than silently dropping the layer.
        files.append(load_policy_file(managed_path, "managed"))
    for extra in policy_files:
        files.append(load_policy_file(extra, "session"))
    session_rules = tuple(rules)
    if user_path.exists():
        files.append(load_policy_file(user_path, "user"))
    project_file: PolicyFile | None = None
    if project and roots:
        candidate = Path(roots[0]) / ".ringfence" / "policy.toml"
        if candidate.exists():
            project_file = load_policy_file(candidate, "project")
    trusted: dict[str, set[str]] = {}
    for f in files:
        for where, digest in f.trusted_projects:
            trusted.setdefault(_canonical(where), set()).add(digest)
    lock = any(f.lock_allow for f in files)
    merged: list[Rule] = []
    for f in files:
        for r in f.rules:
            if lock and f.layer != "managed" and r.effect is Effect.ALLOW:
                r = replace(r, inactive="the managed policy locks allow rules (lock_allow)")
            merged.append(r)
        if f.layer == "managed":
            merged.extend(_lock(session_rules, lock))
            session_rules = ()
    merged.extend(_lock(session_rules, lock))
    if project_file is not None:
        pins = trusted.get(_canonical(roots[0]))
        why = ""
        if pins is None:
            why = (
                "a project may only add deny/ask rules unless $RINGFENCE_HOME/policy.toml "
                "lists it under [trust] projects"
            )
        elif "" not in pins and project_file.sha256 not in pins:
            # the file an agent can write changed since the person trusted it
            why = (
                f"the project's policy.toml changed since it was trusted (sha256 now "
                f"{project_file.sha256})"
            )
        for r in project_file.rules:
            if r.effect is Effect.ALLOW and why:
                r = replace(r, inactive=why)
            elif lock and r.effect is Effect.ALLOW:
                r = replace(r, inactive="the managed policy locks allow rules (lock_allow)")
            merged.append(r)
    return Policy(tuple(merged), tuple(str(r) for r in roots))


def _lock(rules: Iterable[Rule], lock: bool) -> list[Rule]:
    return [
        replace(r, inactive="the managed policy locks allow rules (lock_allow)")
        if lock and r.effect is Effect.ALLOW
        else r
        for r in rules
    ]


def _canonical(path: str | os.PathLike[str]) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except OSError:
        return str(Path(path).expanduser().absolute())


def _toml_error_line(message: str) -> int | None:
    m = re.search(r"line (\d+)", message)
    return int(m.group(1)) if m else None


class _Locator:
    """Line numbers of keys, array strings and [[table]] headers (tomllib gives none).

    A small scanner that knows TOML's strings and comments well enough to
    find where a value starts; it is used for messages only, never for values.
    """

    def __init__(self, text: str) -> None:
        self.keys: dict[str, int] = {}
        self.array_strings: dict[str, list[int]] = {}
        self.headers: dict[str, list[int]] = {}
        self.table_keys: dict[tuple[str, int, str], int] = {}
        self._scan(text)

    def key_line(self, key: str) -> int | None:
        return self.keys.get(key) or (self.headers.get(key) or [None])[0]

    def array_string_lines(self, key: str) -> list[int]:
        return self.array_strings.get(key, [])

    def table_key_line(self, table: str, index: int, key: str) -> int | None:
        return self.table_keys.get((table, index, key))

    def table_array_lines(self, key: str) -> list[int]:
        return self.headers.get(key, [])

    def _scan(self, text: str) -> None:
        i, n, line = 0, len(text), 1
        table: str | None = None  # None: the root table
        key: str | None = None
        depth = 0
        at_line_start = True
        while i < n:
            ch = text[i]
            if ch == "\n":
                line += 1
                i += 1
                at_line_start = True
                continue
            if ch in " \t\r":
                i += 1
                continue
            if ch == "#":
                while i < n and text[i] != "\n":
                    i += 1
                continue
            if ch in "\"'":
                triple = text[i : i + 3] in ('"""', "'''")
                if depth == 1 and table is None and key is not None:
                    self.array_strings.setdefault(key, []).append(line)
                quote = text[i : i + 3] if triple else ch
                i += len(quote)
                while i < n and text[i : i + len(quote)] != quote:
                    if text[i] == "\\" and quote[0] == '"':
                        i += 1
                    if i < n and text[i] == "\n":
                        line += 1
                    i += 1
                i += len(quote)
                at_line_start = False
                continue
            if at_line_start and depth == 0 and ch == "[":
                end = text.find("\n", i)
                header = text[i : end if end != -1 else n].split("#", 1)[0].strip()
                name = header.strip("[] ")
                if header.startswith("[["):
                    self.headers.setdefault(name, []).append(line)
                else:
                    self.headers.setdefault(name, []).append(line)
                table = name
                i = end if end != -1 else n
                continue
            if at_line_start and depth == 0:
                j = i
                while j < n and text[j] not in "=\n":
                    j += 1
                name = text[i:j].strip().strip("\"'")
                if table is None:
                    self.keys.setdefault(name, line)
                    key = name
                else:
                    index = len(self.headers.get(table, [])) - 1
                    self.table_keys.setdefault((table, index, name), line)
                i = j + 1
                at_line_start = False
                continue
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth = max(0, depth - 1)
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth = max(0, depth - 1)
            at_line_start = False
            i += 1
