"""The event stream folded into sessions, calls and change sets: what a person reads.

One fold for every view of a stream: ``ringfence events show`` (text and
JSON) and the review page. A :class:`Timeline` takes records one at a time
(:meth:`Timeline.add`), so the page folds a live stream of 10,000 calls once,
not again on every refresh. It keeps each call's proposal, decision (the
rule, its ``file:line`` source and layer), approval, outcome and change sets
(``checkpoint``, with what the merge refused), and the line of the file each
call began on.

Nothing here escapes anything: the values are what the records hold; each
view renders them through :mod:`ringfence.runtime._render` (the page also
HTML-escapes). Records that are not objects, or whose fields have unexpected
types, are folded as far as they make sense (a tool that is not a string is
shown as its JSON) and never raise.

What a call keeps of a record are texts, never the parsed values: its arguments as
their JSON (parsed again when a view draws one call), its error's code and message,
the first :data:`MAX_KEPT_REFUSED` entries a merge refused. A parsed value holds many
times the bytes of its JSON (``[{},{},…]``: 72 bytes of objects for every 3 of text),
so until 2026-12-07 a stream of 48 MiB of such arguments held 1.2 GB of the page's
memory, whatever the page's bound on the lines it holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._events import OUTCOME_KINDS

__all__ = ["CallFilter", "CallRow", "SessionRow", "SetRecord", "Timeline"]

# How much of a call's output the page keeps for its detail view (the record may hold more).
MAX_KEPT_OUTPUT = 20_000
# How many entries of what a merge refused a change set keeps (the page shows 200).
MAX_KEPT_REFUSED = 200


def _text(value: Any) -> str:
    """A field shown as text: a string as it is, anything else as its JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _opt(value: Any) -> str | None:
    return None if value is None else _text(value)


