"""The added plugins joined to one session: what each contributes, by whether it is trusted.

Every added plugin, trusted or not:

- must read and validate whole, or the session is refused naming the
  plugin and the file:line (fail closed: a guard that cannot be read is not
  silently dropped);
- if it was trusted, must still be what was trusted: a plugin changed since
  (its digest is not the pinned one) refuses the session (``denied``), since
  neither its hooks nor the rules that were reviewed can be applied (the
  changed fragment may have dropped some); ``plugin trust`` again, or remove it;
- contributes its policy fragment's deny and ask rules (rule source
  ``plugin:<name>``): they can only tighten, so they need no trust.

A trusted plugin (its bundle's digest is the pinned one) also contributes
its command hooks (run confined, see ``_command``), its skills and its MCP
servers (``plugin-<plugin>-<server>``, connected with the session's own
servers). It runs from a copy of exactly the bytes that were hashed, made
in the session's spool directory and removed when the session closes.

A plugin added and never trusted runs nothing and offers nothing; each of
its ``pre_call`` hooks is replaced by a stand-in that refuses the calls the
hook would have seen, naming how to trust it: a guard that is not trusted
yet does not silently let through what it was added to check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..runtime._errors import Denied, InvalidArguments
from ..runtime._hooks import Hook, HookAnswer
from ..runtime._kernel import Kernel
from ..runtime._programs import program_outside_roots, search_path
from ..runtime.policy._decide import Rules
from ..runtime.policy._judge import Policy
from ._command import CommandRunner
from ._config import PluginEntry, load_entries
from ._plugin import PluginState, check_live_paths, inspect_plugin

if TYPE_CHECKING:
    from ..mcp_host.manifest._load import ServerConfig

__all__ = ["Snapshot", "attach_plugins"]


class Snapshot:
    """The session's copy of one trusted plugin: written once, from the bytes that were hashed."""

    def __init__(self, kernel: Kernel, state: PluginState) -> None:
        assert state.bundle is not None
        self._bundle = state.bundle
        self.path = kernel.spool_dir / "plugins" / state.name
        self._written = False
        self._lock = trio.Lock()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._bundle.write(self.path)

    async def ensure(self) -> Path:
        """The copy's folder, written on first use (in a worker thread)."""
        if not self._written:
            async with self._lock:
                if not self._written:
                    await trio.to_thread.run_sync(self._write)
                    self._written = True
        return self.path

    def remove(self) -> None:
        """Remove the copy, and the directories above it this session made, if empty."""
        if self._written:
            with contextlib.suppress(OSError):
                for dirpath, dirnames, _ in os.walk(self.path):  # its files are read-only
                    for d in dirnames:  # a link to a directory is listed too: never followed
                        with contextlib.suppress(OSError):
                            fd = os.open(
                                os.path.join(dirpath, d),
                                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                            )
                            try:
                                os.fchmod(fd, 0o700)
                            finally:
                                os.close(fd)
                shutil.rmtree(self.path)
        # plugins/, the session's spool directory and the spool (the session's release ran
        # first and left them, not empty then)
        for empty in (self.path.parent, self.path.parent.parent, self.path.parent.parent.parent):
            try:
                os.rmdir(empty)
            except OSError:
                break


def _withheld(plugin: str, hook: str, why: str) -> Any:
    async def run(event: Mapping[str, Any]) -> HookAnswer:
        return HookAnswer.deny(
            f"the plugin {plugin} is not trusted, so its pre_call hook {hook} cannot run and "
            f"the calls it checks are refused: {why}"
        )

    return run


def _runnable(plugin: str, server: ServerConfig, roots: Sequence[str]) -> ServerConfig:
    """``server`` with its program as it will run, outside every workspace root.

    A bare name is looked up on the operator's ``PATH`` without its workspace entries, a
    relative one from where it will start; and unless the plugin sets ``PATH`` itself, the
    server gets that ``PATH`` too (:mod:`ringfence.runtime._programs`: an activated project
    venv let the agent plant the ``python3`` a trusted server ran, unconfined). Raises
    Unavailable naming it.
    """
    if not server.command:  # a remote server: nothing runs here
        return server
    path = os.environ.get("PATH", os.defpath)
    command = server.command
    if "/" in command and not os.path.isabs(command):
        command = os.path.join(server.cwd or os.getcwd(), command)
    env = {"PATH": search_path(path, roots), **server.env}
    if "/" not in command and shutil.which(command, path=env["PATH"]) is None:
        # Not there: it fails to start, as it did (the server is looked up on that PATH).
        return dataclasses.replace(server, env=env)
    what = f"plugin {plugin}'s server {server.name}"
    command = program_outside_roots(command, roots, path, what)
    return dataclasses.replace(server, command=command, env=env)


