"""``ringfence mcp list|add|remove|inspect|import|login|logout``: the MCP servers in the manifest.

Every command takes ``--json`` (``{"ok": true, "result": …}``) and
``--manifest FILE`` (default ``$RINGFENCE_HOME/mcp.toml``). Only ``inspect``
and ``login`` contact a server, and they say so first. ``list`` shows each
OAuth server's login state (expiry, scopes) and never a token.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..mcp_host._urls import check_url, display_url
from ..mcp_host.manifest._load import (
    DEFAULT_APPROVED,
    Manifest,
    Policy,
    Sandbox,
    ServerConfig,
    Transport,
    Trust,
    load_manifest,
    load_manifests,
    remove_server,
    save_server,
)
from ..mcp_host.manifest._policy_edit import plan_server_policy
from ..runtime._errors import InvalidArguments
from ._mcp_import import run_import
from ._mcp_inspect import run_inspect
from ._mcp_show import auth_line, manifest_file, run_list, server_summary
from ._output import print_ok, print_warnings
from ._verbs import add_verb_parser, port_number, positive_seconds


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
        "--client-key-env",
        metavar="VAR",
        help="oauth client_credentials: the variable holding the client's PEM private key "
        "(private_key_jwt: a signed assertion instead of a secret; needs --client-id)",
    )
    add.add_argument(
        "--client-metadata-url",
        metavar="URL",
        help="oauth: this client's metadata document (an https URL with a path, used as its "
        "client id where the authorization server accepts one: CIMD)",
    )
    add.add_argument(
        "--scope", action="append", default=[], metavar="S", help="oauth: a scope (repeatable)"
    )
    add.add_argument(
        "--oauth-grant",
        choices=["authorization_code", "client_credentials", "identity_assertion"],
        help="oauth: client_credentials for machine-to-machine (a client secret, "
        "--client-secret-env, or a private key, --client-key-env); identity_assertion for "
        "enterprise-managed authorization (SEP-990; the --idp-* flags)",
    )
    add.add_argument("--oauth-issuer", metavar="URL", help="oauth: the expected issuer")
    add.add_argument(
        "--idp-token-endpoint",
        metavar="URL",
        help="identity_assertion: the enterprise IdP's token-exchange endpoint",
    )
    add.add_argument(
        "--idp-client-id", metavar="ID", help="identity_assertion: this client's id at the IdP"
    )
    add.add_argument(
        "--idp-client-secret-env",
        metavar="VAR",
        help="identity_assertion: the IdP client secret's variable (optional)",
    )
    add.add_argument(
        "--idp-id-token-env",
        metavar="VAR",
        help="identity_assertion: the variable holding the user's IdP ID token",
    )
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
        help="trust the server (believe its readOnlyHint, frame nothing): written as "
        "trusted = true under [mcp.NAME] in $RINGFENCE_HOME/policy.toml",
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
        help="treat this tool (a glob) as read-only: written to read_only_tools under "
        "[mcp.NAME] in $RINGFENCE_HOME/policy.toml (repeatable)",
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
        help="with --sandbox local: the server's writes become a change set per call "
        "(default: the workspace is read-only)",
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
        "--timeout-seconds",
        type=positive_seconds,
        help="override the per-call deadline for the probe",
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
        "--port",
        type=port_number,
        default=0,
        help="the loopback redirect port (default: a free one)",
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


# -- list ---------------------------------------------------------------------------------------


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
        # --trusted and --read-only-tool are policy: written to the user policy file (run_add).
        "trust": Trust.UNTRUSTED,
        "enabled": not args.disabled,
        "approved_capabilities": frozenset(args.approve_capability) or DEFAULT_APPROVED,
        "autonomous_tools": tuple(args.autonomous_tool),
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


def command_warning(config: ServerConfig) -> str | None:
    """What is wrong with a stdio server's command now (saved, it fails every session until
    it is fixed), or None. A command with ``$`` (``$WORKSPACE/...``) or a relative path with
    a ``/`` is judged when the server starts, where it is expanded and resolved."""
    import os
    import shutil

    from ..mcp_host._errors import command_fix

    command = config.command
    if config.transport is not Transport.STDIO or not command:
        return None
    if "$" in command or (not os.path.isabs(command) and "/" in command):
        return None
    if os.path.isabs(command):
        ok = os.path.isfile(command) and os.access(command, os.X_OK)
    else:
        ok = shutil.which(command) is not None
    if ok:
        return None
    return (
        f"{config.name}: the command {command!r} cannot be started now: {command_fix(command)} "
        "(saved as given; sessions fail to connect this server until it can)"
    )


def _auth_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--auth`` and the OAuth flags; the manifest check (run by save_server) judges them."""
    from ..mcp_host.manifest._load import AuthMode

    oauth_flags = {
        "--client-id": args.client_id,
        "--client-secret-env": args.client_secret_env,
        "--client-key-env": args.client_key_env,
        "--client-metadata-url": args.client_metadata_url,
        "--scope": args.scope or None,
        "--oauth-grant": args.oauth_grant,
        "--oauth-issuer": args.oauth_issuer,
        "--idp-token-endpoint": args.idp_token_endpoint,
        "--idp-client-id": args.idp_client_id,
        "--idp-client-secret-env": args.idp_client_secret_env,
        "--idp-id-token-env": args.idp_id_token_env,
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
        "client_key_env": args.client_key_env,
        "client_metadata_url": args.client_metadata_url,
        "scopes": tuple(args.scope),
        "oauth_grant": args.oauth_grant or "authorization_code",
        "oauth_issuer": args.oauth_issuer,
        # Checked with the grant by the manifest (only with identity_assertion; which it needs).
        "idp_token_endpoint": args.idp_token_endpoint,
        "idp_client_id": args.idp_client_id,
        "idp_client_secret_env": args.idp_client_secret_env,
        "idp_id_token_env": args.idp_id_token_env,
    }


