"""A plugin's command hook: one confined process per run, the event on stdin, the answer on stdout.

The contract a hook's command sees:

- stdin: the event, one JSON object (``hook_event``: ``pre_call``,
  ``post_call``, ``session_start`` or ``session_end``; the tool, its
  arguments, the decision so far, a ``post_call``'s outcome), redacted; then
  end of file. ``RINGFENCE_HOOK_EVENT`` and ``RINGFENCE_PLUGIN_ROOT`` (the
  session's copy of the plugin, which is also the working directory) are set.
- stdout: nothing (continue) or one JSON object, at most :data:`MAX_ANSWER`
  bytes: ``{"decision": "continue"|"ask"|"deny", "reason": …,
  "annotations": {…}}``.
- exit status: 0 — the answer on stdout counts; 2 — deny, the reason being
  the answer's, else the last line of stderr; anything else, a signal, or
  more output than allowed — the hook failed (a ``pre_call`` call is then
  refused: fail closed).

Where it runs: the ``local`` backend's confinement, as ``sandbox = "local"``
MCP servers do (``backends.confined._exec.confine_exec``): new namespaces, no capabilities,
the host read-only, the workspace roots and the plugin's copy read-only, a
private ``/tmp`` (the only place it can write, gone when it ends), homes and
``$RINGFENCE_HOME`` hidden, no network unless the manifest's ``network =
true`` (shown by ``plugin show`` and ``trust``), Landlock, seccomp, rlimits.
The whole tree is killed when the run ends, at its timeout, or on
cancellation. Unavailable confinement (no bubblewrap, Landlock or seccomp)
fails the run, naming the layer: a hook never runs unconfined.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from ..runtime._errors import ToolError, Unavailable
from ..runtime._hooks import HookAnswer
from ..runtime._programs import program_outside_roots, search_path
from ._manifest import HookConfig

__all__ = ["MAX_ANSWER", "CommandRunner"]

MAX_ANSWER = 64 * 1024
MAX_REPORT = 64 * 1024  # the supervisor's report line
STDERR_TAIL = 2048
_DENY_STATUS = 2


class CommandRunner:
    """Runs one hook's command confined; awaited as a ``Hook.run``.

    ``snapshot()`` gives the folder the session copied the plugin into (made
    on first use); ``roots`` are the session's workspace roots (read-only to the hook).
    """

    def __init__(
        self,
        config: HookConfig,
        snapshot: Any,
        roots: Sequence[str],
    ) -> None:
        self.config = config
        self._snapshot = snapshot
        self._roots = tuple(roots)
        self._plan: Any = None

    def _search_path(self) -> str:
        """The operator's PATH without its relative entries and those in a workspace root
        (:mod:`ringfence.runtime._programs`: the agent writes there)."""
        return search_path(os.environ.get("PATH", os.defpath), self._roots)

    def _argv(self, folder: Path) -> list[str]:
        """The hook's argv: a relative program is the plugin copy's, a bare name is looked up
        on :meth:`_search_path`; either way the program run is checked to lie outside the
        workspace roots (resolved through links). Raises Unavailable naming it."""
        program, *rest = self.config.command
        what = f"the hook {self.config.name}"
        if "/" in program and not program.startswith("/"):
            program = _in_copy(folder, program, what)
        program = program_outside_roots(program, self._roots, self._search_path(), what)
        return [program, *rest]

    def _make_plan(self, folder: Path) -> Any:
        from ..backends.confined._exec import confine_exec

        return confine_exec(
            (*self._roots, str(folder)),
            self._argv(folder),
            cwd=str(folder),
            network=self.config.network,
            writable=False,
        )

    async def __call__(self, event: Mapping[str, Any]) -> HookAnswer:
        from .. import _proc  # here: a session without command hooks never loads the supervisor

        folder: Path = await self._snapshot.ensure()
        if self._plan is None:
            self._plan = await trio.to_thread.run_sync(self._make_plan, folder)
            await trio.to_thread.run_sync(_proc.tracking)  # probed once, off the trio thread
        plan = self._plan
        env = {
            "PATH": self._search_path(),
            "LANG": "C.UTF-8",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "RINGFENCE_HOOK_EVENT": str(event.get("hook_event", "")),
            "RINGFENCE_PLUGIN_ROOT": str(folder),
        }
        try:
            proc = _proc.spawn(list(plan.argv), cwd=folder, env=env, stdin_pipe=True)
        except _proc.ExecFailed as exc:
            raise Unavailable(f"the hook's sandbox could not start: {exc.message}") from None
        payload = json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass")
        stdin = trio.lowlevel.FdStream(proc.stdin) if proc.stdin is not None else None
        stdout = trio.lowlevel.FdStream(proc.stdout)
        stderr = trio.lowlevel.FdStream(proc.stderr)
        tail = bytearray()
        out = bytearray()
        too_much = False
        try:

            async def feed() -> None:
                if stdin is None:
                    return
                try:
                    await stdin.send_all(payload)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the hook did not read it all: its answer says what it thought
                finally:
                    await stdin.aclose()

            async def drain_err() -> None:
                while chunk := await stderr.receive_some(65536):
                    tail.extend(chunk)
                    del tail[:-STDERR_TAIL]

            async def drain_out() -> None:
                nonlocal too_much
                while chunk := await stdout.receive_some(65536):
                    out.extend(chunk)
                    if len(out) > MAX_REPORT + MAX_ANSWER:
                        too_much = True
                        proc.kill_rest_now()
                        return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed)
                nursery.start_soon(drain_err)
                nursery.start_soon(drain_out)
            await proc.wait_leader()
            status = proc.exit_code_when_done()
        finally:
            with trio.CancelScope(shield=True):
                proc.kill_rest_now()
                await proc.kill_rest()
                proc.close()
                for stream in (stdin, stdout, stderr):
                    if stream is not None:
                        await stream.aclose()
        report, _, answer = bytes(out).partition(b"\n")
        layers = plan.read_report(report)  # raises Unavailable when it was not confined
        err = tail.decode("utf-8", "replace").strip()
        details: dict[str, Any] = {
            "exit_status": status,
            "sandbox": "local: " + ", ".join(layer.name for layer in layers if layer.ok),
        }
        if err:
            details["stderr"] = err[-STDERR_TAIL:]
        if too_much or len(answer) > MAX_ANSWER:
            raise ToolError(f"the hook wrote more than {MAX_ANSWER} bytes to stdout", **details)
        text = answer.decode("utf-8", "replace").strip()
        parsed: Any = None
        if text:
            try:
                parsed = json.loads(text)
            except ValueError as exc:
                if status != _DENY_STATUS:
                    raise ToolError(f"its stdout is not a JSON object ({exc})", **details) from None
        if status == _DENY_STATUS:
            reason = ""
            if isinstance(parsed, Mapping) and isinstance(parsed.get("reason"), str):
                reason = parsed["reason"]
            reason = reason or (err.splitlines()[-1] if err else "it exited with status 2")
            return HookAnswer("deny", reason, details=details)
        if status != 0:
            raise ToolError(
                f"it exited with status {status}" + (f": {err.splitlines()[-1]}" if err else ""),
                **details,
            )
        if parsed is None:
            return HookAnswer(details=details)
        needs = event.get("hook_event") in ("pre_call", "session_start")
        answer_ = HookAnswer.parse(parsed, needs_decision=needs)  # ValueError: not an answer
        return HookAnswer(answer_.decision, answer_.reason, answer_.annotations, details)


def _in_copy(folder: Path, program: str, what: str) -> str:
    """The file the relative ``program`` is in the plugin's copy ``folder``, resolved as the
    kernel resolves it (every link followed): the path that runs. Unavailable when that
    file is not a regular file inside the copy (a link or ``..`` on the way led out of it):
    what runs must be what was hashed, never a file beside or above the copy."""
    base = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(base, program))
    if os.path.commonpath([base, real]) != base or real == base or not os.path.isfile(real):
        raise Unavailable(
            f"{what}'s program {program!r} is not a file of the plugin's copy (resolved "
            f"through its links it is {real}): it is not run",
            field="command",
        )
    return real
