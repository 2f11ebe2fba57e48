"""Capability authority: what a server advertises, what the operator approved, what is pending.

The initialize result is recorded; ``approved_capabilities`` is the ceiling. A
capability the server advertises beyond it (after an update, say) is *pending*:
shown to the operator, but neither listed nor used until approved. A capability
that is approved but not advertised is simply unused.

The names past the top-level ones are the server's to choose (``experimental`` and
``extensions`` keys, fields a newer protocol adds): any number, any length. So the
ledger keeps at most :data:`MAX_CAPABILITIES` of them (the approved ones first, then in
name order), each cut to :data:`MAX_CAPABILITY_NAME` characters with a mark that no
approval names, and counts the rest (``omitted``): 20,000 names of 200 characters were
~8 MB of the ``mcp_connected`` record at every session before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp import types

__all__ = [
    "MAX_CAPABILITIES",
    "MAX_CAPABILITY_NAME",
    "CapabilityLedger",
    "advertised_capabilities",
]

_TOP_LEVEL = ("tools", "prompts", "resources", "logging", "completions", "tasks")
MAX_CAPABILITIES = 200  # names the server chose that one ledger keeps (beyond the top level)
MAX_CAPABILITY_NAME = 200  # characters of one such name (longer ones are cut and marked)
_CUT = "…[cut]"  # ends a cut name: never equal to an approved one


def advertised_capabilities(caps: types.ServerCapabilities | None) -> frozenset[str]:
    """Ledger names for everything ``caps`` advertises.

    Top-level capabilities by name; each experimental capability as
    ``experimental.NAME`` and each extension as ``extensions.ID``; any other
    field a newer protocol adds by its own name, so it shows up as pending
    rather than being silently ignored.
    """
    return _bounded(_all_names(caps), frozenset())[0]


def _all_names(caps: types.ServerCapabilities | None) -> set[str]:
    """Every name ``caps`` advertises, as the server spelled it (unbounded: see _bounded)."""
    if caps is None:
        return set()
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
    return out


def _bounded(names: set[str], approved: frozenset[str]) -> tuple[frozenset[str], int]:
    """``names`` kept within :data:`MAX_CAPABILITIES` and :data:`MAX_CAPABILITY_NAME`, and
    how many were left out: the top-level names always, then the approved ones, then the
    rest in name order; a name over the length is cut and marked, so it matches no approval
    (fail closed: a capability cut away is pending, never active)."""
    kept = {n for n in names if n in _TOP_LEVEL}
    chosen = names - kept
    ordered = sorted(n for n in chosen if n in approved) + sorted(chosen - approved)
    for name in ordered[:MAX_CAPABILITIES]:
        kept.add(name if len(name) <= MAX_CAPABILITY_NAME else name[:MAX_CAPABILITY_NAME] + _CUT)
    return frozenset(kept), max(0, len(ordered) - MAX_CAPABILITIES)


@dataclass(frozen=True)
class CapabilityLedger:
    """Advertised vs approved, and what follows: ``active`` is used, ``pending`` is not."""

    advertised: frozenset[str]
    approved: frozenset[str]
    # Sub-capability flags the server advertised (resources.subscribe, tools.listChanged, …).
    flags: frozenset[str] = frozenset()
    # Names the server advertised past MAX_CAPABILITIES: counted, not kept.
    omitted: int = 0

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
        advertised, omitted = _bounded(_all_names(caps), frozenset(approved))
        return cls(advertised, frozenset(approved), frozenset(flags), omitted)

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
            **({"omitted": self.omitted} if self.omitted else {}),
        }
