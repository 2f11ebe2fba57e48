"""``ringfence mcp inspect``: connect one server, show what it offers and how it was judged."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..mcp_host.manifest._config import workspace_manifest_path
from ..mcp_host.manifest._load import ServerConfig, Transport, load_manifest, load_manifests
from ..runtime._errors import Denied
from ..runtime._render import one_line
from ..runtime.policy._files import load_policy
from ._environ import managed_policy
from ._mcp_show import server_summary
from ._output import envelope, error_line, print_json, print_ok

# -- inspect ------------------------------------------------------------------------------------


def require_enabled(config: ServerConfig, workspace: str | None = None) -> ServerConfig:
    """``config``, unless it is loaded disabled: then Denied, naming why and how to enable it.

    A workspace's ``.ringfence/mcp.toml`` is the repository's (a clone or an agent's
    ``write_file`` can put it there): its servers are loaded disabled until a policy file
    outside the workspace lists the project under ``[trust] projects``, pinned to the
    manifest's content (``mcp_sha256``). A server its own manifest says ``enabled = false``
    about (``mcp add --disabled``) is disabled there. A command that names such a server
    starts or contacts nothing of it, as a session does not.
    """
    if config.enabled:
        return config
    from ..mcp_host.manifest._load import workspace_manifest_refusal

    in_workspace = workspace is not None and config.origin.startswith(
        str(workspace_manifest_path(workspace))
    )
    refusal = workspace_manifest_refusal(workspace) if workspace is not None else None
    if in_workspace and refusal is not None:
        why = refusal
    else:
        why = "its manifest says enabled = false; set it to true there to use it"
    raise Denied(
        f"server {config.name!r} ({config.origin or 'a manifest'}) is disabled: {why}",
        field="enabled" if not in_workspace else "trust",
        server=config.name,
    )


def disabled_server_for(
    tool: str, workspace: str | None, secret_names: Sequence[str]
) -> Denied | None:
    """Why ``mcp.<server>.…`` names no tool when its server is configured but disabled
    (None when no disabled server registers as that part, or the manifests do not load)."""
    from ..runtime._errors import RingfenceError
    from ._mcp_session import server_part

    part = server_part(tool)
    if part is None:
        return None
    try:
        manifest = load_manifests(workspace=workspace, secret_names=secret_names)
    except RingfenceError:
        return None  # the session said why already
    for config in manifest.servers:
        if config.part == part and not config.enabled:
            try:
                require_enabled(config, workspace)
            except Denied as refusal:
                return refusal
    return None


async def run_inspect(args: argparse.Namespace) -> int:
    m = (
        load_manifest(args.manifest, secret_names=args.settings.secret_names)
        if args.manifest
        else load_manifests(workspace=args.workspace, secret_names=args.settings.secret_names)
    )
    # The policy files decide trust and read tools ([mcp.<server>]), as in a session.
    roots = [args.workspace] if args.workspace else []
    managed = managed_policy(args.settings)
    config = require_enabled(m.get(args.name), args.workspace).with_policy(
        load_policy(roots, project=bool(roots), managed=managed).mcp
    )
    if args.timeout_seconds is not None:
        from dataclasses import replace

        config = replace(
            config,
            call_timeout_seconds=args.timeout_seconds,
            connect_timeout_seconds=args.timeout_seconds,
        )
    target = server_summary(config)["target"]
    how = (
        "starting its process confined (sandbox = local)"
        if config.sandbox == "local"
        else "starting its process as your user"
        if config.transport is Transport.STDIO
        else "connecting to it"
    )
    from .._embed import mcp_stdio_confiner
    from ..mcp_host._inspect import inspect_server
    from ..workspace._workspace import Workspace

    # sandbox = "local": confined over the workspace, as in a session. Opened before the
    # announcement, so a bad --workspace is refused with one line.
    workspace = Workspace([args.workspace]) if args.workspace else None
    try:
        sys.stderr.write(
            f"ringfence: inspecting MCP server {config.name!r} ({config.transport.value}: "
            f"{target}): {how}\n"
        )
        sys.stderr.flush()
        confiner = mcp_stdio_confiner(workspace, discard_writes=True)
        report = await inspect_server(
            config,
            workspace=args.workspace,
            stdio_confiner=confiner,
            token_store=args.settings.token_store(),
        )
    finally:
        if workspace is not None:
            workspace.close()
    if args.json:
        if report.get("connected"):
            return print_ok(report, True)
        # The one --json shape: the report goes with the error, under its details.
        error = report["error"]
        details = {**(error.get("details") or {}), "report": report}
        print_json(envelope(False, {**error, "details": details}))
        return 1
    _print_report(report)
    return 0 if report.get("connected") else 1


def _print_report(r: dict[str, Any]) -> None:
    """The report as text. Every string a server chose (its name, version, instructions,
    tool and prompt names, URIs, logs, error messages) is shown through the one renderer
    (``one_line``): it cannot move the cursor, erase a line or start a line of its own."""
    w = sys.stdout.write
    s = one_line
    w(f"server     {s(r['name'])} ({s(r['transport'])})\n")
    if not r.get("connected"):
        w(f"connected  no: {s(r['error']['code'])}: {error_line(r['error']['message'])}\n")
        _print_checks(r["checks"])
        return
    ident = r["identity"]
    version = s(str(ident.get("version") or ""))
    w(f"identity   {s(str(ident.get('name')))} {version}".rstrip() + "\n")
    w(f"protocol   {s(str(ident.get('protocol_version')))}\n")
    health = r.get("health", {})
    w(
        f"health     {'ok' if health.get('ok') else 'failing'}"
        + (
            f" (ping {health['round_trip_ms']} ms)"
            if "round_trip_ms" in health
            else f" ({s(str(health.get('detail')))})"
        )
        + "\n"
    )
    ledger = r["ledger"] or {}
    w("capabilities\n")
    for key in ("advertised", "approved", "pending"):
        w(f"  {key:<10} {', '.join(s(str(c)) for c in ledger.get(key, [])) or '-'}\n")
    w(f"tools ({len(r['tools'])})\n")
    for t in r["tools"]:
        w(f"  {s(t['name']):<48} {t['consequence']:<12} ({s(t['consequence_reason'])})\n")
    for d in r["dropped_tools"]:
        w(f"  [not registered] {s(str(d['remote_name']))} ({s(str(d['reason']))})\n")
    w(f"prompts ({len(r['prompts'])})\n")
    for p in r["prompts"]:
        w(f"  {s(str(p['name']))}\n")
    w(f"resources ({len(r['resources'])}) and templates ({len(r['resource_templates'])})\n")
    for res in r["resources"]:
        w(f"  {s(str(res['uri']))}  {s(str(res['ref']))}\n")
    for t in r["resource_templates"]:
        w(f"  {s(str(t['uri_template']))}  (template)\n")
    if ident.get("instructions"):
        # The first line by newlines only: a separator or a carriage return cannot end it early.
        first = str(ident["instructions"]).strip().split("\n")[0]
        w(f"instructions (untrusted, first line): {s(first[:200])}\n")
    w(f"server logs ({len(r['logs'])}, redacted)\n")
    for entry in r["logs"][-20:]:
        w(f"  [{s(str(entry['source']))}/{s(str(entry['level']))}] {s(str(entry['text']))}\n")
    w(f"notifications ({len(r['notifications'])})\n")
    for n in r["notifications"][-20:]:
        w(f"  {s(str(n['method']))}\n")
    w(f"failures ({len(r['failures'])})\n")
    for f in r["failures"]:
        w(f"  {s(str(f['action']))}: {error_line(str(f['message']))}\n")
    _print_checks(r["checks"])


def _print_checks(checks: list[dict[str, str]]) -> None:
    sys.stdout.write("conformance\n")
    for c in checks:
        sys.stdout.write(f"  [{c['status']:<4}] {c['check']:<24} {one_line(str(c['detail']))}\n")
