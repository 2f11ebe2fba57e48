"""``inspect``: start one server, record everything about it, and run the conformance checks.

An explicit probe: for a stdio server it starts the configured command as the
local user (callers must say so before calling). The report is redacted and
shows URLs in display form.

Checks (each ``pass``, ``warn``, ``fail`` or ``skip`` with a detail):

- ``initialization``: connected, negotiated a known protocol, identified itself
- ``transport_security``: https or loopback; stdio runs as the user, unsandboxed unless
  ``sandbox = "local"``
- ``capability_authority``: nothing advertised beyond the approved ceiling
- ``paginated_inventories``: every listing ended within its limits
- ``subscription_round_trip``: when subscriptions are approved and enabled
- ``sampling_bounds`` / ``elicitation_bounds``: the policies and their bounds
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from ..runtime._approval import HeadlessDenyApprover
from ..runtime._events import MemorySink
from ..runtime._kernel import Kernel
from ..runtime._net import is_loopback
from ..runtime._redact import MARKER, mask_command_args
from ._connect import connect_servers
from ._connector import Connector
from ._inventory import DEFAULT_LIMITS, ListLimits
from ._sampling import SamplingProvider
from ._urls import display_url
from .manifest._load import Manifest, Policy, Sandbox, ServerConfig, Transport
from .transport._stdio import StdioConfiner

if TYPE_CHECKING:
    from .oauth._tokens import SealedStore

__all__ = ["inspect_server"]

SUBSCRIPTION_WAIT_SECONDS = 2.0


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"check": name, "status": status, "detail": detail}


def _transport_check(config: ServerConfig) -> dict[str, str]:
    if config.transport is Transport.STDIO and config.sandbox is Sandbox.LOCAL:
        network = "network" if config.sandbox_network else "no network"
        roots = (
            "the roots written through an overlay, each call's writes merged as a change set"
            if config.sandbox_writable
            else "read-only roots"
        )
        return _check(
            "transport_security",
            "pass",
            "stdio: a local process with the SDK's minimal environment plus inherit_env/env; "
            f'confined by the local sandbox (sandbox = "local": {roots}, {network}; its layers '
            "are in the connection's sandbox report)",
        )
    if config.transport is Transport.STDIO:
        return _check(
            "transport_security",
            "pass",
            "stdio: a local process with the SDK's minimal environment plus inherit_env/env; "
            "it runs as your user and is not sandboxed",
        )
    from urllib.parse import urlsplit

    parts = urlsplit(config.url or "")
    shown = display_url(config.url or "")
    if parts.scheme == "https":
        return _check(
            "transport_security", "pass", f"{config.transport.value} over https ({shown})"
        )
    if is_loopback(parts.hostname):
        return _check(
            "transport_security",
            "warn",
            f"plain http to loopback ({shown}); fine for local development",
        )
    return _check("transport_security", "fail", f"plain http to a remote host ({shown})")


def _masked_parts(arg: str, shown: str) -> list[str]:
    """The pieces of ``arg`` that ``shown`` replaced by the marker."""
    pattern = "(.*?)".join(re.escape(piece) for piece in shown.split(MARKER))
    match = re.fullmatch(pattern, arg, re.DOTALL)
    return [g for g in match.groups() if g] if match else [arg]


class _WatchSink(MemorySink):
    """Keeps the probe's events and wakes a waiter when a notification is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = trio.Event()

    def write(self, line: str) -> None:
        super().write(line)
        if '"kind":"mcp_notification"' in line:
            self.notified.set()


async def _subscription_check(connector: Connector, sink: _WatchSink) -> dict[str, str]:
    c, ledger = connector.config, connector.ledger
    if ledger is None or not ledger.allows("resources"):
        return _check("subscription_round_trip", "skip", "resources are not approved")
    if not c.subscribe_resources:
        return _check("subscription_round_trip", "skip", "subscribe_resources is off")
    if "resources.subscribe" not in ledger.flags:
        return _check(
            "subscription_round_trip", "skip", "the server does not advertise resources.subscribe"
        )
    if not connector.subscribed:
        return _check("subscription_round_trip", "fail", "no approved resource could be subscribed")
    with trio.move_on_after(SUBSCRIPTION_WAIT_SECONDS):
        await sink.notified.wait()
    got = sink.notified.is_set()
    detail = f"subscribed to {len(connector.subscribed)} resource(s)"
    if got:
        return _check(
            "subscription_round_trip", "pass", detail + "; an update notification arrived"
        )
    return _check(
        "subscription_round_trip",
        "warn",
        detail
        + f"; no update arrived within {SUBSCRIPTION_WAIT_SECONDS:g}s (the server may only send on change)",
    )


