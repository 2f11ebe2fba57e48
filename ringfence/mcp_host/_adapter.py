"""MCP tools, resources and prompts as ordinary kernel ToolSpecs.

A tool's consequence comes from the operator first (the manifest's
``irreversible_tools``, the policy files' ``[mcp.<server>]``); the server's own
annotations can only ever *raise* caution, unless the operator trusts the server:

1. ``irreversible_tools`` in the manifest → irreversible (nothing lowers it)
2. ``read_only_tools`` in the policy files' ``[mcp.<server>]`` (every layer
   that lists some must name the tool; the manifest's deprecated
   ``read_only_tools``/``read_tools`` count as one more list) → read
3. a trusted server (``trusted = true`` in a policy file; deprecated:
   ``trust = "trusted"`` in the manifest): ``readOnlyHint: true`` → read; ``destructiveHint: false``
   → reversible; anything else → irreversible
4. an untrusted server (the default): ``readOnlyHint: true`` (without an
   explicit ``destructiveHint: true``) or ``destructiveHint: false`` →
   reversible (a claim of read-only is not believed: the tool still asks under
   ``ask`` and is staged under dry run); anything else, including no
   annotations → irreversible

So ``read`` (no approval, runs under dry run) comes only from the operator.

Patterns in the manifest's tool lists are globs over the names the server
uses (``read_file``, ``Read File!``), not over registered names.

Every executor goes through the connector's pool (deadline, no replay) and
renders its result with :mod:`._results` (redacted, capped, framed). A writable
confined server's calls take turns, each followed by its writes' change set
(:func:`_call_server`).
Arguments have already been validated against the tool's input schema by the
Gate (``Kernel.authorize``) before the executor runs, so bad arguments never
reach the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, TypeVar

from mcp import types

from ..runtime._calls import CallContext
from ..runtime._errors import InvalidArguments, RingfenceError, ToolError
from ..runtime._output import cap_text
from ..runtime._tools import Consequence, ToolSpec
from ..runtime.policy._decide import RULE_ALIASES
from ._results import (
    RenderContext,
    ResultBudget,
    frame_untrusted,
    render_contents,
    render_resource_contents,
)
from ._tool_call import call_tool
from .manifest._load import ServerConfig, Trust

if TYPE_CHECKING:
    from ._connector import Connector

__all__ = [
    "GET_PROMPT",
    "READ_RESOURCE",
    "RemoteTool",
    "consequence_for",
    "get_prompt_spec",
    "read_resource_spec",
    "tool_spec",
]

T = TypeVar("T")

READ_RESOURCE = "__read_resource"
GET_PROMPT = "__get_prompt"
MAX_DESCRIPTION = 2000


@dataclass(frozen=True)
class RemoteTool:
    """A tool as the server listed it, with the name and consequence ringfence gives it."""

    remote_name: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] | None
    consequence: Consequence
    consequence_reason: str
    output_schema: Mapping[str, Any] | None = None  # checked by ringfence (see _tool_call)
    # The name it would have had without a look-alike (mcp.notes.delete_all beside Delete-All):
    # the rules written for that name still deny or ask for it (RULE_ALIASES).
    aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "remote_name": self.remote_name,
            "consequence": self.consequence.value,
            "consequence_reason": self.consequence_reason,
            "annotations": dict(self.annotations) if self.annotations else None,
        }


def _matches(name: str, patterns: Sequence[str]) -> str | None:
    return next((p for p in patterns if fnmatchcase(name, p)), None)


def consequence_for(
    config: ServerConfig, remote_name: str, annotations: types.ToolAnnotations | None
) -> tuple[Consequence, str]:
    """The consequence of one remote tool and the reason, per the module docstring.

    Promise: for a server the operator did not mark trusted, the result is never
    ``read`` unless ``read_only_tools`` names the tool (every list the policy layers
    hold about the server, see ``runtime._mcppolicy``); annotations only raise caution.
    """
    if (p := _matches(remote_name, config.irreversible_tools)) is not None:
        return Consequence.IRREVERSIBLE, f"irreversible_tools {p!r} in the manifest"
    read, why = config.read_only(remote_name)
    if read:
        return Consequence.READ, why
    trusted = config.trust is Trust.TRUSTED
    if annotations is None:
        return Consequence.IRREVERSIBLE, "the tool declares no annotations"
    if annotations.read_only_hint is True:
        if trusted:
            return Consequence.READ, "the tool's readOnlyHint is true (trusted server)"
        if annotations.destructive_hint is True:
            # Contradictory claims: the more cautious one counts.
            return Consequence.IRREVERSIBLE, "the tool declares destructiveHint true"
        loaded = (
            ""
            if config.mcp_policy is not None
            else " (no policy files were loaded for this session: create_kernel(policy=True) "
            "reads them)"
        )
        return (
            Consequence.REVERSIBLE,
            "the tool claims readOnlyHint, which an untrusted server cannot grant; "
            f"list it in read_only_tools under [mcp.{config.name}] in a policy file to treat it "
            f"as read{loaded}",
        )
    if annotations.destructive_hint is False:
        return Consequence.REVERSIBLE, "the tool's destructiveHint is false"
    return Consequence.IRREVERSIBLE, "the tool does not declare itself read-only or non-destructive"


def _describe(connector: Connector, text: str | None) -> str:
    c = connector.config
    label = f"[MCP server {c.name}" + ("" if c.trust is Trust.TRUSTED else ", untrusted") + "]"
    body = connector.redactor.redact((text or "").strip())
    return cap_text(f"{label} {body}".strip(), MAX_DESCRIPTION).text


def _render_ctx(connector: Connector, ctx: CallContext, source: str) -> RenderContext:
    c = connector.config
    return RenderContext(
        server=c.name,
        source=source,
        trusted=c.trust is Trust.TRUSTED,
        max_output_bytes=c.max_output_bytes,
        redactor=ctx.redactor,
        spool_dir=ctx.spool_dir,
    )


async def _call_server(
    connector: Connector,
    ctx: CallContext,
    action: str,
    fn: Callable[[Any], Awaitable[T]],
    render: Callable[[T], dict[str, Any]],
) -> dict[str, Any]:
    """One request on the pooled connection, its result rendered (``render`` may raise).

    A writable confined server's calls take turns, and after each one
    (answered, failed or timed out) what the server wrote becomes the call's
    change set (:meth:`~.transport._stdio.ConfinedWrites.settle`): the result
    says so under ``changes``; a refusal is the call's error, naming what was
    refused; a failed call's error carries ``changes`` in its details.
    """
    pool = connector.pool
    if (await pool.connect()).writes is None:
        # Nothing to read after the call, so nothing to take turns for: the call alone
        # (what turn() would yield None around, without its generator on every call).
        return render(await pool.run(action, fn))
    async with pool.turn() as writes:
        if writes is None:
            return render(await pool.run(action, fn))
        try:
            out = render(await connector.pool.run(action, fn))
        except RingfenceError as exc:
            try:
                settled = await writes.settle(ctx, {})
            except RingfenceError as refusal:
                raise refusal.with_(
                    message=f"{refusal.message} (the call itself failed: {exc.message})"
                ) from exc
            if settled.get("changes") is None:
                raise exc from exc.__cause__
            details = {**exc.details, "changes": settled["changes"]}
            raise exc.with_(details=details) from exc.__cause__
        return await writes.settle(ctx, out)


def tool_spec(connector: Connector, tool: RemoteTool) -> ToolSpec:
    """A ToolSpec whose executor calls ``tool`` on the connector's pooled connection."""
    remote = tool.remote_name

    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        def render(result: types.CallToolResult) -> dict[str, Any]:
            rendered = render_contents(
                _render_ctx(connector, ctx, f"tool {remote}"),
                result.content,
                result.structured_content,
            )
            if result.is_error:
                # ``tool`` is ringfence's name: the server's own stays inside the frame.
                raise ToolError(
                    f"{tool.name} reported an error:\n{rendered['text']}",
                    server=connector.config.name,
                    tool=tool.name,
                )
            return rendered

        return await _call_server(
            connector,
            ctx,
            f"tools/call {tool.name}",  # ringfence's name: an error's first line is outside the frame
            lambda client: call_tool(
                client,
                remote,
                args,
                tool=tool.name,
                output_schema=tool.output_schema,
                frame=lambda text: frame_untrusted(
                    ctx.redactor.redact(text), connector.config.name, f"tool {remote}"
                ),
            ),
            render,
        )

    return ToolSpec(
        name=tool.name,
        description=_describe(connector, tool.description),
        input_schema=dict(tool.input_schema),
        executor=run,
        consequence=tool.consequence,
        source=f"mcp:{connector.config.name}",
        meta={
            "kind": "mcp_tool",
            "server": connector.config.name,
            "remote_name": remote,
            "annotations": dict(tool.annotations) if tool.annotations else None,
            "consequence_reason": tool.consequence_reason,
            "trust": connector.config.trust.value,
            **({RULE_ALIASES: tool.aliases} if tool.aliases else {}),
        },
    )


