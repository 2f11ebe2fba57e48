"""Dry-run plans: the staged non-read calls of a session, reviewable and appliable once.

A plan file is JSON (version 2)::

    {"ringfence_plan": 2, "key_id": "…", "roots": [...], "calls": [...],
     "applied": {call_id: {"at": ts, "session": id}}, "written_at": ts, "mac": "…"}

- ``mac`` is an HMAC-SHA256 over the canonical form of everything but
  ``written_at`` and ``mac`` (roots, calls, applied marks), keyed by the local
  secret ``$RINGFENCE_HOME/keys/plan.key`` (32 random bytes, mode 0600, made
  on first staging). Anyone without that key cannot edit a call, drop an
  applied mark or change the roots without the plan being refused. A plan is
  therefore bound to the machine (the ``RINGFENCE_HOME``) that staged it;
  ``key_id`` (a SHA-256 prefix of the key, which says nothing usable about it)
  tells "signed with a different key" apart from "edited".
- Each call records the ``session`` and ``posture`` it was staged under; the
  plan records the workspace ``roots``. Staging into an existing plan file
  appends (its MAC is checked first), and only with the same roots.
- Applying re-enters every call into the Gate (staging grants nothing): see
  :meth:`ringfence.runtime.Kernel.apply_plan`. Each call is marked applied
  (time, session) once the Gate has allowed it and *before* it runs, twice: in the plan file (MAC'd) and in
  the ledger ``$RINGFENCE_HOME/plans/applied/<call_id>`` (created exclusively,
  so two concurrent applies cannot both run a call, and a copy of the plan
  taken before applying is refused too). A call the Gate refused (a rule, a
  person's no, no one to ask) is not marked: the plan is spent only by calls that
  ran, and applying it again runs the calls not yet applied; a plan whose every
  call is marked, in the file or the ledger, is refused.

When the call has run, its ledger entry is rewritten with its end (``ended``, ``ok``,
``error``) beside the id of the call that ran it (``call``): a mark without an end is a call
ringfence stopped while it ran (killed), which ``plan show`` and ``plan apply`` name, with
what became of its writes (the next start rolled back a write under way) and how to make
it by hand; it is never run again.

Not promised: someone who can delete the ledger *and* restore an old copy of
the plan can apply it again (both live where the user can write); a call
marked applied may not have run (the process died between the mark and the call:
its end is then missing, and said so).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._canonical import canonical_json, loads
from ._errors import Denied, InvalidArguments, Unwritable
from ._files import (
    atomic_write,
    create_whole,
    load_or_create_key,
    read_named_file,
    ringfence_home,
)
from ._redact import redact_in_place
from ._render import when_text

__all__ = ["AppliedMark", "Plan", "StagedCall", "ledger_dir", "ledger_note", "plan_key_path"]

PLAN_VERSION = 2
# The most of a plan file ``plan show``/``plan apply`` read (the review page reads 128 MiB).
MAX_PLAN_FILE_BYTES = 1 << 30
KEY_NAME = "plan.key"
KEY_BYTES = 32


def plan_key_path() -> Path:
    """Where the key that authenticates plans lives: ``$RINGFENCE_HOME/keys/plan.key``."""
    return ringfence_home() / "keys" / KEY_NAME


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"ringfence plan key id\0" + key).hexdigest()[:16]


def _existing_key() -> bytes | None:
    """The plan key if there is one; never creates it."""
    try:
        data = plan_key_path().read_bytes()
    except FileNotFoundError:
        return None
    return data if len(data) == KEY_BYTES else None


_CALL_ID = re.compile(r"[0-9a-f]{16}\Z")


def ledger_dir() -> Path:
    """Where applied calls are recorded: ``$RINGFENCE_HOME/plans/applied``."""
    return ringfence_home() / "plans" / "applied"


def _ledger_path(call_id: str) -> Path:
    if not _CALL_ID.match(call_id):  # ids come from a MAC'd plan; still, never a path
        raise InvalidArguments(f"a staged call id {call_id[:40]!r} is malformed", field="plan")
    return ledger_dir() / call_id


def _ledger_mark(call_id: str) -> AppliedMark | None:
    try:
        data = loads(_ledger_path(call_id).read_text(encoding="utf-8"))
        return AppliedMark(float(data["at"]), str(data["session"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return AppliedMark(0.0, "unknown (unreadable ledger entry)")  # present: applied


def _write_ledger_mark(call_id: str, mark: AppliedMark, running: str = "") -> None:
    """Create the ledger entry for ``call_id`` (``running``: the id of the call that runs
    it); FileExistsError when it is there already.

    Whole or not at all (:func:`create_whole`). Made under its own name and then written, an entry
    cut by a kill or a full disk between the two was empty: "applied (unknown)", never
    run, named by nothing (no call, no end), for good."""
    create_whole(_ledger_path(call_id), json.dumps({**asdict(mark), "call": running}).encode())


def ledger_note(call_id: str) -> dict[str, Any] | None:
    """A call's ledger entry as written (``at``, ``session``, ``call``, and once it ran
    ``ended``, ``ok``, ``error``); None when absent or unreadable."""
    try:
        data = loads(_ledger_path(call_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class StagedCall:
    call_id: str
    trace_id: str
    tool: str
    arguments: dict[str, Any]
    consequence: str
    origin: str
    staged_at: float
    session: str = ""
    posture: str = "ask"

    def shown_arguments(self, names: Iterable[str] = ()) -> dict[str, Any]:
        """The arguments as this call's records show them, for a person's screen.

        The secrets it carries (values under credential-named keys, URL passwords) are
        ``[REDACTED SECRET]`` where they stand (:func:`redact_in_place`): the plan file
        keeps the values to run them, ``plan show``, its ``--json`` and the review page do
        not (``plan show`` printed ``https://bob:hunter2@…`` whole that the call's records
        had redacted). Only where they stand, so the same text elsewhere in this call or in
        another stays shown: a person about to apply a plan sees what it runs.
        """
        shown = redact_in_place(self.arguments, names)
        return shown if isinstance(shown, dict) else {}


@dataclass(frozen=True)
class AppliedMark:
    """That a staged call was handed to the Gate by ``session`` at ``at`` (epoch seconds)."""

    at: float
    session: str

    def describe(self) -> str:
        when = when_text(self.at, "%Y-%m-%d %H:%M:%S UTC")
        return f"at {when} by session {self.session}"


@dataclass
class Plan:
    """Staged calls and their applied marks; written atomically after each change."""

    path: Path | None = None
    key: bytes | None = None
    roots: tuple[str, ...] = ()
    calls: list[StagedCall] = field(default_factory=list)
    applied: dict[str, AppliedMark] = field(default_factory=dict)
    _loaded: bool = False

    def _signing_key(self) -> bytes:
        if self.key is None:
            self.key = load_or_create_key(KEY_NAME, KEY_BYTES)
        return self.key

    def _body(self) -> dict[str, Any]:
        return {
            "ringfence_plan": PLAN_VERSION,
            "roots": list(self.roots),
            "calls": [asdict(c) for c in self.calls],
            "applied": {k: asdict(v) for k, v in self.applied.items()},
        }

    @staticmethod
    def _mac(key: bytes, body: dict[str, Any]) -> str:
        return hmac.new(key, canonical_json(body), hashlib.sha256).hexdigest()

    def to_json(self) -> dict[str, Any]:
        key = self._signing_key()
        body = self._body()
        return {
            **body,
            "key_id": _key_id(key),
            "written_at": time.time(),
            "mac": self._mac(key, body),
        }

    def save(self, path: Path | None = None) -> None:
        target = path or self.path
        if target is None:
            return
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False)
        atomic_write(Path(target), text.encode() + b"\n")

    def stage(self, call: StagedCall, roots: Iterable[str] = ()) -> None:
        """Append ``call``; an existing plan file is read (and checked) first, never overwritten.

        Raises InvalidArguments when the file is not a valid plan or was staged
        under other workspace roots (a plan names one set of roots).
        """
        roots = tuple(roots)
        if not self._loaded and self.path is not None and Path(self.path).exists():
            existing = Plan.load(self.path, self.key)
            self.key, self.calls, self.applied = existing.key, existing.calls, existing.applied
            self.roots = existing.roots
            if self.roots != roots:
                raise InvalidArguments(
                    f"{self.path} was staged under the workspace roots {list(self.roots)}, not "
                    f"{list(roots)}; stage into another plan file",
                    field="plan",
                )
        elif not self._loaded:
            self.roots = roots
        self._loaded = True
        self.calls.append(call)
        self.save()

    def first_applied(self) -> AppliedMark | None:
        """The earliest applied mark of any of this plan's calls, in the file or the ledger."""
        marks = [*self.applied.values()]
        marks += [m for c in self.calls if (m := _ledger_mark(c.call_id)) is not None]
        return min(marks, key=lambda m: m.at, default=None)

    def applied_mark(self, call_id: str) -> AppliedMark | None:
        """The applied mark of one call, in the file or the ledger (None: not applied)."""
        return self.applied.get(call_id) or _ledger_mark(call_id)

    def mark_applied(self, call_id: str, session: str, running: str = "") -> None:
        """Record that ``call_id`` is being applied (by the call ``running``), before it
        runs: the ledger entry first (exclusively), then the plan file.

        Raises Denied when the ledger already has the call (another apply got
        there first) and Unwritable when a mark cannot be written; either way
        the call does not run.
        """
        mark = AppliedMark(time.time(), session)
        try:
            _write_ledger_mark(call_id, mark, running)
        except FileExistsError:
            first = _ledger_mark(call_id)
            when = first.describe() if first is not None else "by another apply"
            raise Denied(
                f"plan apply refused: the call {call_id} was already applied ({when}); "
                "a plan applies once",
                rule="plan",
            ) from None
        except OSError as exc:
            raise Unwritable(
                f"cannot record the call applied in {ledger_dir()} ({exc.strerror or exc}); a "
                "plan applies once, so nothing more runs until the mark can be written",
                field="plan",
            ) from None
        self.applied[call_id] = mark
        try:
            self.save()
        except OSError as exc:
            raise Unwritable(
                f"cannot mark the call applied in {self.path} ({exc.strerror or exc}); a plan "
                "applies once, so nothing more runs until the mark can be written",
                field="plan",
            ) from None

    def mark_ended(self, call_id: str, ok: bool, error: str | None = None) -> None:
        """Record in the ledger that ``call_id`` ran to its end (after its outcome). Best
        effort: an end that cannot be written leaves the call shown as never ended, the
        cautious reading."""
        note = ledger_note(call_id)
        if note is None:
            return
        note.update(ended=time.time(), ok=ok, error=error)
        with contextlib.suppress(OSError):
            atomic_write(_ledger_path(call_id), json.dumps(note).encode())

    @classmethod
    def load(
        cls,
        path: Path,
        key: bytes | None = None,
        *,
        create_key: bool = True,
        raw: bytes | None = None,
    ) -> Plan:
        """Read and authenticate a plan; raise InvalidArguments naming what is wrong.

        With ``create_key=False`` (``plan show``) a missing ``plan.key`` is
        reported, never created. ``raw``: the file's bytes as the caller read them
        (the review page reads once, bounded, and checks exactly those), not read again.
        """
        path = Path(path)
        if raw is None:
            try:
                raw = read_named_file(path, MAX_PLAN_FILE_BYTES)
            except FileNotFoundError:
                raise InvalidArguments(f"no plan file at {path}", field="plan") from None
            except ValueError as exc:
                raise InvalidArguments(
                    f"{path} cannot be read as a plan: {exc}", field="plan"
                ) from None
        try:
            text = raw.decode("utf-8")
            data = loads(text)
        except FileNotFoundError:
            raise InvalidArguments(f"no plan file at {path}", field="plan") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArguments(f"{path} is not a JSON plan: {exc}", field="plan") from None
        if not isinstance(data, dict) or data.get("ringfence_plan") != PLAN_VERSION:
            raise InvalidArguments(
                f"{path} is not a ringfence plan (version {PLAN_VERSION}); stage it again",
                field="plan",
            )
        if key is None:
            key = load_or_create_key(KEY_NAME, KEY_BYTES) if create_key else _existing_key()
        if key is None:
            raise InvalidArguments(
                f"{path} cannot be checked: there is no plan key at {plan_key_path()} (a plan is "
                "signed with the key of the RINGFENCE_HOME that staged it)",
                field="plan",
            )
        body = {k: data.get(k) for k in ("ringfence_plan", "roots", "calls", "applied")}
        if not hmac.compare_digest(cls._mac(key, body), str(data.get("mac", ""))):
            if str(data.get("key_id", "")) != _key_id(key):
                raise InvalidArguments(
                    f"{path} was signed with a different key (key id {str(data.get('key_id'))[:16]!r}; "
                    f"the key at {plan_key_path()} has id {_key_id(key)!r}): it was staged under "
                    "another RINGFENCE_HOME; refusing to use it",
                    field="plan",
                )
            raise InvalidArguments(
                f"{path} was edited after staging (its MAC does not match); refusing to use it",
                field="plan",
            )
        try:
            plan = cls(
                path,
                key,
                roots=tuple(str(r) for r in body["roots"]),
                calls=[StagedCall(**c) for c in body["calls"]],
                applied={str(k): AppliedMark(**v) for k, v in body["applied"].items()},
                _loaded=True,
            )
        except (TypeError, AttributeError) as exc:
            raise InvalidArguments(f"{path} has a malformed call: {exc}", field="plan") from None
        return plan
