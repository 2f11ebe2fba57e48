"""``ringfence mcp import``: servers from another client's configuration, as manifest entries."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from ..mcp_host._urls import check_url
from ..mcp_host.manifest._load import (
    ServerConfig,
    Transport,
    load_manifest,
    sanitize_part,
    save_server,
)
from ..runtime._errors import InvalidArguments
from ..runtime._redact import is_secret_name
from ._mcp_show import manifest_file
from ._output import print_ok

# -- import -------------------------------------------------------------------------------------


def _env_var_for(server: str, header: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", f"{server}_{header}".upper()).strip("_")


def import_entry(name: str, entry: dict[str, Any]) -> tuple[ServerConfig, list[str]]:
    """One ``mcpServers`` entry as a ServerConfig, plus notes for the operator.

    Secret values are never written: credential-named env variables become
    ``inherit_env`` names and header values become ``headers_env`` variables
    the operator must set.
    """
    notes: list[str] = []
    if not isinstance(entry, dict):
        raise InvalidArguments(f"mcpServers.{name} is not an object", field=f"mcpServers.{name}")
    clean = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-_")[:63] or sanitize_part(name, "server")
    if clean != name:
        notes.append(f"renamed {name!r} to {clean!r}")
    kind = str(
        entry.get("type") or entry.get("transport") or ("stdio" if "command" in entry else "http")
    ).lower()
    transport = {"stdio": Transport.STDIO, "sse": Transport.SSE}.get(kind, Transport.HTTP)
    options: dict[str, Any] = {"name": clean, "transport": transport}
    if entry.get("disabled") is True:
        options["enabled"] = False
    if transport is Transport.STDIO:
        if not isinstance(entry.get("command"), str):
            raise InvalidArguments(
                f"mcpServers.{name} has no command", field=f"mcpServers.{name}.command"
            )
        options["command"] = entry["command"]
        options["args"] = tuple(str(a) for a in entry.get("args") or [])
        if isinstance(entry.get("cwd"), str):
            options["cwd"] = entry["cwd"]
        env: dict[str, str] = {}
        inherit: list[str] = []
        for key, value in (entry.get("env") or {}).items():
            if is_secret_name(key) or "${" in str(value):
                inherit.append(key)
                notes.append(
                    f"{key} is not copied (secrets never live in the manifest): set it in the environment"
                )
            else:
                env[key] = str(value)
        options["env"] = env
        options["inherit_env"] = tuple(inherit)
    else:
        url = entry.get("url") or entry.get("serverUrl")
        if not isinstance(url, str):
            raise InvalidArguments(f"mcpServers.{name} has no url", field=f"mcpServers.{name}.url")
        options["url"] = check_url(url, f"mcpServers.{name}.url")
        headers_env: dict[str, str] = {}
        for header, value in (entry.get("headers") or {}).items():
            if header.lower() == "authorization" and str(value).lower().startswith("bearer "):
                var = _env_var_for(clean, "token")
                options["api_key_env"] = var
                notes.append(f"the bearer token is not copied: set {var} to it")
            else:
                var = _env_var_for(clean, header)
                headers_env[header] = var
                notes.append(f"the {header} header value is not copied: set {var} to it")
        options["headers_env"] = headers_env
    return ServerConfig(**options), notes


async def run_import(args: argparse.Namespace) -> int:
    from ..mcp_host.manifest._config import manifest_bytes
    from ..runtime._canonical import loads

    source = Path(args.file)
    # Read as a manifest is (a regular file, at most one byte past its bound): the file is
    # often a project's own (`.mcp.json`, `.vscode/mcp.json`), the agent's to write, and a
    # FIFO there hung the import, /dev/zero took 6 GB in 10 s, and JSON nested 100,000 deep
    # ended in "unexpected error: RecursionError".
    try:
        raw = manifest_bytes(source)
    except InvalidArguments as exc:
        raise InvalidArguments(exc.message, field="file") from None
    if raw is None:
        raise InvalidArguments(f"no file at {source}", field="file")
    try:
        data = loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArguments(f"{source} is not JSON: {exc}", field="file") from None
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise InvalidArguments(
            f"{source} has no mcpServers (or VS Code servers) object", field="file"
        )
    path = manifest_file(args)
    existing = load_manifest(path, secret_names=args.settings.secret_names)
    results = []
    configs = []
    for name, entry in servers.items():
        config, notes = import_entry(name, entry)  # raises before anything is written
        if config.name in existing and not args.replace:
            results.append(
                {
                    "name": config.name,
                    "status": "skipped",
                    "notes": ["already configured (use --replace)"],
                }
            )
            continue
        configs.append(config)
        results.append({"name": config.name, "status": "imported", "notes": notes})
    for config in configs:
        save_server(config, path, secret_names=args.settings.secret_names)
    if args.json:
        return print_ok({"manifest": str(path), "servers": results}, True)
    for r in results:
        sys.stdout.write(f"{r['status']} {r['name']}\n")
        for note in r["notes"]:
            sys.stdout.write(f"  note: {note}\n")
    if configs:
        sys.stdout.write(
            f"wrote {path}; imported servers are untrusted and approve only tools and prompts\n"
        )
    return 0
