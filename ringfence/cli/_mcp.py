"""``ringfence mcp list|add|remove|inspect|import|login|logout``: the MCP servers in the manifest.

Every command takes ``--json`` (``{"ok": true, "result": …}``) and
``--manifest FILE`` (default ``$RINGFENCE_HOME/mcp.toml``). Only ``inspect``
and ``login`` contact a server, and they say so first. ``list`` shows each
OAuth server's login state (expiry, scopes) and never a token.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from ..mcp_host import (
    Manifest,
    Policy,
    Sandbox,
    ServerConfig,
    Transport,
    Trust,
    check_url,
    display_url,
    load_manifest,
    load_manifests,
    manifest_path,
    remove_server,
    sanitize_part,
    save_server,
)
from ..mcp_host._manifest import DEFAULT_APPROVED
from ..runtime import InvalidArguments, is_secret_name, load_policy, mask_command_args
from ._output import print_ok, print_warnings
from ._verbs import add_verb_parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--manifest", metavar="FILE", help="the manifest to use (default $RINGFENCE_HOME/mcp.toml)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "mcp")
    msub = p.add_subparsers(dest="mcp_verb", required=True, metavar="ACTION")

    lst = msub.add_parser("list", help="list the configured servers (starts nothing)")
    _common(lst)
    lst.add_argument("--workspace", metavar="DIR", help="also read DIR/.ringfence/mcp.toml")
    lst.set_defaults(func=run_list)

    add = msub.add_parser("add", help="add a server, or replace one with the same name")
    add.add_argument("name", help="the server's name (tools appear as mcp.NAME.TOOL)")
    add.add_argument(
        "--transport",
        choices=[t.value for t in Transport],
        required=True,
        help="how to reach the server: stdio (a command) or http/sse (a URL)",
    )
    add.add_argument(
        "--command", help="stdio: the server's executable (an absolute path is safest)"
    )
    add.add_argument(
        "--arg", action="append", default=[], metavar="A", help="stdio: one argument (repeatable)"
    )
    add.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="stdio: a non-secret variable",
    )
    add.add_argument(
        "--inherit-env",
        action="append",
        default=[],
        metavar="NAME",
        help="stdio: pass this variable through",
    )
    add.add_argument("--cwd", help="stdio: working directory")
    add.add_argument("--url", help="http/sse: the endpoint (https, or http to loopback)")
    add.add_argument(
        "--api-key-env", metavar="VAR", help="http/sse: send Authorization: Bearer $VAR"
    )
    add.add_argument(
        "--auth",
        choices=["oauth", "bearer", "none"],
        help="http/sse: OAuth 2.1 (then `mcp login`), a bearer token (--api-key-env), or none",
    )
    add.add_argument("--client-id", help="oauth: a pre-registered client id (default: register)")
    add.add_argument(
        "--client-secret-env", metavar="VAR", help="oauth: the client secret's variable"
    )
    add.add_argument(
        "--scope", action="append", default=[], metavar="S", help="oauth: a scope (repeatable)"
    )
    add.add_argument(
        "--oauth-grant",
        choices=["authorization_code", "client_credentials"],
        help="oauth: client_credentials for machine-to-machine (needs the client secret)",
    )
    add.add_argument("--oauth-issuer", metavar="URL", help="oauth: the expected issuer")
    add.add_argument(
        "--header-env",
        action="append",
        default=[],
        metavar="HEADER=VAR",
        help="http/sse: send HEADER: $VAR",
    )
    add.add_argument(
        "--approve-capability",
        action="append",
        default=[],
        metavar="C",
        help="approve a capability (repeatable; default tools and prompts)",
    )
    add.add_argument(
        "--trusted",
        action="store_true",
        help="mark the server trusted (results are not framed as untrusted); deprecated: "
        "write trusted = true under [mcp.NAME] in policy.toml",
    )
    add.add_argument(
        "--autonomous-tool",
        action="append",
        default=[],
        metavar="T",
        help="a tool that runs without asking",
    )
    add.add_argument(
        "--read-only-tool",
        action="append",
        default=[],
        metavar="T",
        help="treat this tool as read-only; deprecated: write read_only_tools under "
        "[mcp.NAME] in policy.toml",
    )
    add.add_argument(
        "--allow-tool",
        action="append",
        default=None,
        metavar="GLOB",
        help="expose only the server's tools matching GLOB (repeatable; default all)",
    )
    add.add_argument(
        "--deny-tool",
        action="append",
        default=[],
        metavar="GLOB",
        help="hide the server's tools matching GLOB (repeatable; wins over --allow-tool)",
    )
    add.add_argument(
        "--sandbox",
        choices=["none", "local"],
        help="stdio: run the server's process confined (local) or as your user (none, default)",
    )
    add.add_argument(
        "--sandbox-network", action="store_true", help="with --sandbox local: allow the network"
    )
    add.add_argument(
        "--sandbox-writable",
        action="store_true",
        help="with --sandbox local: the workspace is writable (default read-only)",
    )
    add.add_argument(
        "--elicitation",
        choices=[p.value for p in Policy],
        help="when the server asks you for input: deny (default: not offered), ask (the Gate "
        "asks whether to show it, then the form is asked at the terminal) or allow (the form "
        "is shown without asking first); without a terminal every request is declined",
    )
    add.add_argument("--timeout-seconds", type=float, help="per-call deadline (default 60)")
    add.add_argument(
        "--disabled", action="store_true", help="configure it but do not start it in sessions"
    )
    _common(add)
    add.set_defaults(func=run_add)

    rm = msub.add_parser("remove", help="remove a server")
    rm.add_argument("name", help="the server to remove")
    _common(rm)
    rm.set_defaults(func=run_remove)

    ins = msub.add_parser(
        "inspect", help="START the server and report on it (identity, ledger, inventories, checks)"
    )
    ins.add_argument("name", help="the server to start and inspect")
    ins.add_argument(
        "--workspace", metavar="DIR", help="expands $WORKSPACE and reads DIR/.ringfence/mcp.toml"
    )
    ins.add_argument(
        "--timeout-seconds", type=float, help="override the per-call deadline for the probe"
    )
    _common(ins)
    ins.set_defaults(func=run_inspect)

    login = msub.add_parser(
        "login", help="authorize ringfence for an OAuth server (browser, PKCE, loopback redirect)"
    )
    login.add_argument("name", help="the OAuth server to authorize")
    login.add_argument(
        "--no-browser", action="store_true", help="only print the URL; do not open a browser"
    )
    login.add_argument(
        "--port", type=int, default=0, help="the loopback redirect port (default: a free one)"
    )
    login.add_argument("--workspace", metavar="DIR", help="also read DIR/.ringfence/mcp.toml")
    _common(login)
    login.set_defaults(func=run_login)

    logout = msub.add_parser("logout", help="delete an OAuth server's sealed tokens")
    logout.add_argument("name", help="the server whose tokens to delete")
    logout.add_argument("--workspace", metavar="DIR", help="also read DIR/.ringfence/mcp.toml")
    _common(logout)
    logout.set_defaults(func=run_logout)

    imp = msub.add_parser(
        "import", help="import the mcpServers JSON of Claude Desktop, Cursor or VS Code"
    )
    imp.add_argument("file", help="the client's JSON config file with mcpServers or servers")
    imp.add_argument("--replace", action="store_true", help="replace servers that already exist")
    _common(imp)
    imp.set_defaults(func=run_import)


def _path(args: argparse.Namespace) -> Path:
    return Path(args.manifest) if args.manifest else manifest_path()


def _summary(s: ServerConfig) -> dict[str, Any]:
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
        "auth": _auth_state(s),
    }


def _auth_state(s: ServerConfig) -> dict[str, Any]:
    if s.transport is Transport.STDIO:
        return {"auth": "none"}
    from ..mcp_host._oauth import auth_status

    return auth_status(s)


def _auth_line(a: dict[str, Any]) -> str:
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


# -- list ---------------------------------------------------------------------------------------


async def run_list(args: argparse.Namespace) -> int:
    m = load_manifest(args.manifest) if args.manifest else load_manifests(workspace=args.workspace)
    servers = [_summary(s) for s in m.servers]
    if args.json:
        from ..mcp_host._tokens import key_backend

        result = {"manifests": [str(p) for p in m.paths], "servers": servers}
        if any(s["auth"]["auth"] == "oauth" for s in servers):
            result["token_store"] = key_backend()  # where the sealing key lives
        return print_ok(result, True, m.warnings)
    print_warnings(m.warnings)
    if not servers:
        sys.stdout.write(f"no MCP servers configured in {', '.join(str(p) for p in m.paths)}\n")
        return 0
    width = max(len(s["name"]) for s in servers)
    for s in servers:
        flags = [s["trust"]] + ([] if s["enabled"] else ["disabled"])
        sys.stdout.write(
            f"{s['name']:<{width}}  {s['transport']:<5}  {s['target']}\n"
            f"{'':<{width}}  approved: {', '.join(s['approved_capabilities'])}; {', '.join(flags)}\n"
        )
        if s["transport"] != "stdio":
            sys.stdout.write(f"{'':<{width}}  auth: {_auth_line(s['auth'])}\n")
    return 0


# -- add / remove -------------------------------------------------------------------------------


def _pairs(values: list[str], option: str) -> dict[str, str]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidArguments(f"{option} takes NAME=VALUE, not {item!r}", field=option)
        out[name] = value
    return out


def config_from_args(args: argparse.Namespace, existing: Manifest) -> ServerConfig:
    transport = Transport(args.transport)
    url = args.url
    if url is not None and args.name in existing:
        old = existing.get(args.name)
        # Re-entering the URL exactly as ringfence displayed it keeps the saved one (with its query).
        if old.url and url == display_url(old.url):
            url = old.url
    if url is not None:
        check_url(url, "--url")
    options: dict[str, Any] = {
        "name": args.name,
        "transport": transport,
        "command": args.command,
        "args": tuple(args.arg),
        "env": _pairs(args.env, "--env"),
        "inherit_env": tuple(args.inherit_env),
        "cwd": args.cwd,
        "url": url,
        "api_key_env": args.api_key_env,
        "headers_env": _pairs(args.header_env, "--header-env"),
        "trust": Trust.TRUSTED if args.trusted else Trust.UNTRUSTED,
        "enabled": not args.disabled,
        "approved_capabilities": frozenset(args.approve_capability) or DEFAULT_APPROVED,
        "autonomous_tools": tuple(args.autonomous_tool),
        "read_only_tools": tuple(args.read_only_tool),
        "allow_tools": tuple(args.allow_tool) if args.allow_tool is not None else None,
        "deny_tools": tuple(args.deny_tool),
    }
    if args.timeout_seconds is not None:
        options["call_timeout_seconds"] = args.timeout_seconds
    if args.sandbox is not None:
        options["sandbox"] = Sandbox(args.sandbox)
    options["sandbox_network"] = args.sandbox_network
    options["sandbox_writable"] = args.sandbox_writable
    if args.elicitation is not None:
        options["elicitation_policy"] = Policy(args.elicitation)
    options.update(_auth_options(args))
    return ServerConfig(**options)


def _auth_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--auth`` and the OAuth flags; the manifest check (run by save_server) judges them."""
    from ..mcp_host._manifest import AuthMode

    oauth_flags = {
        "--client-id": args.client_id,
        "--client-secret-env": args.client_secret_env,
        "--scope": args.scope or None,
        "--oauth-grant": args.oauth_grant,
        "--oauth-issuer": args.oauth_issuer,
    }
    if args.auth != "oauth":
        given = [flag for flag, value in oauth_flags.items() if value]
        if given:
            raise InvalidArguments(f"{given[0]} needs --auth oauth", field=given[0])
        return {"auth": AuthMode(args.auth)} if args.auth else {}
    return {
        "auth": AuthMode.OAUTH,
        "client_id": args.client_id,
        "client_secret_env": args.client_secret_env,
        "scopes": tuple(args.scope),
        "oauth_grant": args.oauth_grant or "authorization_code",
        "oauth_issuer": args.oauth_issuer,
    }


