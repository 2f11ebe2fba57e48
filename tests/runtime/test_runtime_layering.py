"""Architecture guards: runtime imports none of its clients; public names resolve."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ringfence
import ringfence.runtime

RUNTIME = Path(ringfence.runtime.__file__).parent
CLIENTS = ("workspace", "backends", "bridge", "mcp_host", "serve", "cli", "_embed")


def test_runtime_imports_none_of_its_clients() -> None:
    offenders = []
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                absolute = module.startswith("ringfence.") and module.split(".")[1] in CLIENTS
                relative = node.level >= 2 and module.split(".")[0] in CLIENTS
                if absolute or relative:
                    offenders.append(f"{path.name}: {module}")
    assert offenders == []


def test_importing_ringfence_is_light() -> None:
    """``import ringfence`` (what the sandboxed script runner pays) loads no SDK."""
    code = "import sys, ringfence; print(sorted(m for m in ('trio', 'docker', 'mcp', 'cryptography') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_public_names_resolve_once() -> None:
    for module in (ringfence, ringfence.runtime):
        public = [n for n in dir(module) if not n.startswith("_")]
        for name in public:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"
    # Errors are one tree.
    for name in ("Denied", "OutsideWorkspace", "Unavailable", "ToolTimeout"):
        assert issubclass(getattr(ringfence, name), ringfence.RingfenceError)
