"""The MCP server: a Kernel's tools on the wire, every call through the Gate.

:func:`build_server` returns the SDK's low-level :class:`mcp.server.Server`
whose two handlers are thin: ``tools/list`` renders the kernel's exposed
ToolSpecs, ``tools/call`` hands the call to ``kernel.invoke(name, arguments,
origin="mcp")`` and renders the Outcome. No decision is made here.

Wire rules:

* Descriptions are the front door's (:func:`~..runtime._providers.model_description`):
  an untrusted MCP server's tool (``--expose connectors``) says its text is that server's.
* Annotations come from the declared consequence: ``read`` → ``readOnlyHint``;
  ``reversible`` → ``destructiveHint: false``; ``irreversible`` →
  ``destructiveHint: true``. ``_meta`` carries the consequence and whether the
  tool is residual (asks first under every posture short of unrestricted).
* A refusal or failure is a *tool* error (``isError``) whose text starts with
  the ringfence error code and whose ``structuredContent`` is
  ``{"error": {"code", "message", ...}, "decision": …}``. Protocol errors are
  kept for protocol faults: an unknown (or unexposed) tool name is
  ``-32602``, as the MCP specification asks.
* Pagination: every list fits one page, so no cursor is ever issued; a
  request carrying one is ``-32602`` (invalid params), as the specification asks
  for a cursor the server does not recognise.
* ``resources``: the first workspace root's files, read-only, through the
  kernel's own ``glob_files``/``read_file`` (see :mod:`._resources`), when
  ``native`` tools are exposed.
* ``prompts``: the kernel's skills (``Kernel.skills()``: a trusted plugin's
  ``SKILL.md`` folders), each a prompt of its name whose one message is the
  skill's instructions and the names of its files; nothing of a skill runs.
* ``logging``: advertised when a :class:`~._logging.LogForwarder` is given;
  ``logging/setLevel`` subscribes the session to the event records at that level.
* Sessions: when several MCP sessions share the server (``session_key`` names
  the one a request belongs to: Streamable HTTP), each call runs as its
  session's (:meth:`Kernel.as_caller`): a "for this session" approval covers
  only that session's calls, and its event records go only to that session's
  log subscription. Over stdio there is one session, the kernel's.
* Only the handshake protocol era (2025-11-25 and earlier) is served: approvals
  need server-to-client requests in the middle of a call, which the 2026-07-28
  era does not have. A request carrying the 2026-07-28 envelope gets
  ``-32022`` naming the handshake versions, and SDK clients in ``auto`` mode
  fall back to the handshake.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import warnings
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import mcp_types as types
import trio
from mcp import MCPDeprecationWarning
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from .. import __version__
from ..runtime._calls import Outcome
from ..runtime._errors import InvalidArguments
from ..runtime._kernel import Kernel
from ..runtime._providers import model_description
from ..runtime._tools import Consequence, ToolSpec
from ._approver import ClientApprover, ClientChannel
from ._defaults import EXPOSE_CHOICES
from ._early import DESCRIPTION, INSTRUCTIONS, SERVER_NAME, TITLE, EarlyInitialize, EarlyWriter
from ._logging import LEVELS, LogForwarder
from ._resources import WorkspaceResources
from ._resume import streaming_call
from ._stdio import AnsweringReader, claim_stdio

__all__ = [
    "META_CONSEQUENCE",
    "META_RESIDUAL",
    "build_server",
    "exposed_tools",
    "parse_expose",
    "result_from_outcome",
    "serve_stdio",
    "tool_annotations",
    "tool_to_mcp",
]

META_CONSEQUENCE = "dev.ringfence/consequence"
META_RESIDUAL = "dev.ringfence/residual"


def parse_expose(value: str | Iterable[str]) -> frozenset[str]:
    """``"native,connectors"`` (or an iterable of words) → the set; unknown words raise."""
    words = value.split(",") if isinstance(value, str) else list(value)
    chosen = frozenset(w.strip() for w in words if w.strip())
    unknown = sorted(chosen - set(EXPOSE_CHOICES))
    if unknown or not chosen:
        raise InvalidArguments(
            f"--expose takes a comma-separated list of {', '.join(EXPOSE_CHOICES)}; got {value!r}",
            field="expose",
        )
    return chosen


def _selected(spec: ToolSpec, expose: frozenset[str]) -> bool:
    if spec.source == "native":
        return "native" in expose
    if spec.source.startswith("mcp:") or spec.source == "mcp-discovery":
        # A connector's tools, and the tools that search and list them.
        return "connectors" in expose
    return False  # a source we do not know is not exposed (fail closed)


def exposed_tools(kernel: Kernel, expose: frozenset[str]) -> dict[str, ToolSpec]:
    """The kernel's tools the server lists and accepts calls for, by name."""
    return {s.name: s for s in kernel.tools() if _selected(s, expose)}


