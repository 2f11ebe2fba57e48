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

``RINGFENCE_MANAGED_POLICY`` is the command line's: it reads the variable and
passes ``managed=``; :func:`load_policy` itself never reads the environment.

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
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import InvalidArguments
from .._files import ringfence_home
from ._judge import Policy
from ._kept import accept_project_file, kept_rules, project_directory
from ._mcp import McpPolicy, McpStatement, mcp_statements_from_table
from ._rules import EFFECTS, Effect, Rule, RuleError, parse_rule, rule_from_table

__all__ = [
    "LAYERS",
    "PolicyFileError",
    "PolicyLayers",
    "accept_project_policy",
    "load_layers",
    "load_policy",
    "load_policy_file",
    "managed_policy_path",
    "parse_policy_file",
]

LAYERS = ("managed", "session", "user", "project")
MANAGED_DEFAULT = Path("/etc/ringfence/policy.toml")
MAX_FILE_BYTES = 1 << 20
_TOP_KEYS = frozenset({"version", "deny", "ask", "allow", "rules", "trust", "lock_allow", "mcp"})
_LOCKED = "the managed policy locks allow rules (lock_allow)"


class PolicyFileError(InvalidArguments):
    """A policy file that cannot be used; the message starts with ``file:line: key:``."""


def managed_policy_path() -> Path:
    """The machine's managed policy file (``/etc/ringfence/policy.toml``).

    Never the environment: a library caller's :func:`load_policy` reads the
    machine's managed rules whatever ``RINGFENCE_MANAGED_POLICY`` says (the
    command line reads that variable and passes ``managed=``).
    """
    return MANAGED_DEFAULT


@dataclass(frozen=True)
class PolicyFile:
    path: Path
    layer: str
    rules: tuple[Rule, ...]
    # (project directory, sha256 its policy.toml must have, or "" for any content)
    trusted_projects: tuple[tuple[str, str], ...] = ()
    lock_allow: bool = False
    sha256: str = ""
    mcp: tuple[McpStatement, ...] = ()
    # (project directory, sha256 its .ringfence/mcp.toml must have): a workspace manifest's
    # servers start only when pinned (an agent in the project can write that file)
    trusted_manifests: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PolicyLayers:
    """Every layer merged: the rules (``policy``) and the per-server MCP statements (``mcp``)."""

    policy: Policy
    mcp: McpPolicy = field(default_factory=McpPolicy)
    # The project's policy.toml as it was read for these rules (None: there was none): what
    # `policy show` tells a person to trust is the digest of the bytes its rules came from.
    project_file: PolicyFile | None = None


def _fail(path: Path, line: int | None, key: str, message: str) -> PolicyFileError:
    where = f"{path}:{line}" if line else str(path)
    return PolicyFileError(f"{where}: {key}: {message}", field=f"{where}:{key}")


def load_policy_file(path: str | os.PathLike[str], layer: str) -> PolicyFile:
    """Read one policy file whole, or raise PolicyFileError naming file, line and key."""
    path = Path(path)
    return parse_policy_file(path, _read_policy_bytes(path, layer), layer)


