"""One added plugin, read and judged: its bundle, manifest, policy fragment, servers, skills, trust.

:func:`inspect_plugin` never raises for a plugin's own content: what cannot
be read or is invalid is the state's ``error`` (named file:line: key), and
such a plugin is not trusted. Trusted means exactly: it validates, and the
digest of the bundle read now is the one ``plugin trust`` pinned.

A plugin's ``[[server]]`` tables may not grant their own server anything either
(``autonomous_tools``, ``trust``, ``read_only_tools``, a request policy of
``allow``): refused like a loosening fragment.

A policy fragment may only tighten, by construction of what is accepted:
it is a policy file whose rules are all ``deny`` or ``ask`` (checked on the
parsed rules, whatever their spelling: the short lists and ``[[rules]]``
alike), with no ``[trust]``, ``lock_allow`` or ``[mcp.*]`` statements. Its
rules join the session as a rule source of their own (``plugin:<name>``),
and the decision function never lets a deny or ask rule of any source be
undone (deny > ask > allow).
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runtime._errors import InvalidArguments, RingfenceError
from ..runtime._skills import Skill
from ..runtime.policy._files import parse_policy_file
from ..runtime.policy._rules import Rule
from ._bundle import Bundle, read_bundle, resolve_inside
from ._config import PluginEntry
from ._manifest import PluginManifest, parse_plugin_manifest
from ._skills import read_skills

if TYPE_CHECKING:
    from ..mcp_host.manifest._load import ServerConfig

__all__ = [
    "PLUGIN_ROOT",
    "PluginState",
    "inspect_plugin",
    "locate_plugin",
    "server_access",
    "server_name",
]

# Written in a plugin's mcp.toml (command, args, cwd, env values): the session's copy of the bundle.
PLUGIN_ROOT = "${RINGFENCE_PLUGIN_ROOT}"
_MAX_SERVER_NAME = 63


def locate_plugin(entry: PluginEntry) -> Path:
    """The folder of ``entry``: its path, or the folder of the one ``ringfence-plugin.toml`` an
    installed distribution ships (found in its record of files; nothing of it is imported)."""
    if entry.path is not None:
        return Path(entry.path)
    from importlib import metadata

    from ._manifest import MANIFEST

    assert entry.package is not None
    try:
        dist = metadata.distribution(entry.package)
    except metadata.PackageNotFoundError:
        raise InvalidArguments(
            f"plugin {entry.name}: no installed distribution named {entry.package!r} "
            "(pip install it into the environment ringfence runs in, or add a folder)",
            field="package",
        ) from None
    found = [f for f in dist.files or () if f.name == MANIFEST]
    if len(found) != 1:
        raise InvalidArguments(
            f"plugin {entry.name}: the distribution {entry.package!r} ships "
            f"{len(found)} {MANIFEST} files; a plugin distribution ships exactly one",
            field="package",
        )
    return Path(os.path.dirname(dist.locate_file(found[0])))


def server_name(plugin: str, server: str) -> str:
    """The name a plugin's server is registered under: ``plugin-<plugin>-<server>``."""
    return f"plugin-{plugin}-{server}"