def tool_annotations(spec: ToolSpec) -> types.ToolAnnotations:
    """MCP hints from the declared consequence (undeclared tools are irreversible)."""
    if spec.consequence is Consequence.READ:
        return types.ToolAnnotations(read_only_hint=True, destructive_hint=False)
    return types.ToolAnnotations(
        read_only_hint=False,
        destructive_hint=spec.consequence is Consequence.IRREVERSIBLE,
    )


def tool_to_mcp(spec: ToolSpec) -> types.Tool:
    """``spec`` as MCP's ``Tool``; described as the front door describes it to a model: an
    untrusted server's tool says that its descriptions are that server's text, not
    instructions (a client hands this listing to its model as a host hands
    ``Kernel.tool_definitions``)."""
    schema = dict(spec.input_schema)
    return types.Tool(
        name=spec.name,
        description=model_description(spec),
        input_schema=schema,
        annotations=tool_annotations(spec),
        meta={META_CONSEQUENCE: spec.consequence.value, META_RESIDUAL: spec.residual},
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def result_from_outcome(outcome: Outcome) -> types.CallToolResult:
    """Render an Outcome: a value as text (+ structured content), an error as ``isError``."""
    if outcome.error is not None:
        error = outcome.error.to_dict()
        structured: dict[str, Any] = {"error": error}
        if outcome.decision is not None:
            structured["decision"] = outcome.decision.to_dict()
        return types.CallToolResult(
            content=[types.TextContent(text=f"{error['code']}: {error['message']}")],
            structured_content=structured,
            is_error=True,
        )
    value = outcome.value
    if isinstance(value, str):
        return types.CallToolResult(content=[types.TextContent(text=value)])
    # Structured content must be a JSON object through 2025-11-25; the text block
    # carries the same JSON for clients that only read text.
    structured = value if isinstance(value, Mapping) else {"result": value}
    return types.CallToolResult(
        content=[types.TextContent(text=_json(value))], structured_content=dict(structured)
    )


class RefuseModernEra:
    """Server middleware: refuse requests that carry the 2026-07-28 envelope.

    That era forbids server-initiated requests, so the Gate could not ask the
    person mid-call. ``-32022`` with only handshake versions in ``supported``
    is what makes the SDK's ``auto`` clients fall back to ``initialize``.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        meta = ctx.params.get("_meta") if isinstance(ctx.params, Mapping) else None
        if (
            ctx.request_id is not None
            and isinstance(meta, Mapping)
            and types.PROTOCOL_VERSION_META_KEY in meta
        ):
            raise MCPError(
                code=types.UNSUPPORTED_PROTOCOL_VERSION,
                message="ringfence serve speaks the handshake protocol era (approvals need "
                "server-to-client requests); connect with initialize",
                data={
                    "supported": list(HANDSHAKE_PROTOCOL_VERSIONS),
                    "requested": str(meta.get(types.PROTOCOL_VERSION_META_KEY)),
                },
            )
        return await call_next(ctx)


def check_no_cursor(params: types.PaginatedRequestParams | None) -> None:
    """Raise -32602 for any cursor: this server lists everything on one page and issues none."""
    if params is not None and params.cursor is not None:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message="invalid cursor: ringfence serve lists everything on one page and issued no "
            "cursor; list again without one",
        )


def build_server(
    kernel: Kernel,
    *,
    expose: Iterable[str] = ("native",),
    logs: LogForwarder | None = None,
    session_key: Callable[[], str | None] | None = None,
) -> Server[Any]:
    """An MCP server for ``kernel``'s exposed tools; run it on a transport.

    ``expose`` selects tools by source: ``native`` (ringfence's own) and
    ``connectors`` (tools of configured MCP servers, source ``mcp:<name>``).
    The set is read per request, so tools registered later appear.

    When ``kernel.approver`` is a :class:`ClientApprover`, every call is put
    in flight on it, so the Gate's questions go to the calling client;
    otherwise the kernel's approver answers as it would anywhere.

    ``logs`` (the forwarder observing ``kernel``'s events) turns on the
    ``logging`` capability; someone must run ``logs.run()`` while serving.

    ``session_key`` (for a transport that serves several sessions) returns the
    session of the request running now; each call then runs as that session's
    (grants, log records: see the module docstring).

    Raises InvalidArguments for an unknown ``expose`` word.
    """
    chosen = parse_expose(expose)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        check_no_cursor(params)
        return types.ListToolsResult(
            tools=[tool_to_mcp(s) for s in exposed_tools(kernel, chosen).values()]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in exposed_tools(kernel, chosen):
            # The spec's answer to an unknown tool; nothing reaches the Gate.
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        arguments = params.arguments if params.arguments is not None else {}
        return result_from_outcome(await invoke(ctx, params.name, arguments))

    async def invoke(
        ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]
    ) -> Outcome:
        """One Gate call for this request; the Gate's questions go to this client."""
        trace_id = secrets.token_hex(8)
        approver = kernel.approver
        key = session_key() if session_key is not None else None
        with contextlib.ExitStack() as stack:
            stack.enter_context(streaming_call(ctx.close_sse_stream))  # close_sse_stream()
            # What --expose chose is all this call (and a script it starts) may reach.
            stack.enter_context(kernel.offering(exposed_tools(kernel, chosen)))
            if key is not None:
                stack.enter_context(kernel.as_caller(key))  # its grants are its own
                if logs is not None:
                    stack.enter_context(logs.call_of(key, trace_id))  # so are its records
            if isinstance(approver, ClientApprover):
                channel = ClientChannel.from_session(ctx.session, ctx.request_id)
                stack.enter_context(approver.in_flight(channel, trace_id))
            return await kernel.invoke(name, arguments, origin="mcp", trace_id=trace_id)

    # Workspace files as resources: with ringfence's own file tools, through them.
    files = (
        WorkspaceResources(kernel)
        if "native" in chosen and kernel.roots and _has_file_tools(kernel)
        else None
    )

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        assert files is not None
        cursor = params.cursor if params is not None else None
        return await files.list(partial(invoke, ctx), cursor)

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        assert files is not None
        return await files.read(partial(invoke, ctx), str(params.uri))

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        check_no_cursor(params)
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(name=skill.name, description=skill.description)
                for skill in kernel.skills()
            ]
        )

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        skill = next((k for k in kernel.skills() if k.name == params.name), None)
        if skill is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
        files = ", ".join(skill.file_names()) or "none"
        text = f"{skill.instructions}\n(skill {skill.name}; its files: {files})\n"
        return types.GetPromptResult(
            description=skill.description,
            messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))],
        )

    async def set_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        assert logs is not None
        if params.level not in LEVELS:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown level {params.level!r}")
        logs.set_level(
            session_key() if session_key is not None else None, ctx.session, params.level
        )
        return types.EmptyResult()

    with warnings.catch_warnings():
        # Logging is deprecated only in the 2026-07-28 era, which this server does not serve.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            SERVER_NAME,
            version=__version__,
            title=TITLE,
            description=DESCRIPTION,
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_set_logging_level=set_level if logs is not None else None,
            on_list_resources=list_resources if files is not None else None,
            on_read_resource=read_resource if files is not None else None,
            on_list_prompts=list_prompts if kernel.skills() else None,
            on_get_prompt=get_prompt if kernel.skills() else None,
        )
    server.middleware.insert(0, RefuseModernEra())
    return server