async def run_add(args: argparse.Namespace) -> int:
    path = _path(args)
    existing = load_manifest(path)
    config = config_from_args(args, existing)
    replaced = config.name in existing
    m = save_server(config, path)  # validates the whole resulting file before writing it
    summary = _summary(m.get(config.name))
    if args.json:
        return print_ok(
            {"manifest": str(path), "replaced": replaced, "server": summary}, True, m.warnings
        )
    print_warnings(m.warnings)
    verb = "replaced" if replaced else "added"
    sys.stdout.write(
        f"{verb} {config.name} in {path}: {summary['transport']} {summary['target']}\n"
    )
    if config.transport is Transport.STDIO:
        sys.stdout.write(
            "note: a stdio server runs as your user with your file and network access; "
            "approvals gate its tool calls, not its process\n"
        )
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    path = _path(args)
    remove_server(args.name, path)
    if args.json:
        return print_ok({"manifest": str(path), "removed": args.name}, True)
    sys.stdout.write(f"removed {args.name} from {path}\n")
    return 0


# -- login / logout -----------------------------------------------------------------------------


def _load_for(args: argparse.Namespace) -> Manifest:
    return (
        load_manifest(args.manifest) if args.manifest else load_manifests(workspace=args.workspace)
    )


async def run_login(args: argparse.Namespace) -> int:
    import webbrowser

    import trio

    from ..mcp_host._login import login, loopback_flow
    from ..runtime import Redactor

    config = _load_for(args).get(args.name)
    if config.oauth_grant == "client_credentials":
        raise InvalidArguments(
            f"server {config.name!r} uses client_credentials: it needs no login "
            "(its client secret comes from client_secret_env)",
            field="oauth_grant",
        )
    # The URL goes to stderr with --json (stdout stays one JSON object), else to stdout.
    stream = sys.stderr if args.json else sys.stdout

    async def show(url: str) -> None:
        stream.write(
            f"ringfence: to authorize {config.name!r}, open this URL in a browser:\n{url}\n"
        )
        stream.flush()
        if not args.no_browser:
            await trio.to_thread.run_sync(webbrowser.open, url)

    sys.stderr.write(
        f"ringfence: logging in to MCP server {config.name!r} ({display_url(config.url or '')})\n"
    )
    sys.stderr.flush()
    async with loopback_flow(show, args.port) as flow:
        status = await login(config, Redactor(), flow)
    if args.json:
        return print_ok({"server": config.name, "auth": status}, True)
    sys.stdout.write(f"{config.name}: {_auth_line(status)}\n")
    return 0 if status.get("logged_in") else 1


