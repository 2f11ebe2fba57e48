"""How ``ringfence mcp`` names a manifest and shows servers: ``mcp list``, a summary, login state."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from ..mcp_host._urls import display_url
from ..mcp_host.manifest._load import (
    ServerConfig,
    Transport,
    load_manifest,
    load_manifests,
    manifest_path,
)
from ..runtime._redact import mask_command_args
from ..runtime._render import one_line, when_text
from ._output import print_ok, print_warnings


def manifest_file(args: argparse.Namespace) -> Path:
    return Path(args.manifest) if args.manifest else manifest_path()


def server_summary(s: ServerConfig, store: Any = None) -> dict[str, Any]:
    """What ``mcp list`` shows of ``s``; ``store``: the token store (default the user's)."""
    # Credentials in a stdio server's arguments (--token=…, URL userinfo) are masked.
    return {
        "name": s.name,
        "transport": s.transport.value,
        "target": " ".join(mask_command_args([s.command or "", *s.args]))
        if s.transport is Transport.STDIO
        else display_url(s.url or ""),
        "enabled": s.enabled,
        "trust": s.trust.value,
        "approved_capabilities": sorted(s.approved_capabilities),
        "defined_at": s.origin,
        "auth": auth_state(s, store),
    }


def auth_state(s: ServerConfig, store: Any = None) -> dict[str, Any]:
    if s.transport is Transport.STDIO:
        return {"auth": "none"}
    from ..mcp_host.oauth._provider import auth_status

    return auth_status(s, store)


def auth_line(a: dict[str, Any]) -> str:
    """``oauth: logged in, expires 2026-…, scopes read write`` — never a token; on one line
    (the scopes and a problem can be what an authorization server wrote)."""
    return one_line(_auth_line(a))


def _auth_line(a: dict[str, Any]) -> str:
    if a["auth"] != "oauth":
        return a["auth"]
    if a.get("problem"):
        return f"oauth: {a['problem']}"
    if not a.get("logged_in"):
        return "oauth: not logged in (ringfence mcp login NAME)"
    expires = a.get("expires_at")
    when = (
        "no expiry"
        if not expires
        else ("expired" if a.get("expired") else "expires")
        + " "
        + when_text(expires, "%Y-%m-%d %H:%M UTC")
    )
    refresh = ", refreshable" if a.get("refreshable") else ""
    return f"oauth: logged in, {when}{refresh}, scopes {' '.join(a.get('scopes') or []) or '-'}"


async def run_list(args: argparse.Namespace) -> int:
    from ..runtime.policy._files import load_policy
    from ._environ import managed_policy

    m = (
        load_manifest(args.manifest, secret_names=args.settings.secret_names)
        if args.manifest
        else load_manifests(workspace=args.workspace, secret_names=args.settings.secret_names)
    )
    # Trust as a session would judge it: the policy layers' [mcp.<name>] over the manifest.
    mcp = load_policy(
        [args.workspace] if args.workspace else [], managed=managed_policy(args.settings)
    ).mcp
    store = args.settings.token_store()
    configs = [s.with_policy(mcp) for s in m.servers]
    servers = [server_summary(c, store) for c in configs]
    if args.json:
        from ..mcp_host.oauth._tokens import key_backend

        result = {"manifests": [str(p) for p in m.paths], "servers": servers}
        if any(s["auth"]["auth"] == "oauth" for s in servers):
            result["token_store"] = key_backend(
                keyring=args.settings.keyring
            )  # where the sealing key lives
        return print_ok(result, True, m.warnings)
    print_warnings(m.warnings)
    if not servers:
        sys.stdout.write(f"no MCP servers configured in {', '.join(str(p) for p in m.paths)}\n")
        return 0
    # A manifest's strings (a workspace's is the repository's) stay on their line: a server's
    # command and each of its arguments, quoted where a space would join or split them.
    names = [one_line(s["name"]) for s in servers]
    width = max(map(len, names))
    for name, s, c in zip(names, servers, configs, strict=True):
        flags = [s["trust"]] + ([] if s["enabled"] else ["disabled"])
        target = (
            " ".join(
                shlex.quote(one_line(a)) for a in mask_command_args([c.command or "", *c.args])
            )
            if c.transport is Transport.STDIO
            else one_line(s["target"])
        )
        approved = ", ".join(one_line(c) for c in s["approved_capabilities"])
        sys.stdout.write(
            f"{name:<{width}}  {s['transport']:<5}  {target}\n"
            f"{'':<{width}}  approved: {approved}; {', '.join(flags)}\n"
        )
        if s["transport"] != "stdio":
            sys.stdout.write(f"{'':<{width}}  auth: {auth_line(s['auth'])}\n")
    return 0