def read_resource_spec(connector: Connector, name: str) -> ToolSpec | None:
    """``mcp.<server>.__read_resource``: reads only the approved resource inventory.

    Reversible (not read): what comes back is external, untrusted context.
    """
    resources = connector.resources
    if not resources:
        return None
    uris = [r["uri"] for r in resources]
    listed = "\n".join(f"- {r['uri']} (ref {r['ref']})" for r in resources[:50])
    more = f"\n… and {len(resources) - 50} more" if len(resources) > 50 else ""
    allowed = set(uris)

    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        uri = args["uri"]
        if (
            uri not in allowed
        ):  # the schema's enum already says so; this is the executor's own check
            raise InvalidArguments(
                f"{uri!r} is not an approved resource of {connector.config.name}", field="uri"
            )

        def render(result: types.ReadResourceResult) -> dict[str, Any]:
            out = render_resource_contents(
                _render_ctx(connector, ctx, f"resource {uri}"), uri, result.contents
            )
            out["ref"] = connector.resource_ref(uri)
            return out

        return await _call_server(
            connector, ctx, "resources/read", lambda client: client.read_resource(uri), render
        )

    return ToolSpec(
        name=name,
        description=_describe(
            connector, f"Read one approved resource of this server by URI.\n{listed}{more}"
        ),
        input_schema={
            "type": "object",
            "properties": {"uri": {"type": "string", "enum": uris}},
            "required": ["uri"],
            "additionalProperties": False,
        },
        executor=run,
        consequence=Consequence.REVERSIBLE,
        source=f"mcp:{connector.config.name}",
        meta={"kind": "mcp_resource_reader", "server": connector.config.name},
    )


