"""``run_tool_script``: the tool a model calls to run a pipeline in one turn."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import trio

from ..runtime._calls import CallContext
from ..runtime._errors import InvalidArguments, ToolError, ToolTimeout, Unavailable
from ..runtime._kernel import Kernel
from ..runtime._redact import script_credential_literals
from ..runtime._tools import Consequence, ToolSpec
from ._allowlist import ALLOWED_MODULES
from ._config import DEFAULT_MAX_CALLS, ScriptConfig, ScriptResult

if TYPE_CHECKING:
    from ._launch import Launcher, LocalLauncher

# The run's machinery (``_host``, ``_launch``, and through them the process supervisor)
# is imported on the first run: a session that never runs a script (`ringfence call
# read_file`) does not pay for it.

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_SCRIPT_CHARS",
    "MAX_TIMEOUT_SECONDS",
    "SCRIPT_TOOL",
    "register_script_tool",
]

SCRIPT_TOOL = "run_tool_script"
DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 600
# The tool's value keeps the first and the last half of this many call records; the ones
# between are summarized (see _calls_for_model). Every call is in the event stream.
CALL_RECORDS_KEPT = 200
SUMMARY_ROWS = 50  # at most this many (tool, outcome) rows in that summary
MAX_NAME_SHOWN = 200  # a called tool's name in the value (a registered one has at most 128)
# A script's length, in characters (the schema's maxLength, which the kernel checks before the
# credential scan parses the source on the host and before the call is recorded). Its frame
# (at most 6 bytes a character as JSON) stays far below the bridge's frame limit. A 15 MB
# script held the host for 280 s at 8 GB and was recorded whole before the frame limit
# refused it.
MAX_SCRIPT_CHARS = 256 * 1024

DESCRIPTION = f"""Run a short Python script that calls this session's other tools, to do a
multi-step pipeline (read, transform, act on each item) in one turn.

