"""Small real tools for the serve tests: they read, write and delete real files under one root.

One tool per consequence, plus ``batch``, a residual tool that re-enters the
Gate from a spawned task with ``origin="script"`` the way ``run_tool_script``
does, so nested approvals can be exercised before the real tools are merged.

The path rule here is deliberately simple (relative, no ``..``, no ``.git``
component for writes) and raises the same error codes the workspace tools do;
it is test scaffolding, not a confinement implementation.
"""

from __future__ import annotations

import contextvars
import os
import secrets
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import trio

from ringfence.runtime import (
    CallContext,
    Consequence,
    GitMetadata,
    Kernel,
    NotFound,
    OutsideWorkspace,
    ToolSpec,
)

PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
WRITE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}
BATCH_SCHEMA = {
    "type": "object",
    "properties": {
        "calls": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"tool": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["tool", "arguments"],
            },
        },
        "same_trace": {"type": "boolean"},
        "detached": {"type": "boolean"},
    },
    "required": ["calls"],
    "additionalProperties": False,
}

TOOL_NAMES = ("batch", "erase_file", "note_file", "peek_file", "shout")


def _resolve(root: Path, path: str, *, write: bool) -> Path:
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts:
        raise OutsideWorkspace(f"{path!r} is outside the workspace {root}", field="path")
    if write and ".git" in rel.parts:
        raise GitMetadata(f"writing {path!r} would change git metadata", field="path")
    return root / rel


def register_tools(kernel: Kernel, root: Path) -> None:
    async def peek(args: dict[str, Any], ctx: CallContext) -> str:
        target = _resolve(root, args["path"], write=False)
        if not target.is_file():
            raise NotFound(f"no file {args['path']!r}", field="path")
        return target.read_text()

    async def note(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        target = _resolve(root, args["path"], write=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(args["content"])
        return {"written": args["path"], "bytes": len(args["content"].encode())}

    async def erase(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        target = _resolve(root, args["path"], write=True)
        if not target.is_file():
            raise NotFound(f"no file {args['path']!r}", field="path")
        target.unlink()
        return {"erased": args["path"]}

    async def batch(args: dict[str, Any], ctx: CallContext) -> list[dict[str, Any]]:
        # Like the script bridge: inner calls run in tasks this executor spawns and
        # re-enter the Gate with origin "script".
        results: list[dict[str, Any]] = []
        # Without same_trace the inner calls start a trace of their own (still children).
        trace = ctx.trace_id if args.get("same_trace") else secrets.token_hex(8)
        for call in args["calls"]:

            async def one(call: dict[str, Any] = call) -> None:
                outcome = await ctx.invoke(
                    call["tool"], call["arguments"], origin="script", trace_id=trace
                )
                results.append(outcome.to_dict())

            if args.get("detached"):
                # A task that does not inherit this call's context (as if the bridge
                # served scripts from a task started elsewhere): only the trace id
                # can lead the approver back to the client.
                done = trio.Event()

                async def detached(one: Any = one, done: trio.Event = done) -> None:
                    try:
                        await one()
                    finally:
                        done.set()

                trio.lowlevel.spawn_system_task(detached, context=contextvars.Context())
                await done.wait()
            else:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one)
        return results

    async def shout(args: dict[str, Any], ctx: CallContext) -> str:
        # Everything a careless tool can do to a stdio server: print, write fd 1, and run
        # a child that inherits fds 0 and 1 and reads stdin to its end.
        print("stray print from a tool")
        os.write(1, b"raw bytes on fd 1\n")
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(["sh", "-c", "cat; echo child output"], timeout=10)
        )
        return f"shouted; the child exited {done.returncode}"

    kernel.register(
        ToolSpec(
            "shout",
            "Make noise on stdout.",
            {"type": "object"},
            shout,
            consequence=Consequence.READ,
        )
    )
    kernel.register(
        ToolSpec("peek_file", "Read a text file.", PATH_SCHEMA, peek, consequence=Consequence.READ)
    )
    kernel.register(
        ToolSpec(
            "note_file",
            "Write a text file.",
            WRITE_SCHEMA,
            note,
            consequence=Consequence.REVERSIBLE,
        )
    )
    kernel.register(
        ToolSpec(
            "erase_file",
            "Delete a file.",
            PATH_SCHEMA,
            erase,
            consequence=Consequence.IRREVERSIBLE,
        )
    )
    kernel.register(
        ToolSpec(
            "batch",
            "Run several tool calls, each through the Gate.",
            BATCH_SCHEMA,
            batch,
            consequence=Consequence.IRREVERSIBLE,
            residual=True,
        )
    )


def reconnection_tool() -> ToolSpec:
    """``test_reconnection``, as the conformance suite's server-sse-polling scenario expects.

    A host tool (source ``native``) registered through the public API: it asks for
    its call's response stream to be closed (:func:`ringfence.serve.close_sse_stream`)
    after 0.1 s (as the SDKs' SSE-polling examples do), waits a moment so the client has to resume, and answers with text saying whether
    the stream was closed. The suite's own version lives in its test server; nothing
    like it is registered by ringfence itself.
    """
    from ringfence.serve._resume import close_sse_stream

    async def run(args: dict[str, Any], ctx: CallContext) -> str:
        await trio.sleep(0.1)  # a call that has been running a while (see close_sse_stream)
        closed = await close_sse_stream()
        await trio.sleep(0.1)  # the result is produced after the stream is gone
        return f"Reconnection test completed (stream closed: {closed})"

    return ToolSpec(
        "test_reconnection",
        "Closes its SSE stream mid-call; the client resumes with Last-Event-ID (SSE polling).",
        {"type": "object", "properties": {}, "additionalProperties": False},
        run,
        consequence=Consequence.READ,
    )