def get_prompt_spec(connector: Connector, name: str) -> ToolSpec | None:
    """``mcp.<server>.__get_prompt``: fetches one approved prompt, framed like any result."""
    prompts = connector.prompts
    if not prompts:
        return None
    names = [p.name for p in prompts]
    listed = "\n".join(
        f"- {p.name}" + (f"({', '.join(a.name for a in p.arguments or [])})" if p.arguments else "")
        for p in prompts[:50]
    )

    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        prompt = args["name"]
        arguments = {str(k): str(v) for k, v in (args.get("arguments") or {}).items()}

        def render(result: types.GetPromptResult) -> dict[str, Any]:
            # One result, whatever the number of messages: they share its attachments and
            # links, and its max_output_bytes of text (frames included); messages past it
            # are counted, never rendered.
            rctx = _render_ctx(connector, ctx, f"prompt {prompt}")
            budget = ResultBudget()
            left = rctx.max_output_bytes
            messages = []
            omitted = 0
            for m in result.messages:
                if left <= 0:
                    omitted += 1
                    continue
                rendered = render_contents(
                    replace(rctx, max_output_bytes=left), [m.content], budget=budget
                )
                rendered["role"] = m.role
                messages.append(rendered)
                left -= len(rendered["text"].encode("utf-8", "surrogatepass"))
            out: dict[str, Any] = {"server": connector.config.name, "messages": messages}
            if omitted:
                out["messages_omitted"] = omitted
            if rctx.trusted:  # the server chose the name: untrusted, it is in each frame's label
                out["prompt"] = prompt
            return out

        return await _call_server(
            connector,
            ctx,
            "prompts/get",  # the name is the server's: it stays inside the frame
            lambda client: client.get_prompt(prompt, arguments or None),
            render,
        )

    return ToolSpec(
        name=name,
        description=_describe(connector, f"Get one of this server's prompts by name.\n{listed}"),
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": names},
                "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        executor=run,
        consequence=Consequence.REVERSIBLE,
        source=f"mcp:{connector.config.name}",
        meta={"kind": "mcp_prompt_getter", "server": connector.config.name},
    )