@dataclass(frozen=True)
class PluginState:
    """What an added plugin is now: readable and valid or not, trusted or not, and why."""

    entry: PluginEntry
    bundle: Bundle | None = None
    manifest: PluginManifest | None = None
    rules: tuple[Rule, ...] = ()
    servers: tuple[ServerConfig, ...] = ()
    skills: tuple[Skill, ...] = ()
    error: RingfenceError | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def trusted(self) -> bool:
        return (
            self.error is None
            and self.bundle is not None
            and self.entry.trusted_sha256 == self.bundle.sha256
        )

    @property
    def why(self) -> str:
        """Why it is trusted or not, in words an operator reads."""
        if self.error is not None:
            return f"it cannot be used: {self.error.message}"
        assert self.bundle is not None
        pinned = self.entry.trusted_sha256
        if pinned is None:
            return f"not trusted yet (review it: ringfence plugin show {self.name}; then ringfence plugin trust {self.name})"
        if pinned != self.bundle.sha256:
            return (
                f"changed since it was trusted (sha256 now {self.bundle.sha256}, trusted "
                f"{pinned}); review it again and ringfence plugin trust {self.name}"
            )
        return f"trusted (sha256 {pinned})"

    def servers_in(self, snapshot: Path) -> tuple[ServerConfig, ...]:
        """Its MCP servers with ``${RINGFENCE_PLUGIN_ROOT}`` read as ``snapshot``."""
        root = str(snapshot)

        def fill(text: str | None) -> str | None:
            return text.replace(PLUGIN_ROOT, root) if text is not None else None

        return tuple(
            dataclasses.replace(
                s,
                command=fill(s.command),
                args=tuple(a.replace(PLUGIN_ROOT, root) for a in s.args),
                cwd=fill(s.cwd),
                env={k: v.replace(PLUGIN_ROOT, root) for k, v in s.env.items()},
            )
            for s in self.servers
        )

    def to_dict(self, *, detail: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "source": self.entry.source,
            "trusted": self.trusted,
            "why": self.why,
            "sha256": self.bundle.sha256 if self.bundle is not None else None,
            "trusted_sha256": self.entry.trusted_sha256,
        }
        m = self.manifest
        if m is not None:
            out.update(version=m.version, description=m.description)
            out["hooks"] = [h.to_dict() for h in m.hooks]
            out["servers"] = [s.name for s in self.servers]
            out["skills"] = [s.name for s in self.skills]
            out["policy_rules"] = [r.to_dict() for r in self.rules]
            if detail:
                out["network"] = [h.name for h in m.hooks if h.network] + [
                    s.name for s in self.servers if s.sandbox_network or s.sandbox.value == "none"
                ]
                out["server_commands"] = {
                    s.name: [s.command or s.url or "", *s.args] for s in self.servers
                }
                out["server_access"] = {s.name: server_access(s) for s in self.servers}
        if self.error is not None:
            out["error"] = self.error.to_dict()
        return out


def server_access(server: ServerConfig) -> dict[str, Any]:
    """What a plugin's server takes from the operator, for the review: how it runs (``none``:
    unconfined, as the operator; ``local``: confined) and the operator's environment variables
    whose values it is handed (``inherit_env``, ``api_key_env``, ``headers_env``, the OAuth
    and identity-provider secrets): grants the plugin writes for itself, which a person
    trusting it must see."""
    names = [
        *server.inherit_env,
        *([server.api_key_env] if server.api_key_env else []),
        *server.headers_env.values(),
        *(
            name
            for name in (
                server.client_secret_env,
                server.client_key_env,
                server.idp_client_secret_env,
                server.idp_id_token_env,
            )
            if name
        ),
    ]
    remote = server.transport.value != "stdio"
    return {
        "sandbox": "remote" if remote else server.sandbox.value,
        "network": remote or server.sandbox.value == "none" or server.sandbox_network,
        "writable": not remote and (server.sandbox.value == "none" or server.sandbox_writable),
        "environment": list(dict.fromkeys(names)),
        # what it sets itself: a shown command's meaning changes with them (LD_PRELOAD, PYTHONPATH)
        "sets": dict(server.env),
        "cwd": server.cwd,
    }


def check_fragment(path: Path, raw: bytes, plugin: str) -> tuple[Rule, ...]:
    """The fragment's rules; InvalidArguments naming file:line unless every statement tightens."""
    parsed = parse_policy_file(path, raw, f"plugin:{plugin}")
    for rule in parsed.rules:
        if rule.effect.value not in ("deny", "ask"):
            raise InvalidArguments(
                f"{rule.source}: {rule.text or rule.tool}: a plugin's policy fragment can only "
                f"tighten (deny and ask rules); this {rule.effect.value} rule would loosen it, "
                "and the fragment is refused",
                field="policy",
            )
    for what, present in (
        ("[trust]", bool(parsed.trusted_projects)),
        ("lock_allow", parsed.lock_allow),
        ("[mcp.*]", bool(parsed.mcp)),
    ):
        if present:
            raise InvalidArguments(
                f"{path}: {what}: a plugin's policy fragment holds deny and ask rules only",
                field="policy",
            )
    return tuple(parsed.rules)


