"""How ``ringfence mcp`` names a manifest and shows a server: its summary and login state."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..mcp_host import ServerConfig, Transport, display_url, manifest_path
from ..runtime import mask_command_args


def manifest_file(args: argparse.Namespace) -> Path:
    return Path(args.manifest) if args.manifest else manifest_path()


def server_summary(s: ServerConfig) -> dict[str, Any]:
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
        "auth": auth_state(s),
    }


def auth_state(s: ServerConfig) -> dict[str, Any]:
    if s.transport is Transport.STDIO:
        return {"auth": "none"}
    from ..mcp_host._oauth import auth_status

    return auth_status(s)


def auth_line(a: dict[str, Any]) -> str:
    """``oauth: logged in, expires 2026-…, scopes read write`` — never a token."""
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
        + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires))
    )
    refresh = ", refreshable" if a.get("refreshable") else ""
    return f"oauth: logged in, {when}{refresh}, scopes {' '.join(a.get('scopes') or []) or '-'}"