Inside the script every tool is a function with keyword arguments:
tools.read_file(path="a.txt") returns its result (str, dict or list) or raises
ToolError (attributes .code, .message, .field, .decision); MCP tools are under
tools.mcp.<server>.<tool>. Arguments are checked against the tool's schema
before anything is sent. parallel(tools.read_file(path=p) for p in paths) runs
many calls at once (a generator, not a list) and returns their results in order;
if one fails the others still run and its ToolError is raised (.results has
all). call_tool(name, **arguments) calls a tool by its registered name.
print(...) output is returned; set a top-level variable named `result` to
return a JSON value. Every call passes the same approval gate as a direct call
and can be denied individually; in a dry run, calls that change anything are
staged. The script runs as restricted Python in a sandbox: no files, network,
processes or environment except through tool calls; no names starting with an
underscore; imports limited to {", ".join(ALLOWED_MODULES)}.
Timeout: timeout_seconds (default {DEFAULT_TIMEOUT_SECONDS}, at most {MAX_TIMEOUT_SECONDS});
the clock stops while a person is being asked to approve a call. At most
max_calls calls per run (default and ceiling set by the operator, normally
{DEFAULT_MAX_CALLS}); the calls past it raise ToolError (code denied).
A script cannot call {SCRIPT_TOOL} (denied: scripts do not nest)."""

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "script": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_SCRIPT_CHARS,
            "description": f"the Python source (at most {MAX_SCRIPT_CHARS:,} characters)",
        },
        "timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_TIMEOUT_SECONDS,
            "description": f"hard timeout (default {DEFAULT_TIMEOUT_SECONDS}, at most {MAX_TIMEOUT_SECONDS})",
        },
        "max_calls": {
            "type": "integer",
            "minimum": 1,
            "maximum": DEFAULT_MAX_CALLS,
            "description": f"tool-call budget of this run (default and ceiling {DEFAULT_MAX_CALLS})",
        },
    },
    "required": ["script"],
    "additionalProperties": False,
}

SessionFactory = Callable[[CallContext], Awaitable[Any]]


def register_script_tool(
    kernel: Kernel,
    *,
    backend_session_factory: SessionFactory | None = None,
    config: ScriptConfig | None = None,
    spare: bool = True,
    bridge_dir: Path | None = None,
) -> ToolSpec:
    """Register ``run_tool_script`` (irreversible, residual) into ``kernel``; return its spec.

    It composes with a dry run: the script runs, its reads run, and its other
    calls are staged into the kernel's plan (``composes_dry_run``).

    ``config`` is the operator's choice of sandbox level, transport and
    limits (default: strict, a Unix socket). Without ``backend_session_factory``
    scripts run as local subprocesses; with ``spare`` (default) a pool of
    ``config.warm_runners`` runners (default: one per core) is kept started
    ahead of need so a run skips interpreter start-up, refilled in the
    background and ended when the kernel closes. Each script's ``tools``
    namespace is built from the kernel's tools at the time it runs
    (:func:`describe_tools` renders it as stubs).
    ``backend_session_factory(ctx)`` returns the
    session's backend session (``ShellTool.session``): a docker session runs
    scripts in its container over the Unix socket in ``bridge_dir``, which
    must be mounted there (:func:`bridge_mounts`), or, on a remote engine, over
    the exec's own stream (:mod:`._remote`); it may also return a
    launcher (an object with ``launch``). Any other session is ``unavailable``.
    """
    config = config or ScriptConfig()
    schema = _schema(config.max_calls)
    local: list[LocalLauncher] = []  # made on the first local run, ended with the kernel
    docker_launchers: dict[int, Launcher] = {}

    async def close_local() -> None:
        while local:
            await local.pop().aclose()
        while docker_launchers:  # their spare runners
            await docker_launchers.popitem()[1].aclose()  # type: ignore[attr-defined]

    kernel.push_async_callback(close_local)
    slots: list[trio.CapacityLimiter] = []  # made on the first run (inside trio)

    cached: list[Any] = [None, None]  # the registry's tools when last built, and the manifest

    def manifest() -> list[dict[str, Any]]:
        """The tools a script sees, rebuilt only when the kernel's tools (or those offered
        to the caller that started it, :meth:`Kernel.offering`) changed."""
        offered = kernel.offered_tools()
        specs = [s for s in kernel.tools() if offered is None or s.name in offered]
        key = [id(spec) for spec in specs]
        if cached[0] != key:
            from ._stubs import script_manifest

            cached[0], cached[1] = key, script_manifest(specs)
        return cast(list[dict[str, Any]], cached[1])

    async def launcher_for(ctx: CallContext) -> Launcher:
        if backend_session_factory is None:
            if not local:
                from ._launch import LocalLauncher, default_warm_runners

                warm = config.warm_runners
                warm = (default_warm_runners() if warm is None else warm) if spare else 0
                local.append(LocalLauncher(warm=warm))
            return local[0]
        session = await backend_session_factory(ctx)
        if hasattr(session, "launch"):  # a session that is its own launcher
            return cast(Launcher, session)
        if getattr(session, "name", None) == "docker" and bridge_dir is not None:
            key = id(session)  # a restarted session is a new object: a new launcher
            if key not in docker_launchers:
                while docker_launchers:  # a restarted session's: its spare runner ends
                    await docker_launchers.popitem()[1].aclose()  # type: ignore[attr-defined]
                if getattr(session, "stream_bridge", False):  # a remote engine: no mount
                    from ._remote import RemoteScriptLauncher

                    docker_launchers[key] = RemoteScriptLauncher(session, bridge_dir)
                else:
                    from ._docker import DockerScriptLauncher

                    docker_launchers[key] = DockerScriptLauncher(session, bridge_dir)
            return docker_launchers[key]
        raise Unavailable(
            f"{SCRIPT_TOOL} cannot run in the {getattr(session, 'name', '?')!r} backend's "
            "session (no script launcher for it, or its container lacks the bridge mounts)",
            field="backend",
        )

    async def execute(args: dict[str, Any], ctx: CallContext) -> Any:
        timeout = float(args.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        if not math.isfinite(timeout):  # NaN passes every bound of the schema (and JSON)
            raise InvalidArguments(
                f"timeout_seconds must be a number of seconds (above 0, at most "
                f"{MAX_TIMEOUT_SECONDS}), not {timeout!r}",
                field="timeout_seconds",
            )
        if not slots:
            slots.append(trio.CapacityLimiter(config.max_concurrent_runs))
        async with _run_slot(slots[0], ctx, timeout):
            return await run_one(args, ctx, timeout)

    async def run_one(args: dict[str, Any], ctx: CallContext, timeout: float) -> Any:
        launcher = await launcher_for(ctx)
        changes: dict[str, Any] = {}
        transport = launcher.transport or config.transport
        if transport != config.transport:
            changes["transport"] = transport
        if "max_calls" in args:  # the schema keeps it within the operator's ceiling
            changes["max_calls"] = int(args["max_calls"])
        run_config = _replace(config, **changes) if changes else config
        from ._host import run_script

        result = await run_script(
            ctx,  # its calls re-enter the Gate as this call's children
            args["script"],
            timeout=timeout,
            trace_id=ctx.trace_id,
            parent_id=ctx.call_id,
            config=run_config,
            launcher=launcher,
            emit=ctx.emit,
            tools=manifest(),
        )
        return _outcome(ctx, result, timeout)

    spec = ToolSpec(
        SCRIPT_TOOL,
        DESCRIPTION,
        schema,
        execute,
        consequence=Consequence.IRREVERSIBLE,
        residual=True,
        composes_dry_run=True,
        meta={"sandbox": config.sandbox},
        credential_literals=lambda args, is_key: script_credential_literals(
            args.get("script"), is_key
        ),
    )
    kernel.register(spec)
    return spec


@contextlib.asynccontextmanager
async def _run_slot(
    slots: trio.CapacityLimiter, ctx: CallContext, timeout: float
) -> AsyncIterator[None]:
    """Hold one of the tool's ``max_concurrent_runs`` slots for a run.

    A run past the bound waits for a slot (``script_waiting`` says so), at most its own
    timeout, before any runner starts; then it is ``unavailable`` naming the field. Until
    2026-12-07 nothing bounded how many runners were alive at once, each allowed
    ``limits.memory_bytes``: a model turn or MCP clients starting scripts together
    multiplied the bound of one.
    """
    token = object()
    if slots.available_tokens == 0:
        ctx.emit(
            "script_waiting",
            running=slots.borrowed_tokens,
            max_concurrent_runs=slots.total_tokens,
        )
    with trio.move_on_after(timeout) as waited:
        await slots.acquire_on_behalf_of(token)
    if waited.cancelled_caught:
        raise Unavailable(
            f"{SCRIPT_TOOL}: {slots.total_tokens} scripts are already running in this session "
            f"(max_concurrent_runs) and none ended within this run's {timeout:g} s timeout; "
            "nothing of this script ran",
            field="max_concurrent_runs",
        )
    try:
        yield
    finally:
        slots.release_on_behalf_of(token)


def _schema(max_calls: int) -> dict[str, Any]:
    """The input schema, with ``max_calls`` bounded by the operator's ceiling."""
    import copy

    schema = copy.deepcopy(INPUT_SCHEMA)
    budget = schema["properties"]["max_calls"]
    budget["maximum"] = max_calls
    budget["description"] = f"tool-call budget of this run (default and ceiling {max_calls})"
    return schema


