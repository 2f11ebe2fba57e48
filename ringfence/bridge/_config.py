"""How scripts run and what a run produced: the operator's configuration and the result.

Values only (frozen dataclasses), checked when made: a bad configuration is
an ``invalid_arguments`` error naming its field, before any run starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runtime._errors import InvalidArguments
from . import _sandbox, _wire

__all__ = [
    "DEFAULT_MAX_CALLS",
    "DEFAULT_MAX_CALL_BYTES",
    "DEFAULT_MAX_CONCURRENT_RUNS",
    "DEFAULT_MAX_PARALLEL",
    "DEFAULT_SPOOL_BYTES",
    "SANDBOX_LEVELS",
    "ScriptConfig",
    "ScriptLimits",
    "ScriptResult",
]

SANDBOX_LEVELS = _sandbox.LEVELS  # strict, best-effort, none
DEFAULT_MAX_CALLS = 10_000
# The bytes of call messages (the calls' tool names and arguments) one run may send: every
# call is recorded whole in the event stream, and a script builds big arguments for free.
DEFAULT_MAX_CALL_BYTES = 64 * 1024 * 1024
# Calls of one parallel() batch that run at once (each through the Gate).
DEFAULT_MAX_PARALLEL = 16
# Runs of one run_tool_script tool (one kernel) alive at once; the others wait for a slot. Each
# runner may use limits.memory_bytes (1 GiB): unbounded, 12 scripts started together by one
# model turn or MCP client had 12 runners alive (12 GiB allowed), and nothing stopped 100.
DEFAULT_MAX_CONCURRENT_RUNS = 4
# Warm runners a local launcher keeps ready, at most (the default is one per core, up to this).
MAX_WARM_RUNNERS = 64
DEFAULT_WARM_RUNNERS_CAP = 8
# The disk cap of one run's output spool file (the full redacted stdout, when over the cap).
DEFAULT_SPOOL_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ScriptLimits:
    """Resource limits of the child. ``cpu_seconds=None``: the run's timeout rounded up, plus one."""

    cpu_seconds: int | None = None
    memory_bytes: int = 1024 * 1024 * 1024
    open_files: int = 64
    file_size_bytes: int = 0


@dataclass(frozen=True)
class ScriptConfig:
    """How scripts run; chosen by the operator, never by the script or the model.

    ``sandbox``: ``strict`` (default: every layer or ``unavailable``),
    ``best-effort`` (what the machine offers, the gaps recorded), ``none``
    (rlimits only, recorded). ``transport``: ``tcp`` (127.0.0.1) or ``unix``.
    ``mode="plain"`` runs unrestricted Python inside the OS sandbox; it exists
    to test the OS layers without RestrictedPython in front of them.

    ``transport`` defaults to ``unix``: a local peer is identified by its pid
    and uid (SO_PEERCRED) before it may start a handshake. ``tcp`` offers no
    such check (any local process may connect and must fail the handshake).
    ``max_calls`` is the run's budget of calls (``call_tool``, ``tools.<name>``
    and each call of a ``parallel`` batch; refused past it); ``max_parallel``
    how many calls of one ``parallel`` batch run at once; ``max_call_bytes``
    the run's budget of bytes of call messages (a message past it is refused
    whole, its calls unrecorded: each call is recorded with its arguments, and
    a script makes big arguments for free);
    ``output_spool_bytes`` the disk cap of the file that holds the full
    redacted output when it is over the kernel's output cap.
    ``max_concurrent_runs``: how many scripts of the ``run_tool_script`` tool
    run at once (each runner may use ``limits.memory_bytes``); a run past it
    waits for one to end, at most its own timeout, and is then ``unavailable``
    naming this field.
    ``warm_runners``: how many runners a local launcher keeps started ahead
    of need (interpreter up, imports done, waiting for a run), refilled in
    the background; None is one per core the process may use, at most
    8; 0 keeps none (every run starts a fresh interpreter).
    """

    sandbox: str = _sandbox.STRICT
    transport: str = "unix"
    limits: ScriptLimits = field(default_factory=ScriptLimits)
    uid: int = _sandbox.NOBODY
    gid: int = _sandbox.NOBODY
    handshake_seconds: float = 5.0
    max_frame: int = _wire.DEFAULT_MAX_FRAME
    mode: str = "restricted"
    max_calls: int = DEFAULT_MAX_CALLS
    max_call_bytes: int = DEFAULT_MAX_CALL_BYTES
    output_spool_bytes: int = DEFAULT_SPOOL_BYTES
    max_parallel: int = DEFAULT_MAX_PARALLEL
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    warm_runners: int | None = None

    def __post_init__(self) -> None:
        for name, number in (
            ("max_calls", self.max_calls),
            ("max_call_bytes", self.max_call_bytes),
            ("output_spool_bytes", self.output_spool_bytes),
            ("max_parallel", self.max_parallel),
            ("max_concurrent_runs", self.max_concurrent_runs),
        ):
            if type(number) is not int or number < 1:
                raise InvalidArguments(
                    f"script {name} must be a positive integer, not {number!r}", field=name
                )
        warm = self.warm_runners
        if warm is not None and (type(warm) is not int or not 0 <= warm <= MAX_WARM_RUNNERS):
            raise InvalidArguments(
                f"script warm_runners must be an integer from 0 to {MAX_WARM_RUNNERS} "
                f"(or None: one per core), not {warm!r}",
                field="warm_runners",
            )
        for name, value, choices in (
            ("sandbox", self.sandbox, _sandbox.LEVELS),
            ("transport", self.transport, ("tcp", "unix")),
            ("mode", self.mode, ("restricted", "plain")),
        ):
            if value not in choices:
                raise InvalidArguments(
                    f"script {name} must be one of {', '.join(choices)}, not {value!r}", field=name
                )


@dataclass(frozen=True)
class ScriptResult:
    """What one run produced.

    ``status``: ``ok`` (ran to the end), ``error`` (the script raised; see
    ``error``), ``compile_error`` (refused before running; ``error.errors``),
    ``timeout`` (killed at the deadline), ``killed`` (a resource limit or a
    signal ended it; ``error.message`` says which). ``output`` is everything
    printed, redacted; when longer than the kernel's output cap, a head and a
    tail around a marker naming the spool file with the rest. ``calls`` lists
    every ``call_tool`` with its decision, in order, up to the call budget.
    """

    status: str
    output: str
    calls: tuple[dict[str, Any], ...]
    result: Any = None
    has_result: bool = False
    error: dict[str, Any] | None = None
    sandbox: dict[str, Any] | None = None
    returncode: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "output": self.output}
        if self.has_result:
            out["result"] = self.result
        out["calls"] = list(self.calls)
        if self.error is not None:
            out["error"] = self.error
        return out
