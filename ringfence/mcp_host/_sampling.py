"""Sampling: a server asks the host's model for a completion.

Default deny: with ``sampling_policy = "deny"`` (or no provider attached) the
client does not advertise sampling at all. Otherwise every request:

- gets its own trace id and ``mcp_sampling_*`` events;
- is refused if it offers tools, carries non-text content, or asks for more
  than ``sampling_max_tokens`` or more than is left of ``sampling_total_tokens``;
- under ``allow`` must resolve to a model in ``sampling_allowed_models``;
- is refused if what it would record (its messages' text and blocks, its system
  prompt, its stop sequences) holds more than
  :data:`MAX_SAMPLING_CHARACTERS` (1 Mi characters), before it is recorded, shown
  or sent: within the request budget (20 per 60 s) a server could otherwise have
  32 MiB written to the event log per request;
- then enters the Gate as a call of its own kind, ``mcp.<server>.__sampling``
  (irreversible; see :meth:`ringfence.runtime.Kernel.invoke_request`): the
  session's deny rules, posture, grants and approver apply and it is recorded
  like any call (``proposed`` … ``finished``). ``sampling_policy = "ask"`` is an
  ask rule on that name (and the request is residual, so it asks even before the
  rule is registered); ``"allow"`` an autonomous rule. A deny rule
  (``mcp.*``) refuses it. It is never registered as a tool: no agent can call it;
- is sent to the :class:`SamplingProvider` with the server's own messages
  only: no conversation context (``includeContext`` is ignored) and no tools;
- runs behind one serialized lock shared by every server in the session;
- has registered secrets replaced by ``[REDACTED SECRET]`` in the text sent to
  the provider *and* in the text returned to the server.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import trio
from mcp import types

from ..runtime._calls import CallContext, Outcome
from ..runtime._errors import Denied, ToolError, ToolTimeout
from ..runtime._tools import Consequence
from ..runtime.policy._decide import Rules
from ._requests import TOO_MANY, admit_request, request_rules, request_spec
from .manifest._load import Policy, ServerConfig

# The most text (messages and system prompt, in characters) one sampling request may hold.
MAX_SAMPLING_CHARACTERS = 1024 * 1024
# What one message block counts besides its text: its record's ``{"role": …, "text": …}``.
_ITEM_CHARACTERS = 32

if TYPE_CHECKING:
    from ..runtime._kernel import Kernel
    from ._diagnostics import Diagnostics

__all__ = ["SamplingGate", "SamplingProvider", "SamplingRequest", "SamplingResponse"]

USER_REJECTED = -1  # the spec's code for "the user rejected the request"
REQUEST_SUFFIX = "__sampling"

_NULLABLE_STRING = {"type": ["string", "null"]}
# What the Gate validates and records for a sampling request (texts already redacted).
SAMPLING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server": {"type": "string"},
        "model": _NULLABLE_STRING,
        "max_tokens": {"type": "integer", "minimum": 1},
        "system_prompt": _NULLABLE_STRING,
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"role": {"type": "string"}, "text": {"type": "string"}},
                "required": ["role", "text"],
                "additionalProperties": False,
            },
        },
        "temperature": {"type": ["number", "null"]},
        "stop_sequences": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["server", "model", "max_tokens", "system_prompt", "messages"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class SamplingRequest:
    """What a provider sees: the server's messages and bounds, nothing of the session."""

    server: str
    model: str | None
    system_prompt: str | None
    messages: tuple[tuple[str, str], ...]  # (role, text)
    max_tokens: int
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()


@dataclass(frozen=True)
class SamplingResponse:
    text: str
    model: str
    stop_reason: str | None = "endTurn"
    tokens_used: int | None = None


@runtime_checkable
class SamplingProvider(Protocol):
    """The host's model, as sampling sees it. One method; no tools, no context."""

    async def create_message(self, request: SamplingRequest) -> SamplingResponse: ...


def _too_large(params: types.CreateMessageRequestParams) -> str | None:
    """Why the request is over :data:`MAX_SAMPLING_CHARACTERS`, or None.

    Everything of it that would be recorded, shown or sent counts, not its text alone:
    the system prompt, each message block (its text, and :data:`_ITEM_CHARACTERS` for the
    record it becomes: 100,000 empty messages are ~3 MB of record) and each stop sequence
    (40,000 of them, 2.6 MB, went through while the text was two characters). Counted
    (lengths only) before anything is redacted or recorded.
    """
    text = len(params.system_prompt or "")
    blocks = 0
    for m in params.messages:
        for block in m.content if isinstance(m.content, list) else [m.content]:
            text += len(getattr(block, "text", None) or "")
            blocks += 1
    stops = list(params.stop_sequences or ())
    stop_characters = sum(len(stop) + 4 for stop in stops)  # quotes and separator recorded
    parts = {
        "text": text,
        "messages": blocks * _ITEM_CHARACTERS,
        "stop sequences": stop_characters,
    }
    total = sum(parts.values())
    if total <= MAX_SAMPLING_CHARACTERS:
        return None
    largest = max(parts, key=lambda k: parts[k])
    return (
        f"the sampling request holds {text:,} characters of text, {blocks:,} message blocks "
        f"and {len(stops):,} stop sequences: {total:,} characters as recorded, more than "
        f"ringfence's limit of {MAX_SAMPLING_CHARACTERS:,} (most of it in its {largest}); "
        "it was not recorded or sent"
    )


def _error(message: str, code: int = types.INVALID_REQUEST) -> types.ErrorData:
    return types.ErrorData(code=code, message=message)


