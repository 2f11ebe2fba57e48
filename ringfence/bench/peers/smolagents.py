"""Peer: smolagents' ``LocalPythonExecutor`` against ``run_tool_script``, and the same escapes on both.

Speed: a script making 1, 100 and 1,000 tool calls (a no-op tool) on both,
interleaved. smolagents interprets the script's AST in the host process:
no process boundary and no Gate, so a call costs microseconds; a
``run_tool_script`` call crosses a sandboxed process, the loopback bridge
and the Gate (a signed intent, an event) each time. The rows show that
price next to what it buys.

What it buys, the escape table: each escape runs on both and its result is
recorded (refused, or what got through), not only timed:

* a format-string walk to ``object.__subclasses__`` (the classic way out of
  an AST sandbox);
* ``import os`` and reading ``/etc/hostname``;
* an allocation of 1 GiB (the issue measured smolagents letting 16 GB
  through; 1 GiB keeps the bench short and is already over the script
  runner's memory limit);
* a long builtin call (``sum(range(2 * 10**8))``: seconds of CPU in one
  call, where an interpreter loop cannot interrupt it) past a time limit of
  ``LIMIT_S`` given to both (smolagents' ``timeout_seconds``, the script's
  ``timeout_seconds``): it gets through when its value comes back.

smolagents' Docker executor is not measured: it builds its image by
installing a Jupyter kernel gateway from PyPI inside the container, which
this machine class cannot reach (listed as skipped). smolagents is pinned in
the ``peers`` extra (``pip install -e '.[peers]'``).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from .._harness import Samples
from .._suite import Row, Scenario, Skip
from ..bridge import run_ok, script_kernel

CALLS = (1, 100, 1000)
LIMIT_S = 2
SCRIPT = """
total = 0
for i in range({n}):
    total += len(noop(x="hello") if LOCAL else call_tool("noop", x="hello"))
result = total
"""


@dataclass(frozen=True)
class Escape:
    name: str
    source: str
    succeeded: Callable[[Any], bool]  # given the value the script returned


ESCAPES = (
    Escape(
        "format-string walk to __subclasses__",
        "result = '{0.__class__.__base__.__subclasses__}'.format(1)",
        lambda value: "__subclasses__" in str(value),
    ),
    Escape(
        "import os; read /etc/hostname",
        "import os\nresult = open('/etc/hostname').read()",
        lambda value: bool(str(value).strip()),
    ),
    Escape(
        "allocate 1 GiB",
        "result = len('a' * (1024 ** 3))",
        lambda value: value == 1024**3,
    ),
    Escape(
        "a long builtin call (2e8-term sum)",
        "result = sum(range(2 * 10 ** 8))",
        lambda value: value == 19_999_999_900_000_000,
    ),
)


def _executor(timeout: int | None = None) -> Any:
    from smolagents import Tool
    from smolagents.local_python_executor import LocalPythonExecutor

    class Noop(Tool):  # a class tool: smolagents' @tool needs the source file
        name = "noop"
        description = "does nothing"
        inputs = {"x": {"type": "string", "description": "ignored"}}
        output_type = "string"

        def forward(self, x: str) -> str:
            return "ok"

    executor = LocalPythonExecutor(additional_authorized_imports=[], timeout_seconds=timeout)
    executor.send_tools({"noop": Noop()})
    executor.send_variables({"LOCAL": True})
    return executor


def _local_run(executor: Any, source: str) -> tuple[str, Any, float]:
    """("ran", value, seconds) or ("refused", message, seconds)."""
    t = time.perf_counter()
    try:
        out = executor(source)
    except Exception as exc:  # smolagents raises its InterpreterError and others
        return "refused", f"{type(exc).__name__}: {str(exc)[:120]}", time.perf_counter() - t
    return "ran", out.output, time.perf_counter() - t


async def _ringfence_run(kernel: Any, source: str) -> tuple[str, Any, float]:
    t = time.perf_counter()
    outcome = await kernel.invoke("run_tool_script", {"script": source, "timeout_seconds": LIMIT_S})
    seconds = time.perf_counter() - t
    if not outcome.ok:
        return "refused", f"{outcome.error.code}: {outcome.error.message[:120]}", seconds
    value = outcome.value.get("result") if isinstance(outcome.value, dict) else outcome.value
    return "ran", value, seconds


async def run(quick: bool) -> list[Row]:
    if importlib.util.find_spec("smolagents") is None:
        raise Skip("smolagents is not installed: pip install -e '.[peers]'")
    rounds = 2 if quick else 5
    executor = await trio.to_thread.run_sync(_executor)
    limited = await trio.to_thread.run_sync(_executor, LIMIT_S)
    rows: list[Row] = []
    async with script_kernel() as kernel:
        for n in CALLS:
            ours, theirs = Samples("run_tool_script"), Samples("smolagents local")
            source = SCRIPT.format(n=n)
            for _ in range(rounds):
                status, value, seconds = _local_run(executor, source)
                if status != "ran":
                    raise RuntimeError(f"smolagents could not run the call script: {value}")
                theirs.per_op.append(seconds / n)
                t = time.perf_counter()
                await run_ok(kernel, "LOCAL = False\n" + source)
                ours.per_op.append((time.perf_counter() - t) / n)
            rows.append(
                Row(
                    "peer-smolagents",
                    f"script with {n} tool call(s): per call",
                    ours,
                    theirs,
                    "informational (process boundary + Gate vs none)",
                    None,
                    {"calls": n},
                )
            )
        for escape in ESCAPES:
            their_status, their_value, their_s = await trio.to_thread.run_sync(
                _local_run, limited, escape.source
            )
            our_status, our_value, our_s = await _ringfence_run(kernel, escape.source)
            theirs_escaped = their_status == "ran" and escape.succeeded(their_value)
            ours_escaped = our_status == "ran" and escape.succeeded(our_value)
            rows.append(
                Row(
                    "peer-smolagents",
                    f"escape: {escape.name}: ringfence {_shown(ours_escaped)}; "
                    f"smolagents {_shown(theirs_escaped)}",
                    Samples("run_tool_script", [our_s]),
                    Samples("smolagents local", [their_s]),
                    "ringfence refuses",
                    not ours_escaped,
                    {
                        "ringfence": our_status,
                        "ringfence_detail": str(our_value)[:200],
                        "smolagents": their_status,
                        "smolagents_detail": str(their_value)[:200],
                    },
                )
            )
    return rows


def _shown(escaped: bool) -> str:
    return "GOT THROUGH" if escaped else "refused"


async def run_docker_executor(quick: bool) -> list[Row]:
    """smolagents' Docker executor: listed, and skipped with the reason it cannot run here."""
    if importlib.util.find_spec("smolagents") is None:
        raise Skip("smolagents is not installed: pip install -e '.[peers]'")
    raise Skip(
        "smolagents' DockerExecutor builds its image by installing a Jupyter kernel gateway from "
        "PyPI inside the container; containers here have no network (no registry is reachable "
        "from this machine class), so the image cannot be built"
    )


DOCKER_SCENARIO = Scenario(
    "peer-smolagents-docker",
    "smolagents DockerExecutor vs run_tool_script on the docker backend",
    "informational",
    run_docker_executor,
)

SCENARIO = Scenario(
    "peer-smolagents",
    "smolagents LocalPythonExecutor vs run_tool_script: tool-call cost and the escape table",
    "every escape refused by ringfence",
    run,
)
