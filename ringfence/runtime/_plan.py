"""Dry-run plans: the staged non-read calls of a session, reviewable and appliable.

A plan file is JSON: the staged calls plus an HMAC-SHA256 over their canonical
form, keyed by a local secret in ``$RINGFENCE_HOME/keys/plan.key``. A plan
edited after staging (by anyone without that key) is refused. Applying a plan
re-enters every call into the Gate: staging grants nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._canonical import canonical_json
from ._errors import InvalidArguments
from ._files import atomic_write, load_or_create_key

__all__ = ["Plan", "StagedCall"]

PLAN_VERSION = 1


@dataclass(frozen=True)
class StagedCall:
    call_id: str
    trace_id: str
    tool: str
    arguments: dict[str, Any]
    consequence: str
    origin: str
    staged_at: float


class Plan:
    """Staged calls, written atomically after each addition so a crash loses none."""

    def __init__(self, path: Path | None = None, key: bytes | None = None) -> None:
        self.path = path
        self._key = key
        self.calls: list[StagedCall] = []

    def _mac(self, calls: list[dict[str, Any]]) -> str:
        key = self._key if self._key is not None else load_or_create_key("plan.key")
        self._key = key
        return hmac.new(key, canonical_json(calls), hashlib.sha256).hexdigest()

    def stage(self, call: StagedCall) -> None:
        self.calls.append(call)
        if self.path is not None:
            self.save(self.path)

    def to_json(self) -> dict[str, Any]:
        calls = [asdict(c) for c in self.calls]
        return {
            "ringfence_plan": PLAN_VERSION,
            "written_at": time.time(),
            "calls": calls,
            "mac": self._mac(calls),
        }

    def save(self, path: Path) -> None:
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False)
        atomic_write(path, text.encode() + b"\n")

    @classmethod
    def load(cls, path: Path, key: bytes | None = None) -> Plan:
        """Read and authenticate a plan; raise InvalidArguments naming what is wrong."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidArguments(f"no plan file at {path}", field="plan") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArguments(f"{path} is not a JSON plan: {exc}", field="plan") from None
        if not isinstance(data, dict) or data.get("ringfence_plan") != PLAN_VERSION:
            raise InvalidArguments(
                f"{path} is not a ringfence plan (version {PLAN_VERSION})", field="plan"
            )
        plan = cls(path, key)
        calls = data.get("calls")
        if not isinstance(calls, list) or not hmac.compare_digest(
            plan._mac(calls), str(data.get("mac", ""))
        ):
            raise InvalidArguments(
                f"{path} was edited after staging (its MAC does not match); refusing to apply it",
                field="plan",
            )
        try:
            plan.calls = [StagedCall(**c) for c in calls]
        except TypeError as exc:
            raise InvalidArguments(f"{path} has a malformed call: {exc}", field="plan") from None
        return plan