def _read_policy_bytes(path: Path, layer: str) -> bytes:
    """The bytes of one policy file (at most one more than the bound), or PolicyFileError."""
    # A file at a fixed place (the project's, the user's, the managed one) is opened without
    # waiting and read only when it is a regular file: the project's file is the
    # workspace's, and a FIFO an agent left there (a --no-change-sets command's `mkfifo
    # .ringfence/policy.toml`) made every later session's start wait forever. A file named
    # on the command line (`--policy <(…)`) is read as the person gave it.
    fixed = layer != "session"
    flags = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC | (os.O_NONBLOCK if fixed else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _fail(path, None, "file", f"cannot be read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode) or (fixed and not stat.S_ISREG(mode)):
            raise _fail(path, None, "file", f"is not a regular file ({_kind(mode)})")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _fail(path, None, "file", f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, for a refusal's message."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def parse_policy_file(path: Path, raw: bytes, layer: str) -> PolicyFile:
    """``raw`` read as the policy file ``path`` of ``layer``; the same checks as a load."""
    if len(raw) > MAX_FILE_BYTES:
        raise _fail(path, None, "file", f"larger than {MAX_FILE_BYTES} bytes")
    # Here: a session without policy files never parses TOML.
    import tomllib

    from .._tomllines import load_toml, toml_error_line, toml_key_lines

    try:
        text = raw.decode("utf-8")
        data = load_toml(text)
    except UnicodeDecodeError as exc:
        raise _fail(path, None, "file", f"is not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        line, message = toml_error_line(exc)
        raise _fail(path, line, "toml", message) from None
    lines = _Lines(toml_key_lines(text))
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
    trusted: tuple[tuple[str, str], ...] = ()
    manifests: tuple[tuple[str, str], ...] = ()
    if "trust" in data:
        trust = data["trust"]
        if layer == "project":
            raise _fail(
                path,
                lines.key_line("trust"),
                "trust",
                "a project cannot trust itself; list it in $RINGFENCE_HOME/policy.toml",
            )
        shape = (
            'a table: [trust] projects = ["/path/to/repo", '
            '{ path = "/path/to/repo", sha256 = "<64 hex digits>", '
            'mcp_sha256 = "<64 hex digits>" }, …]'
        )
        if not isinstance(trust, dict):
            raise _fail(path, lines.key_line("trust"), "trust", f"must be {shape}")
        if unknown := sorted(set(trust) - {"projects"}):
            raise _fail(
                path,
                lines.line_of(("trust", unknown[0])) or lines.key_line("trust"),
                f"trust.{unknown[0]}",
                f"is not a key of [trust], which takes only projects (it must be {shape})",
            )
        projects = trust.get("projects", [])
        if not isinstance(projects, list):
            raise _fail(
                path,
                lines.line_of(("trust", "projects")),
                "trust.projects",
                "must be a list of project paths or { path, sha256, mcp_sha256 } tables",
            )
        for index, entry in enumerate(projects):
            if (problem := _trust_entry_problem(entry)) is not None:
                raise _fail(
                    path,
                    lines.line_of(("trust", "projects", index)),
                    f"trust.projects[{index}]",
                    problem,
                )
        trusted = tuple(e for p in projects if (e := _trust_entry(p)) is not None)
        manifests = tuple(
            (p["path"], p["mcp_sha256"].lower())
            for p in projects
            if isinstance(p, dict) and p.get("mcp_sha256")
        )
    lock = data.get("lock_allow", False)
    if not isinstance(lock, bool) or (lock and layer != "managed"):
        raise _fail(
            path,
            lines.key_line("lock_allow"),
            "lock_allow",
            "is true or false, and only the managed file may set it",
        )
    try:
        mcp = mcp_statements_from_table(
            data.get("mcp", {}), layer=layer, line_of=lines.line_of, source_file=str(path)
        )
    except ValueError as exc:
        where, message = exc.args
        raise _fail(path, lines.line_of(where), ".".join(where), message) from None
    digest = hashlib.sha256(raw).hexdigest()
    return PolicyFile(
        path, layer, tuple(rules), trusted, lock, digest, tuple(mcp), trusted_manifests=manifests
    )


class _Lines:
    """The policy file's key lines, asked the way the reader needs them."""

    def __init__(self, lines: dict[tuple[str | int, ...], int]) -> None:
        self.lines = lines

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        from .._tomllines import line_of  # loaded with the file that is being read

        return line_of(self.lines, path)

    def key_line(self, key: str) -> int | None:
        return self.lines.get((key,))

    def array_string_lines(self, key: str) -> list[int]:
        """The line of each element of ``key = [...]`` (or of each ``[[key]]`` header)."""
        out: list[int] = []
        while (key, len(out)) in self.lines:
            out.append(self.lines[(key, len(out))])
        return out

    def table_key_line(self, table: str, index: int, key: str) -> int | None:
        return self.lines.get((table, index, key))

    table_array_lines = array_string_lines


def _trust_entry_problem(value: Any) -> str | None:
    """What is wrong with one ``[trust] projects`` entry, said plainly (None: nothing)."""
    if _trust_entry(value) is not None:
        return None
    if isinstance(value, str):
        return "must be a project path, not empty"
    if not isinstance(value, dict):
        return (
            "must be a project path or a { path, sha256, mcp_sha256 } table, "
            f"not {type(value).__name__}"
        )
    if unknown := sorted(set(value) - _TRUST_KEYS):
        return f"has the key {unknown[0]!r}; an entry takes path, sha256 and mcp_sha256"
    if not isinstance(value.get("path"), str) or not value["path"]:
        return "needs path = the project directory"
    if not _is_pin(value.get("mcp_sha256", "")):
        return (
            "mcp_sha256 must be the 64 hex digits of the project's .ringfence/mcp.toml, "
            f"which `ringfence mcp list --workspace {value['path']}` prints; it is "
            f"{str(value.get('mcp_sha256'))[:80]!r}"
        )
    digest = value.get("sha256", "")
    return (
        f"sha256 must be the 64 hex digits of the project's .ringfence/policy.toml, which "
        f"`ringfence policy show --workspace {value['path']}` prints; it is "
        f"{str(digest)[:80]!r} (leave sha256 out to trust whatever the file says)"
    )


_TRUST_KEYS = frozenset({"path", "sha256", "mcp_sha256"})


def _is_pin(value: Any) -> bool:
    """A digest pin as an entry may hold it: 64 hex digits, or "" (none)."""
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}|", value.lower()) is not None


def _trust_entry(value: Any) -> tuple[str, str] | None:
    """(project directory, policy.toml pin or "") of a valid entry, else None."""
    if isinstance(value, str) and value:
        return (value, "")
    if (
        isinstance(value, dict)
        and set(value) <= _TRUST_KEYS
        and isinstance(value.get("path"), str)
        and value["path"]
        and _is_pin(value.get("sha256", ""))
        and _is_pin(value.get("mcp_sha256", ""))
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
    """The merged rules of every layer (:func:`load_policy`'s ``policy``)."""
    return load_policy(
        roots, policy_files=policy_files, rules=rules, managed=managed, user=user, project=project
    ).policy


def load_policy(
    roots: Sequence[str | os.PathLike[str]],
    *,
    policy_files: Iterable[str | os.PathLike[str]] = (),
    rules: Iterable[Rule] = (),
    managed: str | os.PathLike[str] | None = None,
    user: str | os.PathLike[str] | None = None,
    project: bool = True,
) -> PolicyLayers:
    """The merged policy of every layer for a session over ``roots``: rules and MCP statements.

    Raises PolicyFileError (nothing is loaded) when any file is bad. A missing
    user or project file, or a missing ``/etc/ringfence/policy.toml``, is no
    layer; a missing ``--policy`` file, or a ``managed`` file named here (the
    command line's ``RINGFENCE_MANAGED_POLICY``), is an error. MCP statements that would
    loosen (``read_only_tools``, ``trusted = true``) are inactive exactly where
    an allow rule would be: in an untrusted project, and under ``lock_allow``.
    """
    managed_path = Path(managed) if managed is not None else managed_policy_path()
    user_path = Path(user) if user is not None else ringfence_home() / "policy.toml"
    files: list[PolicyFile] = []
    if managed_path.exists() or managed_path != MANAGED_DEFAULT:
        # A managed file someone named (managed=, the CLI's RINGFENCE_MANAGED_POLICY) must be there:
        # a missing one refuses the session rather than silently dropping the layer.
        _refuse_inside_roots(managed_path, roots)
        files.append(load_policy_file(managed_path, "managed"))
    for extra in policy_files:
        _refuse_inside_roots(Path(extra), roots)
        files.append(load_policy_file(extra, "session"))
    session_rules = tuple(rules)
    if user_path.exists():
        files.append(load_policy_file(user_path, "user"))
    project_file: PolicyFile | None = None
    kept: tuple[Rule, ...] = ()
    if project and roots:
        candidate = Path(roots[0]) / ".ringfence" / "policy.toml"
        raw = None
        if candidate.exists():
            raw = _read_policy_bytes(candidate, "project")
            project_file = parse_policy_file(candidate, raw, "project")
        kept = _kept(roots[0], candidate, raw, project_file)
    trusted: dict[str, set[str]] = {}
    for f in files:
        for where, digest in f.trusted_projects:
            trusted.setdefault(_canonical(where), set()).add(digest)
    lock = any(f.lock_allow for f in files)
    merged: list[Rule] = []
    mcp: list[McpStatement] = []
    for f in files:
        for r in f.rules:
            if lock and f.layer != "managed" and r.effect is Effect.ALLOW:
                r = replace(r, inactive=_LOCKED)
            merged.append(r)
        locked = lock and f.layer != "managed"
        mcp.extend(replace(m, inactive=_LOCKED) if locked and m.loosens else m for m in f.mcp)
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
                r = replace(r, inactive=_LOCKED)
            merged.append(r)
        if pins is None:
            why = (
                "a project may only take MCP read_only_tools/trust away unless "
                "$RINGFENCE_HOME/policy.toml lists it under [trust] projects"
            )
        for m in project_file.mcp:
            if m.loosens and (why or lock):
                m = replace(m, inactive=why or _LOCKED)
            mcp.append(m)
    merged.extend(kept)
    return PolicyLayers(
        Policy(tuple(merged), tuple(str(r) for r in roots)), McpPolicy(tuple(mcp)), project_file
    )


def accept_project_policy(root: str | os.PathLike[str]) -> tuple[int, str | None]:
    """Keep the project's policy file as it is now: the deny and ask rules it no longer holds
    stop binding later sessions. Returns (versions dropped, the file's sha256 or None when
    there is no file); PolicyFileError for a file that is not a valid policy file."""
    if not Path(root).is_dir():
        raise InvalidArguments(f"the workspace root {root} is not a directory", field="workspace")
    candidate = Path(root) / ".ringfence" / "policy.toml"
    raw = None
    if candidate.exists():
        raw = _read_policy_bytes(candidate, "project")
        parse_policy_file(candidate, raw, "project")
    try:
        dropped = accept_project_file(root, raw)
    except OSError as exc:
        directory = project_directory(root)
        raise PolicyFileError(
            f"{directory}: cannot record the project's policy ({exc.strerror or exc})",
            field=str(directory),
        ) from None
    return dropped, hashlib.sha256(raw).hexdigest() if raw is not None else None


def _kept(
    root: str | os.PathLike[str], path: Path, raw: bytes | None, current: PolicyFile | None
) -> tuple[Rule, ...]:
    """The project's deny/ask rules that earlier sessions loaded and the file no longer
    holds (:mod:`._kept`); records this version. PolicyFileError when that cannot be done."""

    def parse(where: Path, kept_raw: bytes) -> tuple[Rule, ...]:
        return parse_policy_file(where, kept_raw, "project").rules

    now = (raw, current.rules) if raw is not None and current is not None else None
    try:
        return kept_rules(root, path, now, parse).rules
    except OSError as exc:
        directory = project_directory(root)
        raise PolicyFileError(
            f"{directory}: the project's kept policy versions cannot be read or recorded "
            f"({exc.strerror or exc}); the next session would not keep this one's deny and ask "
            "rules, so this one does not start",
            field=str(directory),
        ) from None
    except PolicyFileError as exc:
        directory = project_directory(root)
        raise PolicyFileError(
            f"{directory}: a kept version of {path} is no longer a valid policy file "
            f"({exc}); `ringfence policy accept --workspace {root}` keeps the file as it is",
            field=str(directory),
        ) from None


def _refuse_inside_roots(path: Path, roots: Sequence[str | os.PathLike[str]]) -> None:
    """Raise PolicyFileError when the managed or a ``--policy`` file lies inside a workspace
    root (itself or a directory above its real path is a root, by device and inode): the
    session's tools could rewrite it, and the next session started with it would obey an
    agent's ``allow = ["*"]`` or ``[trust]``. A repository's own rules belong in its
    ``.ringfence/policy.toml``, which may only tighten unless the user trusts it."""
    identities: dict[tuple[int, int], str] = {}
    for root in roots:
        try:
            st = os.stat(root)
        except OSError:
            continue
        identities[(st.st_dev, st.st_ino)] = str(root)
    real = Path(os.path.realpath(path))
    for where in (real, *real.parents):
        try:
            st = os.stat(where)
        except OSError:
            continue
        root = identities.get((st.st_dev, st.st_ino))
        if root is not None:
            raise _fail(
                path,
                None,
                "file",
                f"lies inside the workspace root {root}, where the session's tools could "
                "rewrite it for the next session; keep it outside every root, or put the "
                "repository's rules in its .ringfence/policy.toml (deny and ask; allow only "
                "once the user trusts it)",
            )


def _lock(rules: Iterable[Rule], lock: bool) -> list[Rule]:
    return [replace(r, inactive=_LOCKED) if lock and r.effect is Effect.ALLOW else r for r in rules]


def _canonical(path: str | os.PathLike[str]) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except OSError:
        return str(Path(path).expanduser().absolute())
