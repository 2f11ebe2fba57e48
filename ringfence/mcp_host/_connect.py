"""Connecting a manifest's servers to a kernel: the API hosts use.

::

    async with create_kernel(...) as kernel:
        async with connect_servers(kernel, load_manifests()) as connectors:
            await kernel.call("mcp.files.read_text_file", {"path": "/srv/a.txt"})

or, tied to the kernel's lifetime, in a nursery the host owns::

    async with trio.open_nursery() as nursery, create_kernel(...) as kernel:
        connectors = await attach_connectors(kernel, load_manifests(), nursery=nursery)

Each server is one :class:`~ringfence.mcp_host._connector.Connector`;
:class:`Connectors` holds a session's connectors by name, registers their tools
(in manifest order) and rules, and stops them together.

Servers connect concurrently. A server that cannot be connected is recorded in
``connectors.failures`` and an ``mcp_connect_failed`` event (its tools are
simply absent); pass ``strict=True`` to make that an error instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import trio

from ..runtime._errors import InvalidArguments, RingfenceError, Unavailable
from ..runtime._groups import raise_single
from ..runtime._kernel import Kernel, RulesHandle
from ..runtime._tools import ToolSpec
from ..runtime.policy._decide import Rules
from ..runtime.policy._mcp import McpPolicy
from ._connector import Connector
from ._elicitation import Elicitor
from ._inventory import DEFAULT_LIMITS, ListLimits
from ._sampling import SamplingProvider
from .manifest._load import Manifest, ServerConfig
from .transport._stdio import StdioConfiner

if TYPE_CHECKING:
    from .oauth._tokens import SealedStore

__all__ = ["Connectors", "attach_connectors", "connect_servers", "start_connectors"]


class Connectors:
    """The connectors of one session, by server name, plus servers that failed to connect."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._by_name: dict[str, Connector] = {}
        self.failures: dict[str, RingfenceError] = {}
        self.discovery: Any = None
        self._registered: list[str] = []
        self._rule_handles: list[RulesHandle] = []

    def __getitem__(self, name: str) -> Connector:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Connector]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def visible_tools(self) -> list[ToolSpec]:
        """What a host should show a model: everything, or in discovery mode the
        discovery tools, non-MCP tools and the MCP tools already inspected."""
        if self.discovery is None:
            return self.kernel.tools()
        return self.discovery.visible_tools()

    def _register(self, connector: Connector) -> None:
        for spec in connector.specs:
            self.kernel.register(spec)
            self._registered.append(spec.name)
        self._by_name[connector.name] = connector

    def _add_autonomous(self) -> None:
        """Register each server's rules (autonomous tools, sampling/elicitation policy) once,
        through the kernel's owner handle; :meth:`aclose` withdraws them."""
        for c in self:
            rules = [Rules(autonomous=c.autonomous_names())]
            rules += [g.rules() for g in (c.sampling, c.elicitation) if g is not None]
            merged = Rules(
                ask=tuple(p for r in rules for p in r.ask),
                autonomous=tuple(p for r in rules for p in r.autonomous),
            )
            if merged.ask or merged.autonomous:
                self._rule_handles.append(self.kernel.add_rules(f"mcp:{c.name}", merged))

    async def aclose(self) -> None:
        """Stop every server and take their tools out of the registry. Idempotent."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as n:
                for c in self._by_name.values():
                    n.start_soon(c.pool.aclose)
        for c in self._by_name.values():
            c.flush_notifications()
        if self.discovery is not None:
            self.discovery.uninstall()
            self.discovery = None
        for name in self._registered:
            self.kernel.registry.remove(name)
        self._registered.clear()
        for handle in self._rule_handles:
            handle.remove()
        self._rule_handles.clear()


async def start_connectors(
    kernel: Kernel,
    manifest: Manifest,
    nursery: trio.Nursery,
    *,
    workspace: str | os.PathLike[str] | None = None,
    names: Iterable[str] | None = None,
    sampling_provider: SamplingProvider | None = None,
    elicitor: Elicitor | None = None,
    tool_discovery: bool | None = None,
    strict: bool = False,
    limits: ListLimits = DEFAULT_LIMITS,
    stdio_confiner: StdioConfiner | None = None,
    token_store: SealedStore | None = None,
) -> Connectors:
    """Connect the manifest's enabled servers into ``nursery`` and register their tools.

    ``stdio_confiner`` starts ``sandbox = "local"`` servers confined (``create_kernel``
    passes the local backend's); without one such a server fails to connect.
    ``token_store`` holds OAuth servers' tokens (default ``SealedStore.default()``).

    The ``[mcp.<server>]`` policy of a kernel made with ``create_kernel(policy=...)``
    (``policy=True``: the user's files) decides each server's trust and read tools.

    The connections live in ``nursery`` until ``await connectors.aclose()``
    (which stops every server and unregisters its tools; it may be called from
    any task). Raises (only with ``strict=True``) the first connection error,
    after stopping whatever did connect.
    """
    connectors = Connectors(kernel)
    lock = trio.Lock()  # one serialized sampling adapter for the whole session
    wanted = set(names) if names is not None else None
    # The kernel's [mcp.<server>] policy (create_kernel(policy=...)) decides trust and read
    # tools, however the servers are connected; a config that carries its own is kept.
    policy: McpPolicy | None = kernel.extensions.get("mcp_policy")
    configs = [
        (s if policy is None or s.mcp_policy is not None else s.with_policy(policy)).expanded(
            workspace
        )
        for s in manifest.servers
        if s.enabled and (wanted is None or s.name in wanted)
    ]
    started: dict[str, Connector] = {}
    # One server per registered part: a second "Notes" beside "notes" would add tools to
    # mcp.notes.* under the first one's rules and grants. The later one is not started.
    parts: dict[str, ServerConfig] = {}
    for config in list(configs):
        if (first := parts.setdefault(config.part, config)) is config:
            continue
        configs.remove(config)
        refused = InvalidArguments(
            f"server {config.name!r} would register as mcp.{config.part}.*, as {first.name!r} "
            "does; rename one of them",
            field="name",
        )
        connectors.failures[config.name] = refused
        kernel.events.emit(
            "mcp_connect_failed", kernel.session_id, server=config.name, error=refused.to_dict()
        )

    async def start_one(config: ServerConfig) -> None:
        connector = Connector(
            config,
            kernel,
            nursery,
            sampling_provider=sampling_provider,
            sampling_lock=lock,
            elicitor=elicitor,
            limits=limits,
            stdio_confiner=stdio_confiner,
            token_store=token_store,
        )
        try:
            await connector.start()
        except RingfenceError as exc:
            await connector.pool.aclose()
            connectors.failures[config.name] = exc
            kernel.events.emit(
                "mcp_connect_failed", kernel.session_id, server=config.name, error=exc.to_dict()
            )
            return
        except BaseException:
            await connector.pool.aclose()
            raise
        started[config.name] = connector

    try:
        async with trio.open_nursery() as starters:
            for config in configs:
                starters.start_soon(start_one, config)
        if strict and connectors.failures:
            name, error = next(iter(connectors.failures.items()))
            raise Unavailable(
                f"MCP server {name!r} could not be connected: {error.message}"
            ) from None
        for config in configs:  # manifest order, whatever order they finished in
            if config.name in started:
                connector = started.pop(config.name)
                connectors._register(connector)
                kernel.events.emit(
                    "mcp_connected",
                    kernel.session_id,
                    server=connector.name,
                    protocol_version=connector.identity.get("protocol_version"),
                    server_info={k: connector.identity.get(k) for k in ("name", "version")},
                    ledger=connector.ledger.to_dict() if connector.ledger else None,
                    tools=[s.name for s in connector.specs],
                    sandbox=connector.identity.get("sandbox"),
                )
        connectors._add_autonomous()
        discovery = manifest.tool_discovery if tool_discovery is None else tool_discovery
        if discovery:
            from ._discovery import Discovery

            connectors.discovery = Discovery.install(kernel, connectors)
    except BaseException as exc:
        with trio.CancelScope(shield=True):
            for connector in started.values():
                await connector.pool.aclose()
            await connectors.aclose()
        if isinstance(exc, BaseExceptionGroup):
            raise_single(exc)
        raise
    return connectors


@contextlib.asynccontextmanager
async def connect_servers(
    kernel: Kernel, manifest: Manifest, **options: Any
) -> AsyncIterator[Connectors]:
    """Connect the manifest's servers for the duration of the ``async with`` block.

    Options are those of :func:`start_connectors` (``workspace``, ``names``,
    ``sampling_provider``, ``elicitor``, ``tool_discovery``, ``strict``,
    ``limits``, ``stdio_confiner``, ``token_store``). On exit every server is stopped (cancellation or not) and
    its tools are unregistered. An exception from the block propagates as
    itself, not wrapped in an exception group.
    """
    try:
        async with trio.open_nursery() as nursery:
            connectors = await start_connectors(kernel, manifest, nursery, **options)
            try:
                yield connectors
            finally:
                await connectors.aclose()
                nursery.cancel_scope.cancel()  # stray stderr readers
    except BaseExceptionGroup as group:
        # The connection tasks never raise, so a group here holds one real error (the
        # caller's block or a connect failure): raise that error itself, not a group.
        raise_single(group)


async def attach_connectors(
    kernel: Kernel, manifest: Manifest, *, nursery: trio.Nursery, **options: Any
) -> Connectors:
    """Connect into a nursery the host owns; the servers stop when the kernel closes.

    Trio-style: the connections need a nursery that outlives this call, so
    the host passes one::

        async with trio.open_nursery() as nursery, create_kernel(...) as kernel:
            connectors = await attach_connectors(kernel, manifest, nursery=nursery)

    ``kernel.aclose()`` stops every server (``connectors.aclose()`` is
    registered with ``kernel.push_async_callback``).
    """
    connectors = await start_connectors(kernel, manifest, nursery, **options)
    kernel.push_async_callback(connectors.aclose)
    return connectors