def _replace(config: ScriptConfig, **changes: Any) -> ScriptConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)


def _outcome(ctx: CallContext, result: ScriptResult, timeout: float) -> Any:
    """The tool's value for a script that ran, or the error for one that did not finish well.

    Errors carry the output, the calls and (for a script error) the traceback
    as details; those are redacted and capped here because the kernel only
    does so for values and messages.
    """
    payload = result.to_dict()
    _calls_for_model(payload, ctx.trace_id)
    _fit(ctx, payload)
    if result.status == "ok":
        return payload
    details = ctx.redact_value(payload)
    details["output"] = ctx.cap(details["output"])
    error = payload.get("error") or {}
    if result.status == "timeout":
        raise ToolTimeout(
            f"{SCRIPT_TOOL} ran past its {timeout:g} s timeout; the script's processes were "
            "killed. Output so far and the calls it made are in the details",
            field="timeout_seconds",
            **details,
        )
    if result.status == "compile_error":
        errors = "; ".join(error.get("errors", [])) or "it does not compile"
        raise InvalidArguments(
            f"the script was refused before it ran: {errors}", field="script", **details
        )
    if result.status == "error":
        line = f" at script line {error['line']}" if error.get("line") else ""
        message = error.get("message") or ""
        raise ToolError(
            f"the script raised {error.get('type', 'an error')}{line}: {message}".rstrip(": "),
            **details,
        )
    raise ToolError(
        error.get("message") or f"the script ended with status {result.status}", **details
    )