async def run_add(args: argparse.Namespace) -> int:
    path = manifest_file(args)
    existing = load_manifest(path, secret_names=args.settings.secret_names)
    config = config_from_args(args, existing)
    replaced = config.name in existing
    # Both files are checked before either is written; the policy follows the manifest.
    policy = plan_server_policy(
        config.name, trusted=args.trusted, read_only_tools=tuple(args.read_only_tool)
    )
    m = save_server(
        config, path, secret_names=args.settings.secret_names
    )  # validates the whole resulting file before writing it
    policy.write()
    summary = server_summary(m.get(config.name), args.settings.token_store())
    shown_policy = str(policy.path) if policy.changed else None
    warnings = [*m.warnings, *filter(None, [command_warning(config)])]
    if args.json:
        result = {"manifest": str(path), "replaced": replaced, "server": summary}
        return print_ok({**result, "policy": shown_policy}, True, warnings)
    print_warnings(warnings)
    verb = "replaced" if replaced else "added"
    sys.stdout.write(
        f"{verb} {config.name} in {path}: {summary['transport']} {summary['target']}\n"
    )
    if shown_policy:
        said = ["trusted"] if args.trusted else []
        said += [f"read-only tools {', '.join(args.read_only_tool)}"] if args.read_only_tool else []
        sys.stdout.write(
            f"policy: [mcp.{config.name}] in {shown_policy}: {'; '.join(said) or 'cleared'}\n"
        )
    if config.transport is Transport.STDIO:
        sys.stdout.write(
            "note: a stdio server runs as your user with your file and network access; "
            "approvals gate its tool calls, not its process\n"
        )
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    path = manifest_file(args)
    policy = plan_server_policy(args.name)  # a grant must not outlive its server's name
    remove_server(args.name, path, secret_names=args.settings.secret_names)
    policy.write()
    shown_policy = str(policy.path) if policy.changed else None
    if args.json:
        return print_ok({"manifest": str(path), "removed": args.name, "policy": shown_policy}, True)
    sys.stdout.write(f"removed {args.name} from {path}\n")
    if shown_policy:
        sys.stdout.write(
            f"policy: [mcp.{args.name}] trust and read-only tools cleared in {shown_policy}\n"
        )
    return 0


