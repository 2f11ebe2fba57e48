"""What the page can do, and the guards between a click and the deed.

Every action is two requests: *prepare* (nothing happens; the page shows what
the action will do and a confirmation bound to exactly that) and *confirm*
(:class:`Confirmations`: a single-use 128-bit nonce, valid from
:data:`MIN_CONFIRM_SECONDS` to :data:`CONFIRM_TTL_SECONDS` after it was
made, so a stale page, a double click or a replay does nothing). Confirms are
rate limited (:class:`RateLimit`: a burst of :data:`BURST` then one per
:data:`REFILL_SECONDS`).

What a confirmed action may do is fixed here and nowhere widened:

- answer a question the Gate asked (once, for this session with the
  terminal's patterns, or deny): the approver hands the answer to the Gate;
- undo change sets: one ``undo`` call over them all (``id`` their list), through the
  session's Gate (``kernel.invoke(..., origin="review")``), the code path of ``ringfence
  undo``: one operation in the journal, rolled back whole when killed midway;
- apply a plan: ``kernel.apply_plan`` (what ``plan apply`` does), bound to the
  plan file's bytes as they were shown, never with ``--rebase-roots`` or
  ``--allow-looser-posture``.

There is no action that changes a rule, the posture or the approver. Each
confirmed action is recorded (``review_action``) before it runs; the Gate
records the calls it makes.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BURST",
    "CONFIRM_TTL_SECONDS",
    "MIN_CONFIRM_SECONDS",
    "REFILL_SECONDS",
    "Confirmations",
    "Job",
    "Pending",
    "RateLimit",
    "Views",
]

MIN_CONFIRM_SECONDS = 0.5
CONFIRM_TTL_SECONDS = 120.0
MAX_OUTSTANDING = 32
MAX_VIEWS = 64
BURST = 10
REFILL_SECONDS = 2.0


@dataclass(frozen=True)
class Pending:
    """A prepared action: what it is, exactly which target, and when it was shown."""

    nonce: str
    action: str  # "answer", "undo" or "apply"
    params: dict[str, Any]
    made: float  # time.monotonic()


class Confirmations:
    """Single-use, short-lived confirmations (see the module docstring)."""

    def __init__(self, *, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._pending: dict[str, Pending] = {}

    def make(self, action: str, params: dict[str, Any]) -> Pending:
        now = self._clock()
        for nonce, p in list(self._pending.items()):
            if now - p.made > CONFIRM_TTL_SECONDS:
                del self._pending[nonce]
        while len(self._pending) >= MAX_OUTSTANDING:
            self._pending.pop(next(iter(self._pending)))  # the oldest goes
        pending = Pending(secrets.token_urlsafe(16), action, dict(params), now)
        self._pending[pending.nonce] = pending
        return pending

    def take(self, nonce: str) -> Pending | str:
        """The action to run (the nonce is spent), or why not (too fast: the nonce stays)."""
        pending = self._pending.get(nonce)
        if pending is None:
            return (
                "this confirmation is not valid (already used, expired, or not made by this "
                "page): nothing was done; prepare the action again"
            )
        age = self._clock() - pending.made
        if age > CONFIRM_TTL_SECONDS:
            del self._pending[nonce]
            return (
                f"this confirmation expired ({CONFIRM_TTL_SECONDS:g} s): nothing was done; "
                "prepare the action again"
            )
        if age < MIN_CONFIRM_SECONDS:
            return (
                f"confirmed {age:.2f} s after it was shown, before {MIN_CONFIRM_SECONDS:g} s: "
                "nothing was done; read what you confirm, then confirm again"
            )
        del self._pending[nonce]
        return pending


class Views:
    """What a page showed, kept by the page under a random id its forms carry back.

    A change set's page is drawn from the store as it was then; its Undo is bound to the
    sets of that view (never to the store as it stands at the click, nor to a list the
    browser sends), so a set made while the person read, over the paths the Undo would
    restore, refuses it. At most :data:`MAX_VIEWS` are kept (the oldest goes: its forms
    are refused, "look again"), each the set it showed and the ids the store held.
    """

    def __init__(self) -> None:
        self._views: dict[str, tuple[str, tuple[str, ...]]] = {}

    def make(self, shown: str, ids: list[str]) -> str:
        """A new view of the set ``shown`` drawn from a store holding ``ids``: its id."""
        while len(self._views) >= MAX_VIEWS:
            self._views.pop(next(iter(self._views)))
        view = secrets.token_urlsafe(16)
        self._views[view] = (shown, tuple(ids))
        return view

    def get(self, view: str, shown: str) -> tuple[str, ...] | None:
        """The ids of the view ``view`` when it showed ``shown``, else None."""
        found = self._views.get(view)
        return found[1] if found is not None and found[0] == shown else None


@dataclass
class RateLimit:
    """A token bucket: ``burst`` confirms at once, then one per ``refill_seconds``."""

    burst: int = BURST
    refill_seconds: float = REFILL_SECONDS
    clock: Any = time.monotonic
    _tokens: float = field(default=-1.0)
    _at: float = 0.0

    def take(self) -> float:
        """0.0 when allowed (a token is spent), else the seconds until the next one."""
        now = self.clock()
        if self._tokens < 0:
            self._tokens, self._at = float(self.burst), now
        self._tokens = min(self.burst, self._tokens + (now - self._at) / self.refill_seconds)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) * self.refill_seconds


@dataclass
class Job:
    """A confirmed action running (or done): what it is, its lines of result."""

    id: str
    action: str
    title: str
    started: float
    done: bool = False
    ok: bool | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (status, text)
