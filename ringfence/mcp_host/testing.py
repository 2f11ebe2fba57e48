"""Stand-ins for the person and the model, for tests only.

:class:`FakeSamplingProvider` is not a model: it answers every sampling request
with a fixed or scripted text. :class:`ScriptedElicitor` answers elicitations
from a list or a function, like ``ScriptedApprover`` answers approvals. Neither
belongs in a real session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ._elicitation import ElicitationAnswer, ElicitationPrompt
from ._sampling import SamplingRequest, SamplingResponse

__all__ = ["FakeSamplingProvider", "ScriptedElicitor"]


class FakeSamplingProvider:
    """FOR TESTS ONLY. Answers with ``reply(request)`` (default: echoes the last message).

    Every request it receives is kept in ``requests`` so a test can check what
    a provider would have been sent.
    """

    def __init__(
        self,
        reply: Callable[[SamplingRequest], str] | None = None,
        model: str | None = None,
        tokens_used: int | None = None,
    ) -> None:
        self._reply = reply or (
            lambda r: f"fake reply to: {r.messages[-1][1] if r.messages else ''}"
        )
        self._model = model
        self._tokens = tokens_used
        self.requests: list[SamplingRequest] = []

    async def create_message(self, request: SamplingRequest) -> SamplingResponse:
        self.requests.append(request)
        return SamplingResponse(
            text=self._reply(request),
            model=self._model or request.model or "fake-model",
            tokens_used=self._tokens,
        )


class ScriptedElicitor:
    """FOR TESTS ONLY. Answers from a list (running out declines) or a function."""

    def __init__(
        self,
        answers: Iterable[ElicitationAnswer] | Callable[[ElicitationPrompt], ElicitationAnswer],
    ) -> None:
        self._fn = answers if callable(answers) else None
        self._queue = [] if callable(answers) else list(answers)
        self.prompts: list[ElicitationPrompt] = []

    async def elicit(self, prompt: ElicitationPrompt) -> ElicitationAnswer:
        self.prompts.append(prompt)
        if self._fn is not None:
            return self._fn(prompt)
        if not self._queue:
            return ElicitationAnswer("decline")
        return self._queue.pop(0)