def _bounded(ctx: CallContext, value: Any) -> tuple[Any, bool]:
    """``value`` redacted, and whole while its JSON fits the session's output cap.

    Otherwise its JSON text cut to the cap (head and tail; the whole of it
    spooled, named by the marker), and True. The kernel caps each string of a
    value, not their sum: a script's result of many short strings (or long
    keys) would reach the model whole.
    """
    value = ctx.redact_value(value)
    if isinstance(value, str):
        capped = ctx.cap(value)
        return capped, capped != value
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    if len(text.encode("utf-8", "surrogatepass")) <= ctx.output_cap_bytes:
        return value, False
    return ctx.cap(text), True


def _fit(ctx: CallContext, payload: dict[str, Any]) -> None:
    """Bound what the script chose in the value (its result, its error, the tool names it
    called) by the session's output cap: redacted first, then cut (see :func:`_bounded`)."""
    if "result" in payload:
        payload["result"], cut = _bounded(ctx, payload["result"])
        if cut:
            payload["result_cut"] = (
                f"the result's JSON is larger than the output cap ({ctx.output_cap_bytes} "
                "bytes): it is given as JSON text, cut, with the whole of it in the spool file "
                "the marker names"
            )
    error = payload.get("error")
    if isinstance(error, dict):
        payload["error"] = {k: _bounded(ctx, v)[0] for k, v in error.items()}
    payload["calls"] = [{**r, "tool": _name_shown(r.get("tool"))} for r in payload["calls"]]
    for row in (payload.get("calls_omitted") or {}).get("by_tool_and_outcome", ()):
        row["tool"] = _name_shown(row.get("tool"))  # the summary's own rows


def _name_shown(tool: Any) -> Any:
    """A called tool's name as the value shows it: a registered name is at most 128
    characters; a longer one (a script's invention, refused) is cut."""
    if isinstance(tool, str) and len(tool) > MAX_NAME_SHOWN:
        return tool[:MAX_NAME_SHOWN] + f"… ({len(tool)} characters)"
    return tool


def _calls_for_model(payload: dict[str, Any], trace_id: str) -> None:
    """Keep the first and last :data:`CALL_RECORDS_KEPT` / 2 call records of a long run.

    The records between are replaced by ``calls_omitted``: how many, where,
    and how they ended (counts by tool and outcome). So what the kernel
    then redacts and caps record by record, and what reaches the model, is
    bounded whatever the run's length (a run of 3,000 calls cost ~60 ms
    there). Nothing escapes redaction: the summary is part of the value.
    """
    calls = payload["calls"]
    if len(calls) <= CALL_RECORDS_KEPT:
        return
    half = CALL_RECORDS_KEPT // 2
    omitted = calls[half:-half]
    counts: dict[tuple[Any, Any], int] = {}
    for record in omitted:
        outcome = "staged" if record.get("staged") else record.get("error") or "ok"
        key = (record.get("tool"), outcome)
        counts[key] = counts.get(key, 0) + 1
    rows = sorted(counts.items(), key=lambda kv: -kv[1])
    summary = [{"tool": t, "outcome": o, "count": n} for (t, o), n in rows[:SUMMARY_ROWS]]
    if len(rows) > SUMMARY_ROWS:
        rest = sum(n for _, n in rows[SUMMARY_ROWS:])
        summary.append({"tool": None, "outcome": "other", "count": rest})
    payload["calls"] = [*calls[:half], *calls[-half:]]
    payload["calls_omitted"] = {
        "count": len(omitted),
        "after": half,
        "by_tool_and_outcome": summary,
        "note": f"calls {half + 1} to {half + len(omitted)} of {len(calls)} are summarized here; "
        f"every call is in the event stream under trace {trace_id}",
    }


def unavailable_backend(backend: str) -> SessionFactory:
    """A session factory for a backend that cannot host scripts: every run says so."""

    async def factory(ctx: CallContext) -> Any:
        raise Unavailable(
            f"{SCRIPT_TOOL} cannot run under the {backend!r} execution backend in this build "
            "(its script launcher is not available); use the local backend for scripts",
            field="backend",
        )

    return factory
