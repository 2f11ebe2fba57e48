"""The MCP manifest: ``mcp.toml``, hand-editable, validated whole or not at all.

Where: ``$RINGFENCE_HOME/mcp.toml`` (``~/.ringfence/mcp.toml``), plus an
optional workspace-level ``<workspace>/.ringfence/mcp.toml``. A workspace file
starts processes just like the user file, so it is read only when the host asks
for it (``load_manifests(workspace=...)``), and a server name defined in both is
an error rather than a silent override. The workspace file is the repository's
(a clone, or an agent's ``write_file``, can put it there), so its servers start
only when a policy file outside the workspace (``$RINGFENCE_HOME/policy.toml``,
the managed one) lists the project under ``[trust] projects`` pinned to the
manifest's content (``mcp_sha256``: an agent in a trusted project can write the
file); otherwise they are loaded disabled, with a warning naming the entry to add.

Format::

    tool_discovery = false            # optional, top level, before any [[server]]

    [[server]]
    name = "files"
    transport = "stdio"               # stdio | http | sse
    command = "/usr/local/bin/mcp-server-filesystem"
    args = ["$WORKSPACE"]
    inherit_env = ["GITHUB_TOKEN"]    # names only; values come from the environment
    approved_capabilities = ["tools", "prompts"]
    max_message_bytes = 33554432      # inbound JSON-RPC message cap (default 32 MiB)
    sandbox = "local"                 # stdio: run the process confined (default "none")
    sandbox_writable = false          # with sandbox = "local": the workspace stays read-only
    sandbox_network = false           # with sandbox = "local": no network

    [server.env]                      # literal, non-secret values only
    LOG_LEVEL = "info"

Contract:

- :func:`load_manifest` returns a fully validated :class:`Manifest` or raises
  :class:`~ringfence.runtime.InvalidArguments` whose message names the file, the
  line and the key (``field`` is the key). Nothing is ever half-loaded.
- Unknown keys are errors (a typo must not silently drop a deny list).
- Which tools are ``read`` and whether a server is trusted is policy: the
  policy files' ``[mcp.<server>]`` tables say so (``runtime._mcppolicy``). The
  manifest's old keys (``read_only_tools``/``read_tools``, ``trust``) are
  still read for one release, each with a warning in ``Manifest.warnings``
  naming the new place.
- Secrets never live in the file: ``env`` refuses credential-named variables
  (``*_TOKEN``, ``*_KEY``, …); name them in ``inherit_env``, ``api_key_env`` or
  ``headers_env`` and they are resolved when the server is connected.
- ``$WORKSPACE`` in ``command``, ``args``, ``cwd``, ``env`` values and ``roots`` is
  expanded by :meth:`ServerConfig.expanded`, at connect time.
- :func:`save_server` and :func:`remove_server` (:mod:`._edit`) edit
  the file's text in place (other servers, comments and layout are kept),
  check that the result still loads, and replace the file atomically.

The format is declared in :mod:`._model` (a pydantic model), the
values are in :mod:`._config`; this module reads files and re-exports
the names the rest of ``mcp_host`` and the CLI import from it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ...runtime._errors import InvalidArguments
from ...runtime._files import ringfence_home
from ...runtime.policy._files import load_policy_file, managed_policy_path
from ._config import (
    DEFAULT_APPROVED,
    KNOWN_CAPABILITIES,
    AuthMode,
    Manifest,
    Policy,
    Sandbox,
    ServerConfig,
    Transport,
    Trust,
    iter_enabled,
    manifest_bytes as _manifest_bytes,
    manifest_path,
    sanitize_part,
    workspace_manifest_path,
)

__all__ = [
    "DEFAULT_APPROVED",
    "KNOWN_CAPABILITIES",
    "AuthMode",
    "Manifest",
    "Policy",
    "Sandbox",
    "ServerConfig",
    "Transport",
    "Trust",
    "iter_enabled",
    "load_manifest",
    "load_manifests",
    "manifest_path",
    "parse_manifest",
    "remove_server",
    "render_server",
    "sanitize_part",
    "save_server",
    "workspace_manifest_path",
]


def parse_manifest(
    text: str, path: str = "<mcp.toml>", *, secret_names: Sequence[str] = ()
) -> Manifest:
    """Validate manifest text. Raises InvalidArguments naming ``path``, the line and the key.

    ``secret_names``: more credential-name globs an ``env`` entry may not match.
    """
    from ._model import parse_manifest as parse  # pydantic loads only when a file is read

    return parse(text, path, secret_names=secret_names)


def save_server(
    config: ServerConfig,
    path: str | os.PathLike[str] | None = None,
    *,
    secret_names: Sequence[str] = (),
) -> Manifest:
    """Add ``config`` to the manifest, replacing a server of the same name in place."""
    from ._edit import save_server as save

    return save(config, path, secret_names=secret_names)


def remove_server(
    name: str, path: str | os.PathLike[str] | None = None, *, secret_names: Sequence[str] = ()
) -> Manifest:
    """Remove the server ``name``; InvalidArguments naming it if it is not there."""
    from ._edit import remove_server as remove

    return remove(name, path, secret_names=secret_names)


def render_server(config: ServerConfig) -> str:
    """One ``[[server]]`` block as ``save_server`` writes it."""
    from ._edit import render_server as render

    return render(config)


def load_manifest(
    path: str | os.PathLike[str] | None = None, *, secret_names: Sequence[str] = ()
) -> Manifest:
    """Load one manifest file; a missing file is an empty manifest."""
    p = Path(path) if path is not None else manifest_path()
    raw = _manifest_bytes(p)
    if raw is None:
        return Manifest(paths=(p,))
    return _parse_bytes(raw, p, secret_names)


def _parse_bytes(raw: bytes, p: Path, secret_names: Sequence[str]) -> Manifest:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArguments(f"{p}: not UTF-8 text", field="toml", file=str(p)) from None
    return parse_manifest(text, str(p), secret_names=secret_names)


def load_manifests(
    workspace: str | os.PathLike[str] | None = None,
    user_path: str | os.PathLike[str] | None = None,
    *,
    secret_names: Sequence[str] = (),
) -> Manifest:
    """The user manifest, plus ``<workspace>/.ringfence/mcp.toml`` when a workspace is given.

    A server name present in both is an error (neither file silently overrides the other),
    and so are two names that register as the same ``mcp.<part>.*``. The workspace's servers
    are disabled (with a warning) unless a trust entry pins its content
    (:func:`_untrusted_manifest`).
    """
    user = load_manifest(user_path, secret_names=secret_names)
    if workspace is None:
        return user
    wpath = workspace_manifest_path(workspace)
    raw = _manifest_bytes(wpath)
    if raw is None:
        return user
    # One read: the servers started are those of the bytes whose digest was compared.
    ws = _parse_bytes(raw, wpath, secret_names)
    warnings = ws.warnings
    refusal = _untrusted_manifest(workspace, wpath, hashlib.sha256(raw).hexdigest())
    if refusal is not None:
        # The repository's file: shown (mcp list), never started, until the person pins it.
        ws = replace(ws, servers=tuple(replace(s, enabled=False) for s in ws.servers))
        warnings += (refusal,)
    # By registered part, not spelling: "Notes" would register its tools as mcp.notes.*, beside
    # (and under the rules and grants of) the user's "notes".
    parts = {s.part: s for s in user.servers}
    for s in ws.servers:
        if (other := parts.get(s.part)) is None:
            continue
        if other.name == s.name:
            message = f"server {s.name!r} is also defined at {other.origin}"
        else:
            message = (
                f"server {s.name!r} would register as mcp.{s.part}.*, as {other.name!r} "
                f"({other.origin}) does"
            )
        raise InvalidArguments(f"{s.origin}: {message}; rename one of them", field="name")
    return Manifest(
        user.servers + ws.servers,
        user.tool_discovery or ws.tool_discovery,
        user.paths + ws.paths,
        user.warnings + warnings,
    )


def workspace_manifest_refusal(workspace: str | os.PathLike[str]) -> str | None:
    """Why ``workspace``'s manifest may not start its servers, as its warning says it (None:
    it may, or there is none)."""
    wpath = workspace_manifest_path(workspace)
    raw = _manifest_bytes(wpath)
    if raw is None:
        return None
    return _untrusted_manifest(workspace, wpath, hashlib.sha256(raw).hexdigest())


def _untrusted_manifest(workspace: str | os.PathLike[str], wpath: Path, digest: str) -> str | None:
    """Why the workspace manifest with sha256 ``digest`` may not start its servers (None: it
    may). A policy file outside the workspace (the managed one, the user's) must list the
    project under ``[trust] projects`` pinned to this content (``mcp_sha256``): the file is
    the repository's, and an agent working in a trusted project could otherwise add a
    server whose command the host runs at the next session. A bad policy file raises its
    error (naming file, line and key), as a session would."""
    want = _canonical(workspace)
    listed = False
    pins: set[str] = set()
    for path, layer in (
        (managed_policy_path(), "managed"),
        (ringfence_home() / "policy.toml", "user"),
    ):
        if not path.exists():
            continue
        loaded = load_policy_file(path, layer)
        listed |= any(_canonical(where) == want for where, _ in loaded.trusted_projects)
        pins |= {pin for where, pin in loaded.trusted_manifests if _canonical(where) == want}
    user_file = ringfence_home() / "policy.toml"
    entry = f'{{ path = {json.dumps(want)}, mcp_sha256 = "{digest}" }}'  # TOML takes JSON's escapes
    if digest in pins:
        return None
    if pins:
        return (
            f"{wpath}: its servers are not started: it changed since the project was trusted "
            f"(sha256 now {digest}, pinned {', '.join(sorted(pins))}); read it again, then pin "
            f"this content in {user_file} under [trust] projects: {entry}"
        )
    why = (
        "a workspace manifest is the repository's (an agent can write it) and starts "
        "processes, so its servers start only when pinned to the content you read"
    )
    if listed:
        return (
            f"{wpath}: its servers are not started: the project is trusted by path but its "
            f"manifest is not pinned ({why}); read it, then write the entry in {user_file} "
            f"under [trust] projects as {entry}"
        )
    return (
        f"{wpath}: its servers are not started: {why}; read it, then list the project under "
        f"[trust] projects in {user_file} as {entry}"
    )


def _canonical(path: str | os.PathLike[str]) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except OSError:
        return str(Path(path).expanduser().absolute())