def _self_grants(server: ServerConfig) -> list[str]:
    """The keys of a plugin's ``[[server]]`` that would loosen the Gate for its own server.

    ``autonomous_tools`` (its tools run unasked), ``trust``/``read_only_tools`` (the
    manifest's old grants: ``read`` tools run unasked and in a dry run), a request policy
    of ``allow`` (its sampling or elicitation requests run unasked): what a policy fragment
    is refused for, said in the other file. The operator grants them in their own policy
    (``[mcp.plugin-<plugin>-<server>]``, ``--allow``), where they are theirs.
    """
    from ..mcp_host.manifest._config import Trust
    from ..runtime.policy._rules import Effect

    grants = []
    if server.autonomous_tools:
        grants.append("autonomous_tools")
    if server.trust is not Trust.UNTRUSTED:
        grants.append("trust")
    if server.read_only_tools:
        grants.append("read_only_tools")
    for key in ("sampling_policy", "elicitation_policy"):
        if getattr(server, key) is Effect.ALLOW:
            grants.append(key)
    return grants


def _servers(bundle: Bundle, rel: str, plugin: str) -> tuple[ServerConfig, ...]:
    from ..mcp_host.manifest._load import parse_manifest

    manifest = parse_manifest(bundle.text(rel), str(bundle.root / rel))
    out = []
    for s in manifest.servers:
        grants = _self_grants(s)
        if grants:
            raise InvalidArguments(
                f"{s.origin or bundle.root / rel}: {', '.join(grants)}: a plugin's server "
                "cannot grant itself what the Gate would otherwise ask or refuse (tools run "
                "unasked, as reads, or its requests unasked), as its policy fragment cannot; "
                "the plugin is refused. The operator grants that in their own policy "
                f"([mcp.{server_name(plugin, s.name)}] read_only_tools, --allow)",
                field="mcp",
            )
        name = server_name(plugin, s.name)
        if len(name) > _MAX_SERVER_NAME:
            raise InvalidArguments(
                f"{s.origin}: name: {name!r} (the server's name with its plugin's) is longer "
                f"than {_MAX_SERVER_NAME} characters",
                field="name",
            )
        out.append(dataclasses.replace(s, name=name))
    return tuple(out)


# An absolute path inside a command's string: at its start or after a separator a shell or an
# option uses (`--config=/x`, `PATH=/a:/b`, `sh -c "python3 /x"`), up to the next one.
_ABSOLUTE = re.compile(r"""(?:^|(?<=[\s"'=:,;(]))(/[^\s"'=:,;)]*)""")
_WORKSPACE_VAR = re.compile(r"\$\{?WORKSPACE\}?")


def _spellings(path: str) -> set[str]:
    """``path`` as written (normalized) and resolved (every link on the way followed)."""
    return {os.path.normpath(path), os.path.realpath(path)}


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_live_paths(
    plugin: str,
    manifest: PluginManifest,
    servers: Sequence[ServerConfig],
    source: str | os.PathLike[str],
    roots: Sequence[str | os.PathLike[str]] = (),
) -> None:
    """Refuse a hook or server that names a file of its plugin's ``source`` folder, or of a
    workspace root, by absolute path.

    A trusted plugin runs from the session's copy of the bytes its digest covers. A command
    that names the plugin's source folder by absolute path (``python3 /src/guard/check.py``)
    runs the live file instead, and a workspace root's files (``roots``, at session start;
    also spelled ``$WORKSPACE/...``) are the agent's to rewrite: either way what runs can
    change after trust, mid-session, without a new review. Every string of a hook's command
    and of a server's command, args, cwd and env values is read for absolute paths; one in
    the source folder, one below a root, or a ``cwd`` in or above either is refused, naming
    it. A root itself may be named (a server given the workspace to serve).
    """
    sources = _spellings(os.path.abspath(os.fspath(source)))
    tops = {b for r in roots for b in _spellings(os.path.abspath(os.fspath(r)))}
    workspace = os.fspath(roots[0]) if roots else None

    def strings() -> Iterable[tuple[str, str, bool]]:
        for hook in manifest.hooks:
            for text in hook.command:
                yield f"hook {hook.name}: command", text, False
        for server in servers:
            where = f"server {server.name}"
            for text in (server.command, *server.args):
                if text is not None:
                    yield f"{where}: command", text, False
            if server.cwd is not None:
                yield f"{where}: cwd", server.cwd, True
            for key, text in server.env.items():
                yield f"{where}: env {key}", text, False

    def live(seen: str, is_cwd: bool) -> str | None:
        for base in sources | tops:
            inside = _within(seen, base) and (seen != base or base in sources)
            if inside or (is_cwd and seen != "/" and (_within(base, seen) or seen == base)):
                return base
        return None

    for where, text, is_cwd in strings():
        spelled = [m.group(1) for m in _ABSOLUTE.finditer(text)]
        if workspace is not None and _WORKSPACE_VAR.search(text):
            spelled += [m.group(1) for m in _ABSOLUTE.finditer(_WORKSPACE_VAR.sub(workspace, text))]
        for path in spelled:
            for seen in _spellings(path):
                base = live(seen, is_cwd)
                if base is not None:
                    raise InvalidArguments(
                        f"plugin {plugin}: {where}: {text!r} names {path} in {base}, whose files "
                        "can change after the plugin was trusted (the plugin's own folder, "
                        "which a session never runs from, or a workspace root); name the "
                        "plugin's files relative to its folder (${RINGFENCE_PLUGIN_ROOT}/..., "
                        "or a relative program path): a session runs them from its copy of "
                        "the bytes that were trusted",
                        field="command",
                        plugin=plugin,
                    )