async def run_logout(args: argparse.Namespace) -> int:
    from ..mcp_host._oauth import logout

    config = _load_for(args).get(args.name)
    removed = logout(config)
    if args.json:
        return print_ok({"server": config.name, "removed": removed}, True)
    sys.stdout.write(f"{config.name}: {'tokens deleted' if removed else 'was not logged in'}\n")
    return 0


# -- inspect ------------------------------------------------------------------------------------


async def run_inspect(args: argparse.Namespace) -> int:
    m = load_manifest(args.manifest) if args.manifest else load_manifests(workspace=args.workspace)
    # The policy files decide trust and read tools ([mcp.<server>]), as in a session.
    roots = [args.workspace] if args.workspace else []
    config = m.get(args.name).with_policy(load_policy(roots, project=bool(roots)).mcp)
    if args.timeout_seconds is not None:
        from dataclasses import replace

        config = replace(
            config,
            call_timeout_seconds=args.timeout_seconds,
            connect_timeout_seconds=args.timeout_seconds,
        )
    target = _summary(config)["target"]
    how = (
        "starting its process confined (sandbox = local)"
        if config.sandbox == "local"
        else "starting its process as your user"
        if config.transport is Transport.STDIO
        else "connecting to it"
    )
    sys.stderr.write(
        f"ringfence: inspecting MCP server {config.name!r} ({config.transport.value}: {target}): {how}\n"
    )
    sys.stderr.flush()
    from .._embed import mcp_stdio_confiner
    from ..mcp_host import inspect_server  # imports the MCP SDK: only inspect needs it
    from ..workspace import Workspace

    # sandbox = "local": confined over the workspace, as in a session
    workspace = Workspace([args.workspace]) if args.workspace else None
    try:
        confiner = mcp_stdio_confiner(workspace)
        report = await inspect_server(config, workspace=args.workspace, stdio_confiner=confiner)
    finally:
        if workspace is not None:
            workspace.close()
    if args.json:
        if report.get("connected"):
            return print_ok(report, True)
        sys.stdout.write(
            json.dumps(
                {"ok": False, "error": report["error"], "report": report}, indent=2, default=str
            )
            + "\n"
        )
        return 1
    _print_report(report)
    return 0 if report.get("connected") else 1