def _json(value: Any) -> str:
    """``value`` as JSON text (sorted keys), whatever it is: parsed back by
    :attr:`CallRow.arguments`. orjson first (in C, a record's arguments of a million
    values in a fraction of a second), ``json`` for what it cannot write."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(repr(value), ensure_ascii=False)


def _error(error: dict[str, Any]) -> dict[str, Any]:
    """What a call keeps of its error: code and message as texts (the message as the
    output is kept), and the field it names, never the rest (``details`` may be anything)."""
    kept: dict[str, Any] = {
        "code": _opt(error.get("code")),
        "message": _text(error.get("message", ""))[:MAX_KEPT_OUTPUT],
    }
    if isinstance(error.get("field"), str):
        kept["field"] = error["field"][:MAX_KEPT_OUTPUT]
    return kept


@dataclass(slots=True)
class CallRow:
    """One call as the page lists it, folded from its records (texts only: module docstring)."""

    index: int
    session: int
    call_id: str
    trace_id: str | None
    parent_id: str | None
    tool: str
    origin: str | None
    ts: float
    line: int
    # The proposed arguments as JSON (sorted keys); None before a ``proposed`` record.
    arguments_json: str | None = None
    verdict: str | None = None
    rule: str | None = None
    source: str | None = None
    layer: str | None = None
    reason: str | None = None
    asked: bool = False
    approval: str | None = None
    approval_reason: str | None = None
    outcome: str | None = None
    error: dict[str, Any] | None = None
    output: str | None = None
    ended: float | None = None
    checkpoints: list[str] = field(default_factory=list)

    @property
    def duration_ms(self) -> float | None:
        return None if self.ended is None else round((self.ended - self.ts) * 1000, 3)

    @property
    def arguments(self) -> Any:
        """The proposed arguments, parsed from their text now (None: none proposed)."""
        return None if self.arguments_json is None else json.loads(self.arguments_json)

    @property
    def arguments_text(self) -> str:
        """The arguments as one JSON text (sorted keys); a text argument as itself."""
        text = self.arguments_json
        if text is None:
            return "{}"
        return json.loads(text) if text.startswith('"') else text

    @property
    def state(self) -> str:
        """What happened, in one word: the outcome, else where the call stands."""
        if self.outcome is not None:
            return self.outcome
        if self.verdict == "deny":
            return "denied"
        if self.asked and self.approval is None:
            return "asking"
        return "running"


@dataclass
class SessionRow:
    index: int
    trace_id: str | None
    ts: float
    line: int
    posture: str | None
    dry_run: bool
    sealed: bool = False
    calls: int = 0


@dataclass
class SetRecord:
    """What the stream says about one change set: the call that made it, and the merge."""

    set_id: str
    call_id: str | None
    tool: str | None
    refused: list[Any] = field(default_factory=list)
    undoes: str | None = None
    applies: str | None = None


@dataclass(frozen=True)
class CallFilter:
    """Which calls a view lists: each field narrows (empty: no narrowing)."""

    tool: str = ""
    verdict: str = ""
    state: str = ""
    origin: str = ""
    text: str = ""

    def matches(self, call: CallRow) -> bool:
        if self.tool and self.tool.lower() not in call.tool.lower():
            return False
        if self.verdict and (call.verdict or "") != self.verdict:
            return False
        if self.state and call.state != self.state:
            return False
        if self.origin and (call.origin or "") != self.origin:
            return False
        if self.text:
            needle = self.text.lower()
            hay = (call.call_id, call.tool, call.rule or "", call.arguments_text[:4096])
            if not any(needle in h.lower() for h in hay):
                return False
        return True

    @property
    def empty(self) -> bool:
        return not (self.tool or self.verdict or self.state or self.origin or self.text)


class Timeline:
    """Sessions, calls and change sets of one event stream, folded record by record."""

    def __init__(self) -> None:
        self.sessions: list[SessionRow] = []
        self.calls: list[CallRow] = []
        self.by_id: dict[str, CallRow] = {}
        self.sets: dict[str, SetRecord] = {}
        self.records = 0
        self.other_kinds: dict[str, int] = {}

    def add(self, record: Any, line: int) -> None:
        """Fold one record (``line``: its line in the stream, from 1)."""
        self.records += 1
        if not isinstance(record, dict):
            return
        kind = record.get("kind")
        ts = record.get("ts")
        ts = float(ts) if isinstance(ts, int | float) else 0.0
        if kind == "session_started" or not self.sessions:
            started = kind == "session_started"
            self.sessions.append(
                SessionRow(
                    len(self.sessions),
                    _opt(record.get("trace_id")) if started else None,
                    ts,
                    line,
                    _opt(record.get("posture")) if started else None,
                    bool(record.get("dry_run")) if started else False,
                )
            )
        session = self.sessions[-1]
        if kind == "session_sealed":
            session.sealed = True
            return
        if kind == "checkpoint" and isinstance(record.get("id"), str):
            self._checkpoint(record)
        call_id = record.get("call_id")
        if not isinstance(call_id, str):
            if isinstance(kind, str) and kind != "session_started":
                self.other_kinds[kind] = self.other_kinds.get(kind, 0) + 1
            return
        call = self.by_id.get(call_id)
        if call is None:
            call = CallRow(
                len(self.calls),
                session.index,
                call_id,
                _opt(record.get("trace_id")),
                _opt(record.get("parent_id")),
                _text(record.get("tool", "?")),
                _opt(record.get("origin")),
                ts,
                line,
            )
            self.by_id[call_id] = call
            self.calls.append(call)
            session.calls += 1
        if kind == "proposed":
            call.arguments_json = _json(record.get("arguments", {}))
            call.origin = _opt(record.get("origin"))
        elif kind == "decided":
            call.verdict = _opt(record.get("verdict"))
            call.rule = _opt(record.get("rule"))
            call.source = _opt(record.get("source"))
            call.layer = _opt(record.get("layer"))
            call.reason = _opt(record.get("reason"))
        elif kind == "approval_asked":
            call.asked = True
        elif kind == "approval_answered":
            call.approval = _opt(record.get("choice"))
            call.approval_reason = _opt(record.get("reason"))
        elif kind == "checkpoint" and isinstance(record.get("id"), str):
            call.checkpoints.append(record["id"])
        elif kind in OUTCOME_KINDS:
            call.outcome, call.ended = str(kind), ts
            error = record.get("error")
            call.error = _error(error) if isinstance(error, dict) else None
            output = record.get("output")
            if output is not None:
                call.output = _text(output)[:MAX_KEPT_OUTPUT]

    def _checkpoint(self, record: dict[str, Any]) -> None:
        refused = record.get("refused")
        self.sets[record["id"]] = SetRecord(
            record["id"],
            _opt(record.get("call_id")),
            _opt(record.get("tool")),
            [_text(r) for r in refused[:MAX_KEPT_REFUSED]] if isinstance(refused, list) else [],
            _opt(record.get("undoes")),
            _opt(record.get("applies")),
        )

    def add_all(self, records: Iterable[tuple[Any, int]]) -> None:
        for record, line in records:
            self.add(record, line)

    def select(self, flt: CallFilter) -> Iterator[CallRow]:
        """The calls ``flt`` admits, newest first."""
        for call in reversed(self.calls):
            if flt.matches(call):
                yield call
