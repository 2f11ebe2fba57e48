"""``ringfence-plugin.toml``: what a plugin is and what it contributes, validated whole.

::

    name = "guard"                 # [a-z0-9][a-z0-9_-]*, at most 24 characters
    version = "1.0.0"
    description = "Refuses rm in run_shell"
    policy = "policy.toml"         # optional: deny/ask rules (a policy file that only tightens)
    mcp = "mcp.toml"               # optional: MCP servers ([[server]] tables, as in mcp.toml)
    skills = "skills"              # optional: a folder of SKILL.md folders

    [[hook]]
    name = "no-rm"
    points = ["pre_call"]          # pre_call, post_call, session_start, session_end
    match = ["run_shell(rm *)"]    # optional: rule patterns (the policy's syntax); none: every call
    command = ["python3", "hooks/no_rm.py"]   # run confined, in the plugin's folder
    timeout_seconds = 5            # optional, default 10, at most 300
    network = false                # optional: the hook's sandbox gets the network

Every error names the file, the line and the key; nothing of a manifest
that does not validate is used.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime._errors import InvalidArguments
from ..runtime._hooks import HOOK_POINTS, Hook
from ._bundle import Bundle, resolve_inside

__all__ = ["MANIFEST", "HookConfig", "PluginManifest", "parse_plugin_manifest"]

MANIFEST = "ringfence-plugin.toml"
PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,23}\Z")
_HOOK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_TOP = {"name", "version", "description", "policy", "mcp", "skills", "hook"}
_HOOK = {"name", "points", "match", "command", "timeout_seconds", "network"}


@dataclass(frozen=True)
class HookConfig:
    """One ``[[hook]]``: a command the plugin's trust lets run, confined."""

    name: str
    points: tuple[str, ...]
    command: tuple[str, ...]
    match: tuple[str, ...] = ()
    timeout_seconds: float = 10.0
    network: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "points": list(self.points),
            "match": list(self.match),
            "command": list(self.command),
            "timeout_seconds": self.timeout_seconds,
            "network": self.network,
        }


@dataclass(frozen=True)
class PluginManifest:
    """A validated ``ringfence-plugin.toml``."""

    name: str
    version: str
    description: str = ""
    policy: str | None = None
    mcp: str | None = None
    skills: str | None = None
    hooks: tuple[HookConfig, ...] = ()