_IN_ROOT = re.compile(re.escape(PLUGIN_ROOT) + r"""([^\s"'=:,;)]*)""")


def check_copy_paths(plugin: str, servers: Sequence[ServerConfig], bundle: Bundle) -> None:
    """Refuse a server string naming ``${RINGFENCE_PLUGIN_ROOT}/...`` that reads as a path in
    the plugin but leads out of it once the kernel follows its links.

    ``${RINGFENCE_PLUGIN_ROOT}/d/up/../x``, ``d/up`` a link to the plugin's root, reads (as
    ``normpath`` and a reviewer read it) as the plugin's ``d/x``, hashed and reviewed; the
    kernel resolves it from the copy's root upward, to a file the digest never covered
    (the host's, the workspace's), which a ``sandbox = "none"`` server then ran as the user.
    """
    for server in servers:
        texts = [server.command, *server.args, server.cwd, *server.env.values()]
        cwd = _IN_ROOT.fullmatch(server.cwd or "")
        for text in texts:
            rels = [m.group(1).lstrip("/") for m in _IN_ROOT.finditer(text or "")]
            relative = text is not None and "/" in text and not text.startswith(("/", "-", "$"))
            if cwd is not None and relative and text in (server.command, *server.args):
                # a relative path the program opens from its working directory, in the copy
                rels.append(posixpath.join(cwd.group(1).lstrip("/"), text))
            for rel in rels:
                norm = posixpath.normpath(rel) if rel else "."
                if norm == ".." or norm.startswith("../"):
                    continue  # it says it leaves: the review reads that
                if rel and resolve_inside(rel, bundle.entries) is None:
                    raise InvalidArguments(
                        f"plugin {plugin}: server {server.name}: {text!r} leads outside the "
                        "plugin once its links are followed (the review reads a file of the "
                        "plugin; the kernel would open another)",
                        field="command",
                        plugin=plugin,
                    )


def inspect_plugin(entry: PluginEntry) -> PluginState:
    """Read and judge ``entry`` now (blocking: reads its whole bundle)."""
    try:
        bundle = read_bundle(locate_plugin(entry))
    except RingfenceError as exc:
        return PluginState(entry, error=exc)
    try:
        manifest = parse_plugin_manifest(bundle)
        if manifest.name != entry.name:
            raise InvalidArguments(
                f"{bundle.root}: the manifest names the plugin {manifest.name!r}, but it was "
                f"added as {entry.name!r}",
                field="name",
            )
        rules: tuple[Rule, ...] = ()
        if manifest.policy is not None:
            data = bundle.entries[manifest.policy].data
            rules = check_fragment(bundle.root / manifest.policy, data, entry.name)
        servers = _servers(bundle, manifest.mcp, entry.name) if manifest.mcp else ()
        check_live_paths(entry.name, manifest, servers, bundle.root)
        check_copy_paths(entry.name, servers, bundle)
        skills = read_skills(bundle, manifest.skills, entry.name) if manifest.skills else ()
    except RingfenceError as exc:
        return PluginState(entry, bundle, error=exc)
    return PluginState(entry, bundle, manifest, rules, servers, skills)


def inspect_all(entries: Sequence[PluginEntry]) -> list[PluginState]:
    return [inspect_plugin(e) for e in entries]
