"""The ``run_shell`` tool: a kernel tool on top of a lazily started backend session.

The Gate decides (``run_shell`` is residual: it asks first under every posture
short of ``unrestricted``); this module only resolves the working directory
through the workspace, builds the environment, runs the command on the
session's backend and shapes the result. The backend session starts on the
first call and is closed with the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import trio

from ..runtime import (
    CallContext,
    Consequence,
    Kernel,
    Posture,
    RingfenceError,
    StreamRedactor,
    ToolSpec,
)
from ._registry import select_backend, start_session
from ._types import DEFAULT_KILL_GRACE, BackendSession, SessionSpec

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "ShellTool",
    "WorkspaceLike",
    "register_shell_tool",
]

DEFAULT_TIMEOUT_SECONDS = 120.0
MAX_TIMEOUT_SECONDS = 3600.0
# Output streamed into the event log per call and stream; the result itself carries the rest.
EVENT_STREAM_BYTES = 16 * 1024
# Room for cap_text's marker, so the kernel's own cap does not cut an already-cut text again.
MARKER_ROOM = 1024

DESCRIPTION = """Run a command in the session's execution backend and return its exit code and output.

`command` is a shell string (run with /bin/sh -c) or an argv list (run without a shell).
`cwd` is a directory inside the workspace (default: the first workspace root).
Each call starts fresh: cwd, exported variables and background processes do not carry
over to the next call; files do. Output beyond the cap is cut head+tail with the full
text saved to a file named in the output. A command still running at `timeout_seconds`
is killed with its whole process tree and the result says "timeout"."""

ENV_NAME_PATTERN = "^(?!LD_|DYLD_|RINGFENCE_)[A-Za-z_][A-Za-z0-9_]*$"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "description": "a shell command line, or an argv list run without a shell",
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
        },
        "cwd": {
            "type": "string",
            "description": "working directory inside the workspace (default: the first root)",
        },
        "timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_TIMEOUT_SECONDS,
            "description": f"kill the command after this long (default {DEFAULT_TIMEOUT_SECONDS:.0f})",
        },
        "env": {
            "type": "object",
            "description": "extra environment variables for this command (names: letters, "
            "digits, _; not LD_*, DYLD_* or RINGFENCE_*)",
            "propertyNames": {"pattern": ENV_NAME_PATTERN},
            "additionalProperties": {"type": "string"},
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}


class WorkspaceLike(Protocol):
    """What run_shell needs from :class:`ringfence.workspace.Workspace`."""

    @property
    def roots(self) -> Sequence[Path]: ...

    def resolve_dir(self, path: str, *, unrestricted: bool = False) -> Path: ...

    def git_directories(self) -> list[Path]: ...


class ShellTool:
    """One kernel's ``run_shell``: its backend choice and its (lazy) session."""

    def __init__(
        self,
        kernel: Kernel,
        backend: str,
        workspace: WorkspaceLike,
        *,
        options: Mapping[str, Any] | None = None,
        network: bool = False,
        passthrough_env: Sequence[str] = (),
        kill_grace: float = DEFAULT_KILL_GRACE,
        extra_mounts: Sequence[tuple[Path, str, bool]] = (),
    ) -> None:
        self.kernel = kernel
        self._extra_mounts = tuple(extra_mounts)
        self.backend = backend
        self.workspace = workspace
        self._options = dict(options or {})
        self._network = network
        self._passthrough = tuple(passthrough_env)
        self._grace = kill_grace
        self._session: BackendSession | None = None
        self._starting = trio.Lock()
        self._closed = False

    async def session(self, ctx: CallContext) -> BackendSession:
        """The backend session, started on first use. Raises what the backend's start raises."""
        async with self._starting:
            if self._closed:
                raise trio.ClosedResourceError("the kernel was closed")
            if self._session is None:
                spec = SessionSpec(
                    roots=tuple(self.workspace.roots),
                    readonly_paths=tuple(self.workspace.git_directories()),
                    network=self._network,
                    passthrough_env=self._passthrough,
                    spool_dir=self.kernel.spool_dir,
                    kill_grace=self._grace,
                    options=self._options,
                    extra_mounts=self._extra_mounts,
                )
                self._session = await start_session(self.backend, spec)
                ctx.emit(
                    "backend_started",
                    backend=self.backend,
                    roots=[str(r) for r in spec.roots],
                    readonly_paths=[str(p) for p in spec.readonly_paths],
                    sandbox=getattr(self._session, "metadata", None),
                )
            return self._session

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.aclose()

    async def __call__(self, args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        unrestricted = ctx.posture is Posture.UNRESTRICTED
        try:
            cwd = self.workspace.resolve_dir(args.get("cwd", "."), unrestricted=unrestricted)
        except RingfenceError as exc:
            exc.field = "cwd"  # the resolver names its own argument; here it is cwd
            raise
        timeout = float(args.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        session = await self.session(ctx)
        env = dict(args.get("env") or {})
        # Values the child receives that look like credentials are redacted from everything.
        self.kernel.redactor.register_env(session.environment(env))
        streams = _EventStreams(ctx, self.kernel)
        result = await session.run(
            args["command"],
            cwd=cwd,
            env=env,
            timeout=timeout,
            output_cap=max(self.kernel.output_cap_bytes - MARKER_ROOM, MARKER_ROOM),
            on_output=streams.feed,
            redact=self.kernel.redactor.redact,
        )
        streams.flush()
        if result.session_restarted:
            ctx.emit("notice", message=f"the {self.backend} backend session was restarted")
        return {**result.to_dict(), "backend": self.backend, "cwd": str(cwd)}


class _EventStreams:
    """Streams output into the event log as ``output`` events: redacted, bounded per call."""

    def __init__(self, ctx: CallContext, kernel: Kernel) -> None:
        self._ctx = ctx
        self._redactors = {s: StreamRedactor(kernel.redactor) for s in ("stdout", "stderr")}
        self._budget = {"stdout": EVENT_STREAM_BYTES, "stderr": EVENT_STREAM_BYTES}

    def feed(self, stream: str, text: str) -> None:
        self._emit(stream, self._redactors[stream].feed(text))

    def flush(self) -> None:
        for stream, redactor in self._redactors.items():
            self._emit(stream, redactor.flush())

    def _emit(self, stream: str, text: str) -> None:
        budget = self._budget[stream]
        if not text or budget <= 0:
            return
        data = text.encode()[:budget].decode("utf-8", "ignore")
        self._budget[stream] = budget - len(data.encode())
        self._ctx.emit("output", stream=stream, text=data)
        if self._budget[stream] <= 0:
            self._ctx.emit("notice", message=f"further {stream} is in the result, not the events")


def register_shell_tool(
    kernel: Kernel,
    *,
    backend: str | None,
    workspace: WorkspaceLike,
    options: Mapping[str, Any] | None = None,
    network: bool = False,
    passthrough_env: Sequence[str] = (),
    kill_grace: float = DEFAULT_KILL_GRACE,
    extra_mounts: Sequence[tuple[Path, str, bool]] = (),
) -> ShellTool:
    """Register ``run_shell`` on ``kernel``, running on ``backend``.

    ``backend`` is resolved now (explicit, else ``$RINGFENCE_EXECUTION_BACKEND``,
    else ``local``; an unknown name raises InvalidArguments), but the session
    starts on the first call, with the workspace's roots and, as read-only
    paths, its git directories at that moment. The session is closed when the
    kernel closes. ``options`` go to the backend (docker: ``image``,
    ``memory``, …). ``extra_mounts`` go to the session spec (docker only).
    """
    name = select_backend(backend)
    tool = ShellTool(
        kernel,
        name,
        workspace,
        options=options,
        network=network,
        passthrough_env=passthrough_env,
        kill_grace=kill_grace,
        extra_mounts=extra_mounts,
    )
    kernel.register(
        ToolSpec(
            "run_shell",
            DESCRIPTION,
            INPUT_SCHEMA,
            tool,
            consequence=Consequence.IRREVERSIBLE,
            residual=True,
            meta={"backend": name},
        )
    )
    kernel.push_async_callback(tool.aclose)
    return tool
