"""A project's deny and ask rules outlive the agent: what a session loaded, the next keeps.

``<first root>/.ringfence/policy.toml`` is the workspace's, so an agent that may write the
workspace can delete its deny rules (a reversible ``write_file``, a shell command, a writable
MCP server, any writer at all), and the next session would load fewer. Guarding each writer
judges spellings; this judges the result instead: every version of the project file a session
loads is kept under ``$RINGFENCE_HOME/projects/<digest of the root's real path>/``, and a deny
or ask rule of a kept version that the file no longer holds stays in force, shown with where it
came from, until the person runs ``ringfence policy accept`` (which keeps the file as it is).

Only deny and ask rules are kept (they can only tighten); allow rules and MCP statements are
the file's as it stands. A kept version whose every deny and ask rule the file still holds is
dropped, so the directory holds the file's current version and the ones that still add rules.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .._files import atomic_write, ringfence_home
from ._rules import Effect, Rule

__all__ = ["KeptRules", "accept_project_file", "kept_rules", "project_directory"]

_KEPT_EFFECTS = (Effect.DENY, Effect.ASK)
# Versions kept per project; more means a file rewritten that often, each time dropping rules.
MAX_VERSIONS = 256


@dataclass(frozen=True)
class KeptRules:
    """The rules kept for a project and the directory they are kept in."""

    rules: tuple[Rule, ...]
    directory: Path


def project_directory(root: str | os.PathLike[str]) -> Path:
    """Where a project's loaded versions are kept: by the digest of its root's real path."""
    real = os.path.realpath(os.fspath(root))
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:32]
    return ringfence_home() / "projects" / digest


def _identity(rule: Rule) -> Rule:
    """The rule without where it was written (file and line differ between versions): two
    rules are the same when these are equal. Hashable, so a version's rules are looked up
    in a set: comparing each kept rule with every other (20,000 deny rules in one version,
    then any edit) held every later session's start for hours."""
    return replace(rule, source="", layer="", inactive="")


def _tightening(rules: Sequence[Rule]) -> list[Rule]:
    return [r for r in rules if r.effect in _KEPT_EFFECTS]


def _read_versions(directory: Path) -> list[tuple[Path, bytes]]:
    """The kept versions (``<sha256>.toml``), each read whole; raises OSError."""
    if not directory.is_dir():
        return []
    names = sorted(n for n in os.listdir(directory) if n.endswith(".toml"))
    if len(names) > MAX_VERSIONS:
        raise OSError(f"{directory} holds {len(names)} versions (the bound is {MAX_VERSIONS})")
    out: list[tuple[Path, bytes]] = []
    for name in names:
        path = directory / name
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{path} is not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                out.append((path, f.read(1 << 21)))
        finally:
            os.close(fd)
    return out


def kept_rules(
    root: str | os.PathLike[str],
    project_path: Path,
    current: tuple[bytes, Sequence[Rule]] | None,
    parse: Callable[[Path, bytes], Sequence[Rule]],
) -> KeptRules:
    """The deny/ask rules kept versions hold and the project file (``current``: its bytes and
    rules, or None when there is none) no longer does; records ``current`` as a kept version.

    ``parse(path, raw)`` reads a kept version's rules as the project file's. Raises OSError
    when the kept versions cannot be read or ``current`` cannot be recorded (the caller refuses
    the session: a version not recorded would not bind the next one).
    """
    directory = project_directory(root)
    real = os.path.realpath(os.fspath(root))
    versions = _read_versions(directory)
    now = {_identity(r) for r in (_tightening(current[1]) if current is not None else [])}
    kept: list[Rule] = []
    kept_identities: set[Rule] = set()
    contributing: set[Path] = set()
    for path, raw in versions:
        if current is not None and raw == current[0]:
            continue
        for rule in _tightening(parse(project_path, raw)):
            identity = _identity(rule)
            if identity in now:
                continue
            contributing.add(path)
            if identity not in kept_identities:
                kept_identities.add(identity)
                kept.append(
                    replace(
                        rule,
                        source=(
                            f"{rule.source}, removed from the file since a session loaded it; "
                            f"kept until `ringfence policy accept --workspace {real}`"
                        ),
                    )
                )
    if current is not None:
        digest = hashlib.sha256(current[0]).hexdigest()
        target = directory / f"{digest}.toml"
        if not any(path == target for path, _ in versions):
            atomic_write(target, current[0])
        for path, _ in versions:
            if path != target and path not in contributing:
                path.unlink(missing_ok=True)
    return KeptRules(tuple(kept), directory)


def accept_project_file(root: str | os.PathLike[str], current: bytes | None) -> int:
    """Keep only the project file as it is now (``None``: no file); the number of versions
    dropped. The person's way to take rules out of a project's policy for good."""
    directory = project_directory(root)
    versions = _read_versions(directory)
    target = None
    if current is not None:
        target = directory / f"{hashlib.sha256(current).hexdigest()}.toml"
        atomic_write(target, current)
    dropped = 0
    for path, _ in versions:
        if path != target:
            path.unlink(missing_ok=True)
            dropped += 1
    return dropped
