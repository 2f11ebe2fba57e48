"""Capability authority: what a server advertises, what the operator approved, what is pending.

The initialize result is recorded; ``approved_capabilities`` is the ceiling. A
capability the server advertises beyond it (after an update, say) is *pending*:
shown to the operator, but neither listed nor used until approved. A capability
that is approved but not advertised is simply unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp import types

__all__ = ["CapabilityLedger", "advertised_capabilities"]

_TOP_LEVEL = ("tools", "prompts", "resources", "logging", "completions", "tasks")


def advertised_capabilities(caps: types.ServerCapabilities | None) -> frozenset[str]:
    """Ledger names for everything ``caps`` advertises.

    Top-level capabilities by name; each experimental capability as
    ``experimental.NAME`` and each extension as ``extensions.ID``; any other
    field a newer protocol adds by its own name, so it shows up as pending
    rather than being silently ignored.
    """
    if caps is None:
        return frozenset()
    out: set[str] = set()
    for name in _TOP_LEVEL:
        if getattr(caps, name, None) is not None:
            out.add(name)
    for key in caps.experimental or {}:
        out.add(f"experimental.{key}")
    for key in getattr(caps, "extensions", None) or {}:
        out.add(f"extensions.{key}")
    known = {*_TOP_LEVEL, "experimental", "extensions"}
    for name in type(caps).model_fields:
        if name not in known and getattr(caps, name, None) is not None:
            out.add(name)
    for name, value in (caps.model_extra or {}).items():
        if value is not None:
            out.add(str(name))
    return frozenset(out)


@dataclass(frozen=True)
class CapabilityLedger:
    """Advertised vs approved, and what follows: ``active`` is used, ``pending`` is not."""

    advertised: frozenset[str]
    approved: frozenset[str]
    # Sub-capability flags the server advertised (resources.subscribe, tools.listChanged, …).
    flags: frozenset[str] = frozenset()

    @classmethod
    def from_initialize(
        cls, caps: types.ServerCapabilities | None, approved: frozenset[str]
    ) -> CapabilityLedger:
        flags: set[str] = set()
        if caps is not None:
            for name in ("tools", "prompts", "resources"):
                sub = getattr(caps, name, None)
                if sub is None:
                    continue
                if getattr(sub, "list_changed", None):
                    flags.add(f"{name}.listChanged")
                if getattr(sub, "subscribe", None):
                    flags.add(f"{name}.subscribe")
        return cls(advertised_capabilities(caps), frozenset(approved), frozenset(flags))

    @property
    def active(self) -> frozenset[str]:
        return self.advertised & self.approved

    @property
    def pending(self) -> frozenset[str]:
        return self.advertised - self.approved

    def allows(self, capability: str) -> bool:
        """True when ``capability`` is both advertised and approved."""
        return capability in self.active

    def to_dict(self) -> dict[str, Any]:
        return {
            "advertised": sorted(self.advertised),
            "approved": sorted(self.approved),
            "active": sorted(self.active),
            "pending": sorted(self.pending),
            "flags": sorted(self.flags),
        }
