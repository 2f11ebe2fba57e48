"""A connector: one configured MCP server joined to one session's kernel.

A :class:`Connector` is one server: its pooled connection, the recorded
initialize result (identity, negotiated protocol, capability ledger), the
inventories it was allowed to list, and bounded redacted diagnostics. Its
tools join the kernel's registry as ``mcp.<server>.<tool>``, so every call goes
through the same Gate as a native tool. Connectors are made, registered and
stopped by :mod:`._connect` (``connect_servers``, ``attach_connectors``,
``start_connectors``), the API hosts use.
"""

from __future__ import annotations

import contextlib
import hashlib
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from mcp import types

from ..runtime._errors import RingfenceError
from ..runtime._groups import raise_single
from ..runtime._kernel import Kernel
from ..runtime._output import cap_text
from ..runtime._tools import ToolSpec
from ._adapter import (
    GET_PROMPT,
    READ_RESOURCE,
    RemoteTool,
    consequence_for,
    get_prompt_spec,
    read_resource_spec,
    tool_spec,
)
from ._authority import CapabilityLedger
from ._diagnostics import Diagnostics, NotificationBudget
from ._elicitation import ElicitationGate, Elicitor
from ._inventory import (
    DEFAULT_LIMITS,
    Listing,
    ListLimits,
    assign_names,
    filter_names,
    list_paginated,
)
from ._requests import REQUESTS_SUMMARY
from ._sampling import SamplingGate, SamplingProvider
from ._urls import display_url
from .manifest._load import Policy, ServerConfig, Transport, sanitize_part
from .transport._pool import ConnectionPool, LiveConnection
from .transport._stdio import StdioConfiner

if TYPE_CHECKING:
    from .oauth._tokens import SealedStore

__all__ = ["Connector"]

MAX_SUBSCRIPTIONS = 100
MAX_INSTRUCTIONS = 4000
MAX_LABEL = 1024  # a server's name, title or version as recorded (bytes, cut with a marker)
# Notification methods that go to the event stream when subscriptions are enabled.
_STREAMED = frozenset(
    {
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
    }
)


def _some(names: list[str], most: int = 10) -> str:
    """The first ``most`` of ``names`` (each already cut by the ledger), and how many more."""
    shown = ", ".join(repr(n) for n in names[:most]) or "none"
    return shown + (f", and {len(names) - most} more" if len(names) > most else "")