class SamplingGate:
    """The ``sampling_callback`` for one server (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        kernel: Kernel,
        provider: SamplingProvider,
        lock: trio.Lock,
        diagnostics: Diagnostics,
    ) -> None:
        self.config = config
        self.kernel = kernel
        self.provider = provider
        self.lock = lock
        self.diagnostics = diagnostics
        self.tokens_used = 0
        self.spec = request_spec(
            config,
            REQUEST_SUFFIX,
            f"MCP server {config.name!r} asks the host's model for a completion",
            SAMPLING_SCHEMA,
            self._sample,
            consequence=Consequence.IRREVERSIBLE,
            policy=config.sampling_policy,
        )
        self.name = self.spec.name

    def rules(self) -> Rules:
        """The rules ``sampling_policy`` means, for the connector to register."""
        return request_rules(self.config.sampling_policy, self.name)

    def _choose_model(self, params: types.CreateMessageRequestParams) -> str | None:
        allowed = self.config.sampling_allowed_models
        hints = [
            h.name
            for h in ((params.model_preferences.hints or []) if params.model_preferences else [])
            if h.name
        ]
        for hint in hints:
            for model in allowed:
                if hint in model:
                    return model
        return allowed[0] if allowed else None

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        if not admit_request(self.kernel, self.config, self.diagnostics, "sampling/createMessage"):
            return _error(TOO_MANY, types.INVALID_REQUEST)
        trace_id = secrets.token_hex(8)
        events = self.kernel.events
        redact = self.kernel.redactor.redact
        events.emit(
            "mcp_sampling_requested",
            trace_id,
            server=self.config.name,
            max_tokens=params.max_tokens,
            messages=len(params.messages),
            include_context=params.include_context,
        )

        def refuse(message: str, code: int = types.INVALID_REQUEST) -> types.ErrorData:
            events.emit("mcp_sampling_refused", trace_id, server=self.config.name, reason=message)
            self.diagnostics.fail("sampling", message)
            return _error(message, code)

        if params.tools:
            return refuse("ringfence offers no tools to sampling requests")
        too_large = _too_large(params)
        if too_large is not None:
            # Before the request is recorded or shown: each one is a record (and a question).
            return refuse(too_large)
        messages: list[dict[str, str]] = []
        for m in params.messages:
            blocks = m.content if isinstance(m.content, list) else [m.content]
            for block in blocks:
                if not isinstance(block, types.TextContent):
                    return refuse("ringfence accepts only text in sampling requests")
                messages.append({"role": str(m.role), "text": redact(block.text)})
        if params.max_tokens > self.config.sampling_max_tokens:
            return refuse(
                f"maxTokens {params.max_tokens} exceeds sampling_max_tokens {self.config.sampling_max_tokens}"
            )
        left = self.config.sampling_total_tokens - self.tokens_used
        if params.max_tokens > left:
            return refuse(
                f"the session's sampling budget (sampling_total_tokens {self.config.sampling_total_tokens}) "
                f"has {left} tokens left"
            )
        model = self._choose_model(params)
        if self.config.sampling_policy is Policy.ALLOW and model is None:
            return refuse("no model in sampling_allowed_models")
        arguments = {
            "server": self.config.name,
            "model": model,
            "max_tokens": params.max_tokens,
            "system_prompt": redact(params.system_prompt) if params.system_prompt else None,
            "messages": messages,
            "temperature": params.temperature,
            "stop_sequences": list(params.stop_sequences or ()),
        }
        recorded = len(json.dumps(arguments, ensure_ascii=False))
        if recorded > MAX_SAMPLING_CHARACTERS:  # redaction's markers can lengthen short texts
            return refuse(
                f"the sampling request would be recorded as {recorded:,} characters, more than "
                f"ringfence's limit of {MAX_SAMPLING_CHARACTERS:,}; it was not recorded or sent"
            )
        # The one door: decided, asked, signed and recorded like every call.
        outcome: Outcome = await self.kernel.invoke_request(
            self.spec, arguments, origin="mcp-sampling", trace_id=trace_id
        )
        if outcome.error is not None:
            error = outcome.error
            if isinstance(error, Denied):
                return refuse(f"the sampling request was declined ({error.message})", USER_REJECTED)
            if isinstance(error, ToolTimeout):
                return refuse(error.message, types.REQUEST_TIMEOUT)
            return refuse(error.message, types.INTERNAL_ERROR)
        value = outcome.value
        events.emit(
            "mcp_sampling_finished",
            trace_id,
            server=self.config.name,
            model=value["model"],
            tokens=value["tokens"],
            tokens_left=self.config.sampling_total_tokens - self.tokens_used,
        )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=value["text"]),
            model=value["model"],
            stop_reason=value["stop_reason"],
        )

    async def _sample(self, args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        """The executor: what the Gate allowed goes to the provider, nothing else."""
        request = SamplingRequest(
            server=self.config.name,
            model=args["model"],
            system_prompt=args["system_prompt"],
            messages=tuple((m["role"], m["text"]) for m in args["messages"]),
            max_tokens=args["max_tokens"],
            temperature=args.get("temperature"),
            stop_sequences=tuple(args.get("stop_sequences") or ()),
        )
        async with self.lock:
            with trio.move_on_after(self.config.call_timeout_seconds) as scope:
                try:
                    response = await self.provider.create_message(request)
                except Exception as exc:
                    raise ToolError(f"the sampling provider failed: {type(exc).__name__}") from exc
            if scope.cancelled_caught:
                raise ToolTimeout("the sampling provider did not answer in time")
        allowed = self.config.sampling_allowed_models
        if request.model is not None and allowed and response.model not in allowed:
            raise ToolError("the provider answered with a model outside sampling_allowed_models")
        used = response.tokens_used if response.tokens_used is not None else request.max_tokens
        self.tokens_used += max(0, used)
        return {
            "text": response.text,  # the kernel redacts every string of the result
            "model": response.model,
            "stop_reason": response.stop_reason,
            "tokens": used,
        }
