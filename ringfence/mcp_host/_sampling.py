"""Sampling: a server asks the host's model for a completion.

Default deny: with ``sampling_policy = "deny"`` (or no provider attached) the
client does not advertise sampling at all. Otherwise every request:

- gets its own trace id and ``mcp_sampling_*`` events;
- is refused if it offers tools, carries non-text content, or asks for more
  than ``sampling_max_tokens`` or more than is left of ``sampling_total_tokens``;
- under ``allow`` must resolve to a model in ``sampling_allowed_models``;
  under ``ask`` goes to the session's Approver every time;
- is sent to the :class:`SamplingProvider` with the server's own messages
  only: no conversation context (``includeContext`` is ignored) and no tools;
- runs behind one serialized lock shared by every server in the session;
- has registered secrets replaced by ``[REDACTED SECRET]`` in the text sent to
  the provider *and* in the text returned to the server.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import trio
from mcp import types

from ..runtime import ApprovalRequest, Choice
from ._manifest import Policy, ServerConfig

if TYPE_CHECKING:
    from ..runtime import Kernel
    from ._connection import Diagnostics

__all__ = ["SamplingGate", "SamplingProvider", "SamplingRequest", "SamplingResponse"]

USER_REJECTED = -1  # the spec's code for "the user rejected the request"


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
        messages: list[tuple[str, str]] = []
        for m in params.messages:
            blocks = m.content if isinstance(m.content, list) else [m.content]
            for block in blocks:
                if not isinstance(block, types.TextContent):
                    return refuse("ringfence accepts only text in sampling requests")
                messages.append((str(m.role), redact(block.text)))
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
        request = SamplingRequest(
            server=self.config.name,
            model=model,
            system_prompt=redact(params.system_prompt) if params.system_prompt else None,
            messages=tuple(messages),
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            stop_sequences=tuple(params.stop_sequences or ()),
        )
        if self.config.sampling_policy is Policy.ASK:
            answer = await self.kernel.approver.approve(
                ApprovalRequest(
                    tool=f"mcp.{self.config.part}.__sampling",
                    arguments={
                        "model": model,
                        "max_tokens": params.max_tokens,
                        "system_prompt": request.system_prompt,
                        "messages": [{"role": r, "text": t} for r, t in request.messages],
                    },
                    consequence="irreversible",
                    rule="sampling_policy:ask",
                    reason=f"MCP server {self.config.name!r} asks to sample a model",
                    origin="mcp-sampling",
                    trace_id=trace_id,
                )
            )
            events.emit(
                "mcp_sampling_answered",
                trace_id,
                server=self.config.name,
                choice=answer.choice.value,
            )
            if answer.choice is Choice.DENY:
                return refuse(f"the sampling request was declined ({answer.reason})", USER_REJECTED)
        async with self.lock:
            with trio.move_on_after(self.config.call_timeout_seconds) as scope:
                try:
                    response = await self.provider.create_message(request)
                except Exception as exc:
                    return refuse(
                        f"the sampling provider failed: {type(exc).__name__}", types.INTERNAL_ERROR
                    )
            if scope.cancelled_caught:
                return refuse("the sampling provider did not answer in time", types.REQUEST_TIMEOUT)
        if (
            model is not None
            and response.model not in self.config.sampling_allowed_models
            and self.config.sampling_allowed_models
        ):
            return refuse("the provider answered with a model outside sampling_allowed_models")
        used = response.tokens_used if response.tokens_used is not None else params.max_tokens
        self.tokens_used += max(0, used)
        text = redact(response.text)
        events.emit(
            "mcp_sampling_finished",
            trace_id,
            server=self.config.name,
            model=response.model,
            tokens=used,
            tokens_left=self.config.sampling_total_tokens - self.tokens_used,
        )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=text),
            model=response.model,
            stop_reason=response.stop_reason,
        )