def attach_plugins(
    kernel: Kernel,
    *,
    roots: Sequence[str],
    rule_roots: Sequence[str] = (),
    entries: Sequence[PluginEntry] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> list[ServerConfig]:
    """Join the added plugins to ``kernel``; the trusted ones' MCP servers, to connect.

    ``entries`` (default: ``config``, else ``$RINGFENCE_HOME/plugins.toml``).
    ``roots``: the workspace roots (read-only to hooks); ``rule_roots``: the
    spellings path rules are relative to (default ``roots``). Blocking:
    reads every bundle. Raises InvalidArguments naming a plugin that cannot
    be read or does not validate (nothing is attached then).
    """
    if entries is None:
        entries = load_entries(config)
    states = [inspect_plugin(e) for e in entries]
    for state in states:
        if state.error is not None:
            raise InvalidArguments(
                f"plugin {state.name} ({state.entry.source}): {state.error.message}; fix it, or "
                f"ringfence plugin remove {state.name}",
                field="plugin",
                plugin=state.name,
            )
        if state.entry.trusted_sha256 is not None and not state.trusted:
            raise Denied(
                f"plugin {state.name} ({state.entry.source}) {state.why}; no session starts "
                "with it, since neither its hooks nor the rules that were trusted can be "
                f"applied (or ringfence plugin remove {state.name})",
                rule="plugin-trust",
                plugin=state.name,
            )
        if state.trusted:  # what it runs must not be a file the agent can rewrite
            assert state.manifest is not None and state.bundle is not None
            check_live_paths(state.name, state.manifest, state.servers, state.bundle.root, roots)
    servers: list[ServerConfig] = []
    snapshots: list[Snapshot] = []
    for state in states:
        name = state.name
        manifest = state.manifest
        assert manifest is not None and state.bundle is not None
        if state.rules:
            policy = Policy(state.rules).with_roots(rule_roots or roots)
            kernel.add_rules(f"plugin:{name}", Rules(policy=policy))
        record: dict[str, Any] = {
            "plugin": name,
            "version": manifest.version,
            "sha256": state.bundle.sha256,
            "trusted": state.trusted,
            "policy_rules": len(state.rules),
        }
        if not state.trusted:
            record["why"] = state.why
            kernel.events.emit("plugin_loaded", kernel.session_id, **record)
            for h in manifest.hooks:
                if "pre_call" in h.points:
                    kernel.add_hook(
                        Hook(
                            f"{name}/{h.name}",
                            _withheld(name, h.name, state.why),
                            ("pre_call",),
                            h.match,
                            h.timeout_seconds,
                            kind="withheld",
                            plugin=name,
                            details={"why": state.why},
                        )
                    )
            continue
        snapshot = Snapshot(kernel, state)
        snapshots.append(snapshot)
        record["servers"] = [s.name for s in state.servers]
        record["skills"] = [s.name for s in state.skills]
        kernel.events.emit("plugin_loaded", kernel.session_id, **record)
        for h in manifest.hooks:
            kernel.add_hook(
                Hook(
                    f"{name}/{h.name}",
                    CommandRunner(h, snapshot, roots),
                    h.points,
                    h.match,
                    h.timeout_seconds,
                    kind="command",
                    plugin=name,
                    details={"command": list(h.command), "network": h.network},
                )
            )
        for skill in state.skills:
            kernel.add_skill(skill)
        servers.extend(_runnable(name, s, roots) for s in state.servers_in(snapshot.path))
    if snapshots:

        async def remove() -> None:
            for snapshot in snapshots:
                await trio.to_thread.run_sync(snapshot.remove)

        kernel.push_async_callback(remove)

        async def write(k: Kernel) -> None:  # before the servers connect and session_start
            for snapshot in snapshots:
                await snapshot.ensure()

        kernel.add_startup(write)
    return servers
