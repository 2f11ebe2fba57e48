"""PEP 562 lazy exports: a package names what it offers; heavy modules load on first use.

ringfence's packages re-export from private modules, as trio does. Some of those
modules import a large SDK (docker, mcp, hypercorn); a process that needs only a
light part of the package (the CLI's ``--help``, the sandboxed script runner)
should not pay for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` that import ``names[attr]`` on first use.

    ``names`` maps an exported name to the module that defines it (absolute, or
    relative to ``package``), or to ``"module:attribute"`` when the export is an
    alias of a differently named attribute. The loaded value is cached in ``namespace``.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = module.partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*(n for n in namespace if not n.startswith("_")), *names})

    return __getattr__, __dir__