def _print_report(r: dict[str, Any]) -> None:
    w = sys.stdout.write
    w(f"server     {r['name']} ({r['transport']})\n")
    if not r.get("connected"):
        w(f"connected  no: {r['error']['code']}: {r['error']['message']}\n")
        _print_checks(r["checks"])
        return
    ident = r["identity"]
    w(f"identity   {ident.get('name')} {ident.get('version') or ''}".rstrip() + "\n")
    w(f"protocol   {ident.get('protocol_version')}\n")
    health = r.get("health", {})
    w(
        f"health     {'ok' if health.get('ok') else 'failing'}"
        + (
            f" (ping {health['round_trip_ms']} ms)"
            if "round_trip_ms" in health
            else f" ({health.get('detail')})"
        )
        + "\n"
    )
    ledger = r["ledger"] or {}
    w("capabilities\n")
    for key in ("advertised", "approved", "pending"):
        w(f"  {key:<10} {', '.join(ledger.get(key, [])) or '-'}\n")
    w(f"tools ({len(r['tools'])})\n")
    for t in r["tools"]:
        w(f"  {t['name']:<48} {t['consequence']:<12} ({t['consequence_reason']})\n")
    for d in r["dropped_tools"]:
        w(f"  [not registered] {d['remote_name']} ({d['reason']})\n")
    w(f"prompts ({len(r['prompts'])})\n")
    for p in r["prompts"]:
        w(f"  {p['name']}\n")
    w(f"resources ({len(r['resources'])}) and templates ({len(r['resource_templates'])})\n")
    for res in r["resources"]:
        w(f"  {res['uri']}  {res['ref']}\n")
    for t in r["resource_templates"]:
        w(f"  {t['uri_template']}  (template)\n")
    if ident.get("instructions"):
        first = ident["instructions"].strip().splitlines()[0]
        w(f"instructions (untrusted, first line): {first[:200]}\n")
    w(f"server logs ({len(r['logs'])}, redacted)\n")
    for entry in r["logs"][-20:]:
        w(f"  [{entry['source']}/{entry['level']}] {entry['text']}\n")
    w(f"notifications ({len(r['notifications'])})\n")
    for n in r["notifications"][-20:]:
        w(f"  {n['method']}\n")
    w(f"failures ({len(r['failures'])})\n")
    for f in r["failures"]:
        w(f"  {f['action']}: {f['message']}\n")
    _print_checks(r["checks"])


def _print_checks(checks: list[dict[str, str]]) -> None:
    sys.stdout.write("conformance\n")
    for c in checks:
        sys.stdout.write(f"  [{c['status']:<4}] {c['check']:<24} {c['detail']}\n")


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
    source = Path(args.file)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidArguments(f"no file at {source}", field="file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArguments(f"{source} is not JSON: {exc}", field="file") from None
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise InvalidArguments(
            f"{source} has no mcpServers (or VS Code servers) object", field="file"
        )
    path = _path(args)
    existing = load_manifest(path)
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
        save_server(config, path)
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