def _policy_check(name: str, policy: Policy, detail_allow: str, offered: bool) -> dict[str, str]:
    if policy is Policy.DENY:
        return _check(name, "pass", "deny (not offered to the server)")
    if not offered:
        return _check(
            name, "warn", f"{policy.value}, but nothing is attached to answer it: not offered"
        )
    if policy is Policy.ASK:
        return _check(name, "pass", "ask: every request goes to the approver")
    return _check(name, "pass", f"allow within {detail_allow}")


def conformance(connector: Connector) -> list[dict[str, str]]:
    """The checks that need no more traffic (see the module docstring)."""
    c, ledger, ident = connector.config, connector.ledger, connector.identity
    checks = []
    version = ident.get("protocol_version")
    if ident.get("name") and version:
        mode = "legacy handshake" if c.protocol_mode == "legacy" else "SDK auto negotiation"
        who = f"{ident['name']} {ident.get('version') or ''}".rstrip()
        checks.append(_check("initialization", "pass", f"negotiated {version} with {who} ({mode})"))
    else:
        checks.append(_check("initialization", "fail", "the server did not identify itself"))
    checks.append(_transport_check(c))
    if ledger is not None and ledger.pending:
        checks.append(
            _check(
                "capability_authority",
                "warn",
                f"pending approval (not listed or used): {', '.join(sorted(ledger.pending))}",
            )
        )
    else:
        checks.append(
            _check(
                "capability_authority", "pass", "nothing advertised beyond approved_capabilities"
            )
        )
    problems = [v.problem for v in connector.listings.values() if v.problem]
    if problems:
        checks.append(_check("paginated_inventories", "fail", "; ".join(problems)))
    else:
        pages = ", ".join(f"{k} {v.pages} page(s)" for k, v in connector.listings.items())
        checks.append(_check("paginated_inventories", "pass", pages or "nothing to list"))
    checks.append(
        _policy_check(
            "sampling_bounds",
            c.sampling_policy,
            f"sampling_max_tokens {c.sampling_max_tokens}, sampling_total_tokens {c.sampling_total_tokens}, "
            f"models {list(c.sampling_allowed_models)}",
            connector.sampling is not None,
        )
    )
    checks.append(
        _policy_check(
            "elicitation_bounds",
            c.elicitation_policy,
            "schema validation, credential fields refused, URL mode never opened",
            connector.elicitation is not None,
        )
    )
    return checks


async def inspect_server(
    config: ServerConfig,
    *,
    workspace: str | os.PathLike[str] | None = None,
    sampling_provider: SamplingProvider | None = None,
    limits: ListLimits = DEFAULT_LIMITS,
    stdio_confiner: StdioConfiner | None = None,
    token_store: SealedStore | None = None,
) -> dict[str, Any]:
    """Connect ``config`` (even if disabled), describe it and run the checks.

    ``stdio_confiner`` starts a ``sandbox = "local"`` server confined (without
    one, such a server is reported as not connected).

    Never raises for a server that fails: the report says ``connected: false``
    and carries the error.
    """
    probe = replace(config, enabled=True)
    sink = _WatchSink()
    report: dict[str, Any] = {"name": config.name, "transport": config.transport.value}
    manifest = Manifest((probe,))
    options: dict[str, Any] = {
        "workspace": workspace,
        "sampling_provider": sampling_provider,
        "limits": limits,
        "stdio_confiner": stdio_confiner,
        "token_store": token_store,
    }
    # The workspace is the session's root: an unconfined server's program is not looked up
    # there (stdio_transport), as in a session over it.
    roots = [os.fspath(workspace)] if workspace is not None else []
    kernel = Kernel(approver=HeadlessDenyApprover(), events_sink=sink, roots=roots)
    # What the listing masks in the server's arguments is a secret for everything the
    # probe records too (a server that echoes its --token in a log line or an error).
    command = [config.command or "", *config.args]
    for arg, shown in zip(command, mask_command_args(command), strict=True):
        if shown != arg:
            for part in _masked_parts(arg, shown):
                kernel.redactor.register_credential(part)
    async with (
        kernel,
        connect_servers(kernel, manifest, **options) as connectors,
    ):
        if config.name in connectors.failures:
            error = connectors.failures[config.name]
            report.update(
                connected=False,
                error=error.to_dict(),
                checks=[
                    _check("initialization", "fail", error.message),
                    _transport_check(probe),
                ],
            )
            return report
        connector = connectors[config.name]
        report["connected"] = True
        report["health"] = await connector.ping()
        checks = conformance(connector)
        checks.insert(4, await _subscription_check(connector, sink))
        report.update(connector.describe())
        if config.transport is Transport.STDIO:
            report["target"] = " ".join(mask_command_args(command))
        report["checks"] = checks
    return report