# -- login / logout -----------------------------------------------------------------------------


def _load_for(args: argparse.Namespace) -> Manifest:
    return (
        load_manifest(args.manifest, secret_names=args.settings.secret_names)
        if args.manifest
        else load_manifests(workspace=args.workspace, secret_names=args.settings.secret_names)
    )


async def run_login(args: argparse.Namespace) -> int:
    import webbrowser

    import trio

    from ..mcp_host.manifest._load import AuthMode
    from ..mcp_host.oauth._login import login, loopback_flow
    from ..runtime._errors import RingfenceError
    from ..runtime._groups import single_error
    from ..runtime._redact import Redactor
    from ._mcp_inspect import require_enabled
    from ._mcp_session import sdk_logs_as_lines

    # A disabled (workspace, untrusted) server is refused: its URL is the repository's choice.
    config = require_enabled(_load_for(args).get(args.name), args.workspace)
    # Refused here, before the "logging in" line: a bad name is one line of error.
    if config.auth is not AuthMode.OAUTH:
        raise InvalidArguments(
            f'server {config.name!r} is not configured with auth = "oauth": it needs no login',
            field="auth",
        )
    if config.oauth_grant == "client_credentials":
        held = "client_key_env" if config.client_key_env else "client_secret_env"
        raise InvalidArguments(
            f"server {config.name!r} uses client_credentials: it needs no login "
            f"(its credential comes from {held}, {getattr(config, held)})",
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
    sdk_logs_as_lines(args.settings.debug)  # the SDK's errors as one line, not a traceback
    try:
        if config.oauth_grant == "identity_assertion":
            # No browser and no redirect: the user's IdP ID token (read from its variable) is
            # exchanged, so no loopback listener is opened.
            status = await login(
                config, Redactor(), _no_browser_flow(config.name), args.settings.token_store()
            )
        else:
            async with loopback_flow(show, args.port) as flow:
                status = await login(config, Redactor(), flow, args.settings.token_store())
    except (RingfenceError, BaseExceptionGroup) as caught:
        # What refused the login is not fixed by logging in again: never send the person
        # back to this command. (The redirect listener's nursery may wrap the error.)
        exc = (
            single_error(caught, RingfenceError)
            if isinstance(caught, BaseExceptionGroup)
            else caught
        )
        again = f"run `ringfence mcp login {config.name}`"
        if not isinstance(exc, RingfenceError) or again not in exc.message:
            raise
        instead = (
            "this login itself was refused, so logging in again will not help: what the "
            "message names must change at the server or its authorization server"
        )
        raise exc.with_(message=exc.message.replace(again, instead)) from exc.__cause__
    if args.json:
        return print_ok({"server": config.name, "auth": status}, True)
    sys.stdout.write(f"{config.name}: {auth_line(status)}\n")
    return 0 if status.get("logged_in") else 1


def _no_browser_flow(name: str) -> Any:
    """A ``LoginFlow`` for a grant without a browser step: using it is refused."""
    from ..mcp_host.oauth._provider import LoginFlow
    from ..runtime._errors import Unavailable

    async def refuse(*_: object) -> Any:
        raise Unavailable(
            f"MCP server {name!r}: this grant has no browser step, yet one was asked for",
            field="oauth_grant",
        )

    return LoginFlow("http://127.0.0.1/ringfence-no-login", refuse, refuse)


async def run_logout(args: argparse.Namespace) -> int:
    from ..mcp_host.oauth._provider import logout

    config = _load_for(args).get(args.name)
    removed = logout(config, args.settings.token_store())
    if args.json:
        return print_ok({"server": config.name, "removed": removed}, True)
    sys.stdout.write(f"{config.name}: {'tokens deleted' if removed else 'was not logged in'}\n")
    return 0