def _has_file_tools(kernel: Kernel) -> bool:
    names = {s.name for s in kernel.tools() if s.source == "native"}
    return {"read_file", "glob_files"} <= names


async def serve_stdio(
    kernel: Kernel,
    *,
    expose: Iterable[str] = ("native",),
    logs: LogForwarder | None = None,
    early: EarlyInitialize | None = None,
) -> None:
    """Serve ``kernel`` over this process's stdin/stdout until the client closes stdin.

    While serving, descriptors 0 and 1 are moved off the wire (see
    :func:`._stdio.claim_stdio`): stdin reads ``/dev/null`` and stdout writes
    to stderr, so a child process or a stray print cannot corrupt or steal the
    protocol stream. Cancellation ends it promptly, even mid-read.

    ``early``: what the command read (and answered) before the SDK was loaded
    (:mod:`._early`): read first, and the SDK's own answer to an ``initialize``
    answered early is not sent again.
    """
    server = build_server(kernel, expose=expose, logs=logs)
    with claim_stdio(early.consumed if early is not None else b"") as (lines, wire):
        out = EarlyWriter(wire, early) if early is not None and early.answered else wire
        async with (
            trio.open_nursery() as nursery,
            stdio_server(stdin=lines, stdout=out) as (read_stream, write_stream),  # type: ignore[arg-type]
        ):
            if logs is not None:
                nursery.start_soon(logs.run)
            # serve_loop, not Server.run: Server.run locks a stdio connection into the
            # 2026-07-28 era on the first enveloped request, so a refused probe could
            # not fall back to initialize on the same pipe.
            await serve_loop(
                server,
                AnsweringReader(read_stream, wire, lines),
                write_stream,
                lifespan_state={},
                init_options=server.create_initialization_options(),
            )
            nursery.cancel_scope.cancel()  # the client is gone: stop forwarding logs
