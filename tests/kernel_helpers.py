"""Test helpers shared by every package's tests: small real tools that record what ran.

Importable from any test module as ``kernel_helpers`` (pytest puts ``tests/``
on ``sys.path`` for its ``conftest.py``). Package helpers (``runtime_helpers``,
``bridge_helpers``, ...) import from here rather than keeping their own copy.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringfence.runtime import CallContext, Consequence, Kernel, MemorySink, ToolSpec

__all__ = [
    "SCHEMA",
    "TOOLS",
    "Ledger",
    "event_records",
    "events",
    "kill_host_once_sandboxed",
    "kinds",
    "make_tool",
    "register_standard_tools",
    "venv_under",
]

SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}
# The tools register_standard_tools adds: one per consequence, and a residual one.
TOOLS = ("peek", "touch", "launch", "run_shell")


@dataclass
class Ledger:
    """Every executor run, in order: the proof that something did (or did not) run."""

    runs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.runs]


def make_tool(
    name: str,
    consequence: Consequence,
    ledger: Ledger,
    *,
    residual: bool = False,
    output: str | None = None,
) -> ToolSpec:
    """A tool that records its run in ``ledger`` and returns ``output`` or its arguments."""

    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        ledger.runs.append((name, args))
        return output if output is not None else {"tool": name, "args": args}

    return ToolSpec(
        name, f"test tool {name}", SCHEMA, run, consequence=consequence, residual=residual
    )


def register_standard_tools(kernel: Kernel, ledger: Ledger) -> None:
    """``peek`` (read), ``touch`` (reversible), ``launch`` (irreversible), ``run_shell`` (residual)."""
    kernel.register(make_tool("peek", Consequence.READ, ledger))
    kernel.register(make_tool("touch", Consequence.REVERSIBLE, ledger))
    kernel.register(make_tool("launch", Consequence.IRREVERSIBLE, ledger))
    kernel.register(make_tool("run_shell", Consequence.IRREVERSIBLE, ledger, residual=True))


def events(kernel: Kernel) -> list[dict[str, Any]]:
    """The records of a kernel whose event sink is a :class:`MemorySink`."""
    sink = kernel.events._sink
    assert isinstance(sink, MemorySink)
    return sink.records()


def kinds(kernel: Kernel, kind: str) -> list[dict[str, Any]]:
    """The records of one kind."""
    return [e for e in events(kernel) if e["kind"] == kind]


def event_records(path: Path) -> list[dict[str, Any]]:
    """The records of an events file (one JSON object a line), in order; no chain check."""
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def venv_under(base: Path) -> Path:
    """A virtual environment in ``base`` with a copied interpreter (``--copies``, the layout
    a user's venv or pipx under ``/tmp`` may have) that imports what this test's
    interpreter imports (ringfence, mcp) through a ``.pth`` file; its ``python``."""
    venv = base / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--copies", str(venv)],
        check=True,
        capture_output=True,
    )
    (site,) = (venv / "lib").glob("python*/site-packages")
    purelib = sysconfig.get_paths()["purelib"]
    (site / "ringfence-tests.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    return venv / "bin" / "python"


def kill_host_once_sandboxed(
    host: subprocess.Popen[Any],
    events: Path,
    runners: Callable[[], list[Any]],
    before: set[int],
    *,
    start: float = 60,
    end: float = 10,
) -> None:
    """Wait (``start`` s) for the host's script to be sandboxed (its ``script_sandbox``
    event), SIGKILL the host, and assert that each new runner ``runners()`` lists (psutil
    processes, not in ``before``) is gone within ``end`` s."""
    import psutil

    deadline = time.monotonic() + start
    while time.monotonic() < deadline:
        lines = events.read_text().splitlines() if events.exists() else []
        if any(json.loads(line)["kind"] == "script_sandbox" for line in lines):
            break
        assert host.poll() is None, "the host exited early"
        time.sleep(0.1)
    found = [p for p in runners() if p.pid not in before]
    assert found, "no runner is running"
    host.send_signal(signal.SIGKILL)
    host.wait(10)
    _gone, alive = psutil.wait_procs(found, timeout=end)
    assert alive == [], "the runner outlived its host"
