"""Tool discovery for large inventories (opt-in: ``tool_discovery = true``).

The MCP tools stay registered, and every call to one still goes through the
Gate, but a host shows the model only ``tool_search``, ``tool_list`` and
``tool_inspect`` (plus non-MCP tools) until a tool has been inspected: its
exact schema is loaded by ``tool_inspect`` and from then on it is visible
(:meth:`Discovery.visible_tools`). Discovery never grants permission: the
three tools are ``read`` and change nothing about how any call is decided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..runtime._calls import CallContext
from ..runtime._errors import NotFound
from ..runtime._kernel import Kernel
from ..runtime._providers import model_description
from ..runtime._tools import Consequence, ToolSpec

if TYPE_CHECKING:
    from ._connect import Connectors

__all__ = ["DISCOVERY_TOOLS", "Discovery"]

DISCOVERY_TOOLS = ("tool_search", "tool_list", "tool_inspect")
MAX_RESULTS = 50


def _summary(spec: ToolSpec) -> str:
    text = spec.description.strip().splitlines()[0] if spec.description.strip() else ""
    return text[:200]


class Discovery:
    """The discovery tools of one session and the set of tools already selected."""

    def __init__(self, kernel: Kernel, connectors: Connectors) -> None:
        self.kernel = kernel
        self.connectors = connectors
        self.selected: set[str] = set()
        self._names: list[str] = []

    @classmethod
    def install(cls, kernel: Kernel, connectors: Connectors) -> Discovery:
        d = cls(kernel, connectors)
        for spec in d._specs():
            if spec.name not in kernel.registry:
                kernel.register(spec)
                d._names.append(spec.name)
        return d

    def uninstall(self) -> None:
        for name in self._names:
            self.kernel.registry.remove(name)
        self._names.clear()

    def deferred(self) -> list[ToolSpec]:
        """The tools discovery stands in for: every MCP tool in the registry."""
        return [s for s in self.kernel.tools() if s.source.startswith("mcp:")]

    def visible_tools(self) -> list[ToolSpec]:
        return [
            s
            for s in self.kernel.tools()
            if not s.source.startswith("mcp:") or s.name in self.selected
        ]

    def _entry(self, spec: ToolSpec) -> dict[str, Any]:
        return {
            "name": spec.name,
            "summary": _summary(spec),
            "consequence": spec.consequence.value,
            "server": spec.meta.get("server"),
        }

    def _specs(self) -> list[ToolSpec]:
        async def search(args: dict[str, Any], ctx: CallContext) -> Any:
            words = [w for w in str(args["query"]).lower().split() if w]
            limit = int(args.get("limit", 10))
            scored = []
            for spec in self.deferred():
                hay = f"{spec.name} {spec.description}".lower()
                score = sum(hay.count(w) for w in words)
                if score:
                    scored.append((-score, spec.name, spec))
            scored.sort(key=lambda t: (t[0], t[1]))
            return {"matches": [self._entry(s) for _, _, s in scored[:limit]], "total": len(scored)}

        async def list_(args: dict[str, Any], ctx: CallContext) -> Any:
            server = args.get("server")
            offset = int(args.get("offset", 0))
            limit = int(args.get("limit", MAX_RESULTS))
            specs = [s for s in self.deferred() if server is None or s.meta.get("server") == server]
            page = specs[offset : offset + limit]
            nxt = offset + limit if offset + limit < len(specs) else None
            return {
                "tools": [self._entry(s) for s in page],
                "total": len(specs),
                "next_offset": nxt,
            }

        async def inspect(args: dict[str, Any], ctx: CallContext) -> Any:
            name = args["name"]
            spec = next((s for s in self.deferred() if s.name == name), None)
            if spec is None:
                raise NotFound(
                    f"no MCP tool named {name!r}; use tool_search or tool_list", field="name"
                )
            self.selected.add(name)
            return {
                "name": spec.name,
                # As the front door describes it to a model (an untrusted server's text says so).
                "description": model_description(spec),
                "input_schema": dict(spec.input_schema),
                "consequence": spec.consequence.value,
                "server": spec.meta.get("server"),
                "note": "inspecting a tool grants nothing: calling it is decided like any other call",
            }

        limit_schema = {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS}
        return [
            ToolSpec(
                name="tool_search",
                description="Search the MCP tools available in this session by keywords; returns names and summaries.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "minLength": 1, "maxLength": 500},
                        "limit": limit_schema,
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
                executor=search,
                consequence=Consequence.READ,
                source="mcp-discovery",
            ),
            ToolSpec(
                name="tool_list",
                description="List the MCP tools available in this session, a page at a time.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "server": {"type": "string"},
                        "offset": {"type": "integer", "minimum": 0},
                        "limit": limit_schema,
                    },
                    "additionalProperties": False,
                },
                executor=list_,
                consequence=Consequence.READ,
                source="mcp-discovery",
            ),
            ToolSpec(
                name="tool_inspect",
                description="Load one MCP tool's exact description and input schema, so it can be called.",
                input_schema={
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
                executor=inspect,
                consequence=Consequence.READ,
                source="mcp-discovery",
            ),
        ]
