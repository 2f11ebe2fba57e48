"""The host side of one script run: spawn the runner, serve the bridge, gate every call.

:func:`run_script` is the whole lifecycle::

    listen (a 0600 Unix socket in a 0700 directory, or 127.0.0.1:0)
    spawn the runner (secret through an inherited pipe; own session; pdeathsig)
    accept → a Unix peer whose pid/uid (SO_PEERCRED) is not the runner's is
             refused at once; others handshake concurrently, each under its own
             deadline, in frames of at most 4 KiB and bounded nesting; at most
             MAX_PENDING_HANDSHAKES at a time, the oldest evicted for a new one
             (a silent peer cannot hold the runner out) → the first
             authenticated connection wins; every other connection, and every
             failed handshake, is refused and logged as a ``bridge_refused``
             event (the first MAX_REFUSAL_EVENTS, then one summary; the total is
             in ``script_finished``)
    sandboxed report ─► script ─► call/reply … ─► done ─► bye
    wait for the child; kill its process group on any exit path

The pieces: launching (:mod:`._launch`), the listener, admission and the
authenticated channel (:mod:`._channel`), the session that gates every call
(:mod:`._session`), the output capture (:mod:`._capture`). This module is the
lifecycle that holds them together and turns how a run ended into a result.

Output: the script's stdout is redacted as it arrives (a secret split across
reads included), then kept whole while it fits the kernel's output cap, and
otherwise written to a 0600 spool file (up to ``output_spool_bytes``) while
the reply keeps a head and a tail: redact first, cut after.

Cancellation: the child is killed and reaped before any exception (including
``Cancelled``) leaves :func:`run_script`; the kill is shielded.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

import trio

from ..runtime._calls import CallContext
from ..runtime._errors import RingfenceError, ToolError
from ..runtime._kernel import Kernel
from ..runtime._output import cut_bytes
from . import _sandbox, _wire
from ._allowlist import named_modules
from ._capture import OutputCapture
from ._channel import BridgeListener
from ._config import ScriptConfig, ScriptResult
from ._launch import (
    CHILD_EXIT_SECONDS,
    ChildProcess,
    Launcher,
    LaunchRequest,
    LocalLauncher,
    child_env,
)
from ._session import Emit, ScriptSession

__all__ = ["run_script"]

STDERR_KEEP = 8192


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


_KILL_REASONS = {
    "SIGXCPU": "the CPU-time limit ({cpu} s) was reached",
    "SIGKILL": "it was killed (SIGKILL: the hard CPU-time limit, or the system)",
    "SIGSYS": "it made a system call the sandbox forbids",
    "SIGSEGV": "it crashed (SIGSEGV)",
    "SIGXFSZ": "it tried to write a file (the file-size limit is 0)",
}


async def run_script(
    kernel: Kernel | CallContext,
    script: str,
    *,
    timeout: float,
    trace_id: str,
    parent_id: str | None = None,
    config: ScriptConfig | None = None,
    launcher: Launcher | None = None,
    emit: Emit | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
) -> ScriptResult:
    """Run ``script`` in a sandboxed child with every ``call_tool`` gated by ``kernel``.

    Returns a :class:`ScriptResult` for every way the *script* can end (ok,
    error, compile_error, timeout, killed). Raises :class:`Unavailable` when
    the sandbox (at the configured level) or the runner cannot start, and
    :class:`ToolError` when the bridge itself fails (protocol violation, child
    gone before reporting). The child is dead and reaped when this returns or
    raises, cancellation included. The deadline (``timeout`` seconds) pauses
    while the kernel's approver is asking about one of the script's calls.

    ``tools`` is the manifest the script's ``tools`` namespace is built from
    (``_stubs.script_manifest``); None: the kernel's tools (a Kernel), or
    none (a CallContext, whose calls ``call_tool`` still makes).
    """
    config = config or ScriptConfig()
    if tools is None:
        if isinstance(kernel, Kernel):
            from ._stubs import script_manifest

            tools = script_manifest(kernel.tools())
        else:
            tools = ()
    launcher = launcher or LocalLauncher()
    if emit is None:
        if not isinstance(kernel, Kernel):
            raise TypeError("run_script: pass emit with a CallContext")
        events = kernel.events
        emit = lambda kind, **data: events.emit(kind, trace_id, call_id=parent_id, **data)  # noqa: E731
    if config.sandbox != _sandbox.STRICT or config.mode != "restricted":
        emit("script_sandbox_level", level=config.sandbox, mode=config.mode)
    # One second over the timeout: the wall clock (which reports "timeout" with the output)
    # normally wins; start-up CPU, a spare's imports included, counts against the limit.
    cpu = config.limits.cpu_seconds or math.ceil(timeout) + 1
    policy = {
        "level": config.sandbox,
        "cpu_seconds": cpu,
        "memory_bytes": config.limits.memory_bytes,
        "open_files": config.limits.open_files,
        "file_size_bytes": config.limits.file_size_bytes,
        "uid": config.uid,
        "gid": config.gid,
    }
    child: ChildProcess | None = None
    peer_is_child = launcher.peer_is_child
    # A local runner connects before it drops privileges: as this process's uid (or, when
    # this process is root, the uid it was started as; root's own processes are root).
    peer_uids = frozenset({os.geteuid(), os.getuid()}) if peer_is_child else None
    run = ScriptSession(
        kernel, config, emit, trace_id, parent_id,
        lambda: child.pid if child is not None and peer_is_child else None,
        peer_uids,
        tools,
    )  # fmt: skip
    out = OutputCapture(
        kernel.redactor, kernel.output_cap_bytes, kernel.spool_dir, config.output_spool_bytes
    )
    err = OutputCapture(kernel.redactor, STDERR_KEEP, what="runner diagnostics")
    # A local runner connects as this process's uid, before it drops to the sandbox's: the
    # socket and its directory stay ours. Handed to the sandbox's uid, any process of that
    # uid (65534, nobody's daemons) could remove, replace or rename them, or plant a link.
    owner = launcher.socket_owner
    started = time.monotonic()
    done: dict[str, Any] | None = None
    serve_error: BaseException | None = None
    timed_out = False
    returncode: int | None = None
    listener = await BridgeListener.open(config.transport, owner, launcher.bridge_parent)
    try:
        request = LaunchRequest(
            {"policy": policy, "max_frame": config.max_frame, "preload": named_modules(script)},
            run.admission.secret,
            listener,
            child_env(),
        )
        child = await launcher.launch(request)
        emit(
            "script_started",
            pid=child.pid,
            launcher=launcher.name,
            address=listener.address,
            sandbox=config.sandbox,
            timeout_seconds=timeout,
            cpu_seconds=cpu,
            memory_bytes=config.limits.memory_bytes,
        )
        exited = trio.Event()

        async def watch_child() -> None:
            nonlocal returncode
            returncode = await child.wait()
            exited.set()

        async def serve(session: trio.Nursery) -> None:
            nonlocal done, serve_error
            try:
                done = await run.serve(script)
            except (
                RingfenceError,
                _wire.ProtocolError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
            ) as exc:
                serve_error = exc
            session.cancel_scope.cancel()

        async def child_gone(session: trio.Nursery) -> None:
            await exited.wait()
            await trio.sleep(0.5)  # what the child sent before exiting is still readable
            session.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, child, out, err)
            nursery.start_soon(run.admission.accept_loop, listener, nursery)
            nursery.start_soon(watch_child)
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                run.scope = scope
                async with trio.open_nursery() as session:
                    session.start_soon(serve, session)
                    session.start_soon(child_gone, session)
            timed_out = scope.cancelled_caught and done is None and serve_error is None
            if done is not None:
                with trio.move_on_after(2.0):
                    await exited.wait()
            child.kill()
            if (
                run.admission.channel is not None
            ):  # the runner's watchdog ends it where kill() cannot reach
                run.admission.channel.close()
            with trio.move_on_after(CHILD_EXIT_SECONDS):
                await exited.wait()
            if not exited.is_set():
                emit("script_not_reaped", pid=child.pid, waited_seconds=CHILD_EXIT_SECONDS)
            with trio.move_on_after(1.0):  # the child is dead: its output reaches EOF promptly
                await out.eof.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        out.close(remove=True)  # nobody will be told where it is
        raise
    finally:
        with trio.CancelScope(shield=True):
            if child is not None:
                await child.aclose()
            if run.admission.channel is not None:
                run.admission.channel.close()
            listener.aclose_sync()
    try:
        output = await out.finish()
        diagnostics = await err.finish()
        return _result(
            run, output, diagnostics, done, serve_error, timed_out, returncode, timeout, cpu, emit,
            time.monotonic() - started,
        )  # fmt: skip
    except BaseException:  # no result names the spool file: do not leave it behind
        out.close(remove=True)
        raise


async def _pump(child: ChildProcess, out: OutputCapture, err: OutputCapture) -> None:
    try:
        await child.pump(out.feed, err.feed)
    finally:
        out.eof.set()
        err.eof.set()


def _result(
    run: ScriptSession,
    output: str,
    diagnostics: str,
    done: dict[str, Any] | None,
    serve_error: BaseException | None,
    timed_out: bool,
    returncode: int | None,
    timeout: float,
    cpu: int,
    emit: Emit,
    seconds: float,
) -> ScriptResult:
    """Turn how the run ended into a ScriptResult, or raise for a broken bridge or sandbox."""
    report = run.sandbox_report
    calls = tuple(run.calls)
    base = {"sandbox": report, "returncode": returncode, "seconds": seconds}
    # Bounded totals: the refusal events stop at MAX_REFUSAL_EVENTS, the call records at
    # the budget; the counts are always here.
    totals = {
        "refused_peers": run.admission.refusals,
        "refused_over_budget": run.over_budget,
        "refused_over_bytes": run.over_bytes,
    }
    if isinstance(serve_error, RingfenceError):  # the sandbox could not be applied
        emit("script_finished", status=serve_error.code, detail=serve_error.message)
        raise serve_error
    if done is not None:
        status = str(done.get("status"))
        error = None
        if status == "error":
            error = dict(done.get("error") or {})
            if error.get("type") == "MemoryError":  # CPython's says nothing: name the limit
                limit = run.config.limits.memory_bytes
                error["message"] = (
                    f"the script ran out of memory: a run may use {limit} bytes "
                    "(ScriptConfig.limits.memory_bytes)"
                )
        elif status == "compile_error":
            error = {"errors": [str(e) for e in done.get("errors") or []]}
        emit(
            "script_finished",
            status=status,
            calls=len(calls),
            seconds=round(seconds, 3),
            paused_seconds=round(run.paused_seconds, 3),
            **totals,
        )
        return ScriptResult(
            status, output, calls, done.get("result"), bool(done.get("has_result")), error, **base
        )
    if timed_out:
        emit(
            "script_finished",
            status="timeout",
            calls=len(calls),
            seconds=round(seconds, 3),
            **totals,
        )
        message = f"the script ran past its {timeout:g} s timeout and was killed"
        return ScriptResult("timeout", output, calls, error={"message": message}, **base)
    if isinstance(serve_error, _wire.ProtocolError) and serve_error.reason != "closed":
        run.admission.refuse(f"protocol_{serve_error.reason}", "runner", serve_error.message)
        emit("script_finished", status="bridge_failed", reason=serve_error.reason)
        raise ToolError(
            f"the script bridge refused a message and stopped the run: {serve_error.message}",
            reason=serve_error.reason,
        )
    sig = _signal_name(returncode)
    if sig is not None and report is not None:
        why = _KILL_REASONS.get(sig, f"it was killed by {sig}").format(cpu=cpu)
        emit(
            "script_finished",
            status="killed",
            signal=sig,
            calls=len(calls),
            seconds=round(seconds, 3),
            **totals,
        )
        error = {"message": f"the script was stopped: {why}", "signal": sig}
        return ScriptResult("killed", output, calls, error=error, **base)
    detail = cut_bytes(diagnostics.strip(), 2000, tail=True)  # redacted already
    stage = "before running the script" if report is None else "without reporting an outcome"
    emit("script_finished", status="failed", returncode=returncode, detail=detail)
    raise ToolError(
        f"the script runner exited with code {returncode} {stage}"
        + (f": {detail}" if detail else ""),
        returncode=returncode,
    )