class Connector:
    """One configured server in one session. Made by :func:`connect_servers`."""

    def __init__(
        self,
        config: ServerConfig,
        kernel: Kernel,
        nursery: trio.Nursery,
        *,
        sampling_provider: SamplingProvider | None = None,
        sampling_lock: trio.Lock | None = None,
        elicitor: Elicitor | None = None,
        limits: ListLimits = DEFAULT_LIMITS,
        stdio_confiner: StdioConfiner | None = None,
        token_store: SealedStore | None = None,
    ) -> None:
        self.config = config
        self.kernel = kernel
        self.redactor = kernel.redactor
        self.limits = limits
        self.diagnostics = Diagnostics(kernel.redactor)
        # What this server's notifications may write to the event stream (a flood is counted).
        self.notification_budget = NotificationBudget()
        self.ledger: CapabilityLedger | None = None
        self.identity: dict[str, Any] = {}
        self.tools: list[RemoteTool] = []
        self.dropped_tools: list[dict[str, str]] = []
        self.prompts: list[types.Prompt] = []
        self.resources: list[dict[str, Any]] = []
        self.templates: list[dict[str, Any]] = []
        self.dropped_resources: list[str] = []
        self.listings: dict[str, Listing[Any]] = {}
        self.subscribed: list[str] = []
        self.specs: list[ToolSpec] = []
        self.sampling: SamplingGate | None = None
        self.elicitation: ElicitationGate | None = None
        options: dict[str, Any] = {
            "logging_callback": self._on_log,
            "message_handler": self._on_message,
        }
        if config.roots:
            options["list_roots_callback"] = self._on_list_roots
        if config.sampling_policy is not Policy.DENY:
            if sampling_provider is None:
                self.diagnostics.fail(
                    "sampling",
                    f"sampling_policy is {config.sampling_policy.value!r} but no sampling provider is "
                    "attached; sampling is not offered",
                )
            else:
                self.sampling = SamplingGate(
                    config,
                    kernel,
                    sampling_provider,
                    sampling_lock or trio.Lock(),
                    self.diagnostics,
                )
                options["sampling_callback"] = self.sampling
        if config.elicitation_policy is not Policy.DENY:
            self.elicitation = ElicitationGate(config, kernel, elicitor, self.diagnostics)
            options["elicitation_callback"] = self.elicitation
        self.pool = ConnectionPool(
            config,
            nursery,
            kernel.redactor,
            self.diagnostics,
            options,
            stdio_confiner=stdio_confiner,
            token_store=token_store,
            roots=kernel.roots,
        )
        self.pool.on_connect = self._on_connect

    # -- identity ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def target(self) -> str:
        """The command line or the display URL (query hidden): for messages and listings."""
        c = self.config
        if c.transport is Transport.STDIO:
            return " ".join([c.command or "", *c.args])
        return display_url(c.url or "")

    def resource_ref(self, uri: str) -> str:
        digest = hashlib.sha256(uri.encode("utf-8")).hexdigest()[:16]
        return f"mcp-resource:{self.config.part}:{digest}"

    async def _on_connect(self, live: LiveConnection) -> None:
        client = live.client
        info = client.server_info
        instructions = client.instructions
        if instructions:
            instructions = cap_text(self.redactor.redact(instructions), MAX_INSTRUCTIONS).text

        def cut(text: str | None) -> str | None:  # the server's own words: redacted, then cut
            return None if text is None else cap_text(self.redactor.redact(text), MAX_LABEL).text

        self.identity = {
            "name": cut(info.name) if info else None,
            "version": cut(info.version) if info else None,
            "title": cut(getattr(info, "title", None)) if info else None,
            "protocol_version": client.protocol_version,
            "instructions": instructions,
            "connection": live.generation,
            "sandbox": live.sandbox,
        }
        ledger = CapabilityLedger.from_initialize(
            client.server_capabilities, self.config.approved_capabilities
        )
        if self.ledger is None:
            self.ledger = ledger
        elif ledger.advertised != self.ledger.advertised:
            # Authority was fixed at the first connection of this session; a change waits for a new one.
            added = sorted(ledger.advertised - self.ledger.advertised)
            gone = sorted(self.ledger.advertised - ledger.advertised)
            self.diagnostics.fail(
                "capabilities",
                f"after reconnecting the server advertises {len(added)} capabilities more "
                f"({_some(added)}) and {len(gone)} fewer ({_some(gone)}); this session keeps "
                "its first ledger",
            )
        if live.generation > 1 and self.subscribed:
            await self._subscribe(client, self.subscribed)

    # -- callbacks from the server -------------------------------------------------------------

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        if self.ledger is None or not self.ledger.allows("logging"):
            return  # logging is pending or not advertised: not used
        data = params.data if isinstance(params.data, str) else repr(params.data)
        prefix = f"{params.logger}: " if params.logger else ""
        self.diagnostics.log("server", prefix + data, str(params.level))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.diagnostics.fail("transport", f"{type(message).__name__}: {message}")
            return
        if isinstance(message, types.LoggingMessageNotification | types.ProgressNotification):
            return
        method = getattr(message, "method", type(message).__name__)
        params = getattr(message, "params", None)
        data = (
            params.model_dump(mode="json", by_alias=True, exclude_none=True)
            if params is not None
            else {}
        )
        data.pop("_meta", None)
        kept = self.diagnostics.notify(method, params=data)["params"]  # redacted, cut
        if not self.config.subscribe_resources or method not in _STREAMED:
            return
        if method == "notifications/resources/updated" and data.get("uri") not in self.subscribed:
            return
        record, summary = self.notification_budget.admit(method)
        if summary is not None:
            self._emit_notification_summary(summary)
        if not record:
            return
        self.kernel.events.emit(
            "mcp_notification",
            self.kernel.session_id,
            server=self.config.name,
            method=method,
            params=kept,
        )

    def _emit_notification_summary(self, summary: dict[str, Any]) -> None:
        self.kernel.events.emit(
            "mcp_notification_summary", self.kernel.session_id, server=self.config.name, **summary
        )

    def flush_notifications(self) -> None:
        """Record the notifications and requests counted but not yet summarized (at the end)."""
        summary = self.notification_budget.take_summary()
        if summary is not None:
            with contextlib.suppress(RuntimeError):  # the event log closed first
                self._emit_notification_summary(summary)
        requests = self.diagnostics.requests.take_summary()
        if requests is not None:
            with contextlib.suppress(RuntimeError):
                self.kernel.events.emit(
                    REQUESTS_SUMMARY, self.kernel.session_id, server=self.config.name, **requests
                )

    async def _on_list_roots(self, context: Any) -> types.ListRootsResult:
        roots = [
            types.Root(uri=Path(r).as_uri(), name=Path(r).name or r) for r in self.config.roots
        ]
        self.diagnostics.notify("roots/list", answered=[str(r.uri) for r in roots])
        return types.ListRootsResult(roots=roots)

    # -- start: connect, record, list ----------------------------------------------------------

    async def start(self) -> None:
        """Connect, record the initialize result, and list what the ledger allows.

        Raises the translated error when the server cannot be connected or its
        tools cannot be listed.
        """
        await self.pool.connect()
        assert self.ledger is not None
        if self.ledger.allows("tools"):
            await self._list_tools()
        # What the start lists besides the tools (prompts; resources, templates, subscriptions)
        # shares one call's deadline, side by side: each had a deadline of its own, so a server
        # answering none of them held the session's start three or four deadlines more.
        seconds = self.config.call_timeout_seconds
        deadline = trio.current_time() + seconds
        try:
            async with trio.open_nursery() as nursery:
                if self.ledger.allows("prompts"):
                    nursery.start_soon(
                        self._by_deadline, self._list_prompts, "prompts/list", deadline, seconds
                    )
                if self.ledger.allows("resources"):
                    nursery.start_soon(
                        self._by_deadline, self._resources, "resources/list", deadline, seconds
                    )
        except BaseExceptionGroup as group:
            raise_single(group)  # _soft keeps ringfence's errors: a leaf is a bug, as it was
        self.specs = self._build_specs()

    async def _by_deadline(self, fn: Any, action: str, deadline: float, seconds: float) -> None:
        """``fn`` as :meth:`_soft` runs it, stopped at ``deadline`` keeping what it has."""
        with trio.move_on_at(deadline) as scope:
            await self._soft(fn, action)
        if scope.cancelled_caught:
            self.diagnostics.fail(
                action,
                f"{action} and what follows it at the start did not finish within {seconds:g}s "
                "of the tools' listing (time limit, call_timeout_seconds); what was listed by "
                "then is kept",
            )

    async def _resources(self) -> None:
        """The resources and their templates, then the subscriptions (when asked for), each
        failure kept in the diagnostics (a server without templates still has its resources
        watched)."""
        await self._soft(self._list_resources, "resources/list")
        assert self.ledger is not None
        if self.config.subscribe_resources and "resources.subscribe" in self.ledger.flags:
            live = self.pool.live
            if live is not None:
                await self._soft(
                    lambda: self._subscribe(live.client, [r["uri"] for r in self.resources]),
                    "subscribe",
                )

    async def _soft(self, fn: Any, action: str) -> None:
        try:
            await fn()
        except RingfenceError as exc:
            self.diagnostics.fail(action, exc)

    async def _paged(self, kind: str, method: Any, items_of: Any) -> Listing[Any]:
        async def fetch(cursor: str | None) -> tuple[list[Any], str | None]:
            page = await self.pool.run(
                kind, lambda c: method(c)(cursor=cursor, cache_mode="bypass")
            )
            return list(items_of(page)), page.next_cursor

        # One call's deadline for the whole listing, however many pages it takes.
        listing = await list_paginated(
            kind, fetch, self.limits, seconds=self.config.call_timeout_seconds
        )
        self.listings[kind] = listing
        if listing.problem:
            self.diagnostics.fail(kind, listing.problem)
        return listing

    async def _list_tools(self) -> None:
        listing = await self._paged("tools/list", lambda c: c.list_tools, lambda p: p.tools)
        by_name: dict[str, types.Tool] = {}
        for tool in listing.items:
            if tool.name in by_name:
                self.diagnostics.fail(
                    "tools/list", f"the server listed {tool.name!r} twice; the first is used"
                )
                continue
            by_name[tool.name] = tool
        kept, dropped = filter_names(by_name, self.config.allow_tools, self.config.deny_tools)
        self.dropped_tools = [
            {"remote_name": n, "reason": "allow_tools/deny_tools"} for n in dropped
        ]
        names = assign_names(self.config.part, kept, reserved=(READ_RESOURCE, GET_PROMPT))
        tools: list[RemoteTool] = []
        for remote in kept:
            t = by_name[remote]
            # A look-alike (Delete-All beside delete_all) gave it a suffix: a rule written for
            # the name it had keeps denying or asking for it (an autonomous mcp.notes.* with a
            # deny of mcp.notes.delete_all ran the renamed delete_all unasked).
            base = f"mcp.{self.config.part}.{sanitize_part(remote, 'tool')}"
            aliases = (base,) if names[remote] != base else ()
            consequence, reason = consequence_for(self.config, remote, t.annotations)
            schema = dict(t.input_schema or {"type": "object"})
            tools.append(
                RemoteTool(
                    remote_name=remote,
                    name=names[remote],
                    description=t.description or t.title or "",
                    input_schema=schema,
                    annotations=t.annotations.model_dump(by_alias=True, exclude_none=True)
                    if t.annotations
                    else None,
                    consequence=consequence,
                    consequence_reason=reason,
                    output_schema=t.output_schema,
                    aliases=aliases,
                )
            )
        self.tools = sorted(tools, key=lambda t: t.name)

    async def _list_prompts(self) -> None:
        listing = await self._paged("prompts/list", lambda c: c.list_prompts, lambda p: p.prompts)
        seen: set[str] = set()
        self.prompts = [p for p in listing.items if not (p.name in seen or seen.add(p.name))]

    async def _list_resources(self) -> None:
        listing = await self._paged(
            "resources/list", lambda c: c.list_resources, lambda p: p.resources
        )
        by_uri: dict[str, types.Resource] = {}
        for r in listing.items:
            by_uri.setdefault(str(r.uri), r)
        kept, dropped = filter_names(
            by_uri, self.config.allow_resources, self.config.deny_resources
        )
        self.dropped_resources = dropped
        self.resources = [
            {
                "uri": uri,
                "name": by_uri[uri].name,
                "mime_type": by_uri[uri].mime_type,
                "description": self.redactor.redact(by_uri[uri].description or ""),
                "ref": self.resource_ref(uri),
            }
            for uri in kept
        ]
        templates = await self._paged(
            "resources/templates/list",
            lambda c: c.list_resource_templates,
            lambda p: p.resource_templates,
        )
        kept_t, _ = filter_names(
            [t.uri_template for t in templates.items],
            self.config.allow_resources,
            self.config.deny_resources,
        )
        keep = set(kept_t)
        self.templates = [
            {"uri_template": t.uri_template, "name": t.name, "mime_type": t.mime_type}
            for t in templates.items
            if t.uri_template in keep
        ]

    async def _subscribe(self, client: Any, uris: list[str]) -> None:
        if len(uris) > MAX_SUBSCRIPTIONS:
            self.diagnostics.fail(
                "subscribe",
                f"subscribing to the first {MAX_SUBSCRIPTIONS} of {len(uris)} resources",
            )
            uris = uris[:MAX_SUBSCRIPTIONS]
        done: list[str] = []
        self.subscribed = done  # kept as they are made: the start's deadline may stop the rest
        # One call's deadline for them all: each had its own, and a server answering each
        # just inside it held a session's start (or a reconnect) 100 deadlines.
        seconds = self.config.call_timeout_seconds
        with trio.move_on_after(seconds) as scope:
            for uri in uris:
                request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
                await self.pool.run(
                    "resources/subscribe",
                    lambda c, r=request: c.session.send_request(r, types.EmptyResult),
                )
                done.append(uri)
        if scope.cancelled_caught:
            self.diagnostics.fail(
                "subscribe",
                f"subscribed to {len(done)} of {len(uris)} resources within {seconds:g}s "
                "(time limit, call_timeout_seconds); the rest are not watched",
            )
        del client

    # -- registry ------------------------------------------------------------------------------

    def _build_specs(self) -> list[ToolSpec]:
        specs: list[ToolSpec] = []
        for tool in self.tools:
            try:
                specs.append(tool_spec(self, tool))
            except RingfenceError as exc:
                self.diagnostics.fail(
                    "tools/list", f"{tool.remote_name!r} was not registered: {exc.message}"
                )
        prefix = f"mcp.{self.config.part}."
        for spec in (
            read_resource_spec(self, prefix + READ_RESOURCE),
            get_prompt_spec(self, prefix + GET_PROMPT),
        ):
            if spec is not None:
                specs.append(spec)
        return specs

    def autonomous_names(self) -> tuple[str, ...]:
        """Registered names of the tools ``autonomous_tools`` lets run without asking."""
        patterns = self.config.autonomous_tools
        out = []
        for spec in self.specs:
            remote = spec.meta.get("remote_name") or spec.name.rsplit(".", 1)[-1]
            if any(fnmatchcase(remote, p) for p in patterns):
                out.append(spec.name)
        return tuple(out)

    # -- diagnostics ---------------------------------------------------------------------------

    async def ping(self) -> dict[str, Any]:
        """Health: a ping round trip (2025-era protocols) on the pooled connection."""
        started = trio.current_time()
        live = self.pool.live
        if live is None:
            return {"ok": False, "detail": "not connected"}
        if not str(live.protocol_version).startswith("2025"):
            return {"ok": True, "detail": f"connected ({live.protocol_version} has no ping)"}
        try:
            await self.pool.run(
                "ping",
                lambda c: c.session.send_ping(),
                timeout=min(10.0, self.config.call_timeout_seconds),
            )
        except RingfenceError as exc:
            return {"ok": False, "detail": exc.message}
        return {"ok": True, "round_trip_ms": round((trio.current_time() - started) * 1000, 2)}

    def describe(self) -> dict[str, Any]:
        """Everything recorded about this server (redacted), as JSON-able data."""
        c = self.config
        return {
            "name": c.name,
            "transport": c.transport.value,
            "target": self.target,
            "trust": c.trust.value,
            "identity": self.identity,
            "ledger": self.ledger.to_dict() if self.ledger else None,
            "tools": [t.to_dict() for t in self.tools],
            "dropped_tools": self.dropped_tools,
            "prompts": [
                {"name": p.name, "arguments": [a.name for a in p.arguments or []]}
                for p in self.prompts
            ],
            "resources": self.resources,
            "dropped_resources": self.dropped_resources,
            "resource_templates": self.templates,
            "subscribed": self.subscribed,
            "listings": {k: v.to_dict() for k, v in self.listings.items()},
            "registered": [s.name for s in self.specs],
            "connections": self.pool.connects,
            **self.diagnostics.to_dict(),
        }