def parse_plugin_manifest(bundle: Bundle) -> PluginManifest:
    """The bundle's manifest, validated; InvalidArguments naming ``file:line: key`` otherwise."""
    import tomllib

    from ..runtime._tomllines import line_of, load_toml, toml_error_line, toml_key_lines

    path = bundle.root / MANIFEST
    if MANIFEST not in bundle.entries:
        raise InvalidArguments(
            f"{bundle.root}: not a ringfence plugin (no {MANIFEST} in it)", field="path"
        )
    text = bundle.text(MANIFEST)
    try:
        data = load_toml(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = toml_error_line(exc)
        raise _fail(path, line, "toml", message) from None
    lines = toml_key_lines(text)

    def bad(where: tuple[str | int, ...], message: str) -> InvalidArguments:
        return _fail(path, line_of(lines, where), ".".join(map(str, where)), message)

    for key in data:
        if key not in _TOP:
            raise bad((key,), f"unknown key (a plugin manifest has {', '.join(sorted(_TOP))})")
    name = data.get("name")
    if not isinstance(name, str) or not PLUGIN_NAME.match(name):
        raise bad(("name",), "must be 1-24 characters of a-z, 0-9, _ and -, starting a-z or 0-9")
    version = data.get("version")
    if not isinstance(version, str) or not version or len(version) > 64:
        raise bad(("version",), "must be a non-empty string (at most 64 characters)")
    description = data.get("description", "")
    if not isinstance(description, str) or len(description) > 1000:
        raise bad(("description",), "must be a string of at most 1000 characters")
    parts: dict[str, str | None] = {}
    for key, kind in (("policy", "file"), ("mcp", "file"), ("skills", "dir")):
        value = data.get(key)
        if value is None:
            parts[key] = None
            continue
        if not isinstance(value, str) or not _inside(value):
            raise bad((key,), "must be a path relative to the plugin's folder, inside it")
        rel = posixpath.normpath(value)
        entry = bundle.entries.get(rel)
        if entry is None or entry.kind != kind:
            raise bad(
                (key,), f"{rel!r} is not a {'file' if kind == 'file' else 'folder'} of the plugin"
            )
        parts[key] = rel
    tables = data.get("hook", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise bad(("hook",), "hooks are [[hook]] tables")
    hooks: list[HookConfig] = []
    for index, table in enumerate(tables):
        hooks.append(_hook(table, index, bundle, bad))
        if [h.name for h in hooks].count(hooks[-1].name) > 1:
            raise bad(("hook", index, "name"), f"a second hook named {hooks[-1].name!r}")
    return PluginManifest(
        name, version, description, parts["policy"], parts["mcp"], parts["skills"], tuple(hooks)
    )


def _hook(table: dict[str, Any], index: int, bundle: Bundle, bad: Any) -> HookConfig:
    for key in table:
        if key not in _HOOK:
            raise bad(("hook", index, key), f"unknown key (a hook has {', '.join(sorted(_HOOK))})")
    name = table.get("name")
    if not isinstance(name, str) or not _HOOK_NAME.match(name):
        raise bad(("hook", index, "name"), "every [[hook]] needs a name ([A-Za-z0-9_.-], 1-64)")
    points = table.get("points")
    if (
        not isinstance(points, list)
        or not points
        or not all(isinstance(p, str) and p in HOOK_POINTS for p in points)
    ):
        raise bad(("hook", index, "points"), f"must be a list of some of {', '.join(HOOK_POINTS)}")
    match = table.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) for m in match):
        raise bad(("hook", index, "match"), 'must be a list of rule patterns ("run_shell(rm *)")')
    command = table.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(c, str) and c and "\0" not in c for c in command)
    ):
        raise bad(("hook", index, "command"), "must be a non-empty list of non-empty strings")
    program = command[0]
    if "/" in program and not program.startswith("/"):
        # Resolved as the kernel will resolve it in the copy (links followed where they
        # stand), not by its spelling: `d/up/../x` with `d/up` a link to the root is the
        # folder above's `x` (normpath said `d/x`, a file of the plugin, and the host's
        # program of that name ran in place of the reviewed one).
        resolved = resolve_inside(program, bundle.entries)
        entry = bundle.entries.get(resolved) if resolved is not None else None
        if not _inside(program) or entry is None or entry.kind != "file":
            raise bad(("hook", index, "command"), f"{program!r} is not a file of the plugin")
    for arg in command[1:]:
        # An argument spelled as a path inside the plugin (`hooks/../check.py`, which the
        # hook opens from the copy, its working directory) must be one there for the
        # kernel too: through a link to the root, `..` climbs out of the copy to a file
        # the digest never covered, while the review reads the plugin's own file.
        if "/" in arg and _inside(arg) and resolve_inside(arg, bundle.entries) is None:
            raise bad(
                ("hook", index, "command"),
                f"{arg!r} leads outside the plugin once its links are followed",
            )
    timeout = table.get("timeout_seconds", 10.0)
    network = table.get("network", False)
    if not isinstance(network, bool):
        raise bad(("hook", index, "network"), "must be true or false")
    try:  # the runtime's own checks: the patterns parse, the timeout is in range
        Hook(name, _never, tuple(points), tuple(match), timeout)
    except InvalidArguments as exc:
        key = exc.field or "match"
        raise bad(("hook", index, key), exc.message.split(": ", 1)[-1]) from None
    return HookConfig(name, tuple(points), tuple(command), tuple(match), float(timeout), network)


async def _never(event: Any) -> None:  # validation only: never run
    raise AssertionError("a hook made to validate a manifest is never run")


def _inside(rel: str) -> bool:
    if not rel or rel.startswith("/") or "\0" in rel:
        return False
    norm = posixpath.normpath(rel)
    return norm != "." and norm != ".." and not norm.startswith("../")


def _fail(path: Path, line: int | None, key: str, message: str) -> InvalidArguments:
    where = f"{path}:{line}" if line else str(path)
    return InvalidArguments(f"{where}: {key}: {message}", field=key, file=str(path), line=line)
