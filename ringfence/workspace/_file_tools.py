"""The six native file tools, as ToolSpecs over a :class:`Workspace`.

Each executor reads ``ctx.posture``: under ``unrestricted`` that one call
runs on :meth:`Workspace.with_host_root` (so switching the session back
restores the restriction); git metadata stays refused in every posture. Notices
(paths reached outside the roots, ripgrep falling back to Python) are emitted
after the work, from the trio side.

**Where the work runs** (measured, see benchmarks/README.md, "file tools: the
thread hop"): one ``trio.to_thread.run_sync`` hop costs 55-60 µs on an idle
2-core VM and 150-180 µs under load, while a confined read of a 64 KiB file
costs 17 µs, of 256 KiB 36 µs, of 1 MiB 112 µs, and listing 10 entries 16 µs,
100 entries 70 µs. So:

* ``read_file`` of a regular file of at most :data:`READ_INLINE_MAX_BYTES`
  (256 KiB) and ``list_directory`` of a directory whose ``st_size`` is at
  most :data:`LIST_INLINE_MAX_DIR_BYTES` (4 KiB: one ext4 block, about 100
  to 200 names; tmpfs and btrfs count similarly) run **inline** on the trio
  thread: the work costs less than the hop would. A probe (open with
  ``O_PATH`` through the same resolver, ``fstat``; about 5 µs) decides.
* Larger reads and listings, ``glob_files`` and ``grep_files`` (walks of
  unknown size) run in a **worker** thread. So do ``write_file`` and
  ``edit_file`` at any size: they ``fsync`` the file and its directory
  (4-12 ms here), far more than a hop.

The probe and the operation are two resolves, so a file swapped for a huge one
between them is still opened inline: the inline try runs under a deadline of
:data:`INLINE_SECONDS` and, past it, the read-only work is done again in a
worker under the call's own deadline. Not promised: a whole-file read (at most
16 MiB) or one directory scan is not interrupted midway (a ranged read is, every
MiB). A cancelled call does not start the inline work.

Contracts at this boundary (the Python :class:`Workspace` API speaks ``os``
strings; the tools speak JSON):

* **Names** are shown in the escaped form of ``ringfence.workspace._names``
  (an undecodable byte as ``\\xHH``, a backslash as ``\\\\``), in results,
  error messages and notices, and every ``path`` (and glob) argument is read
  in that form, so a name a tool showed can be given back to any tool.
* **Deadline**: every call ends within ``timeout_seconds`` (default 60, as an
  MCP call): the walk, the search and the wait for ripgrep check it and the
  call fails with ``timeout``. A cancelled call stops its worker the same way
  and waits for it (shielded) before the cancellation goes on.
* **Bounds**: ``list_directory`` shows at most ``max_entries`` (default
  5,000) and ``glob_files`` at most ``max_results`` (default 1,000), both up
  to 100,000; ``grep_files`` at most ``max_results`` (default 100, up to
  10,000). A cut list ends with one marker object
  ``{"truncated": true, "shown": n, "total": m, "message": ...}`` (``total``
  is omitted for grep, which stops searching at the cut).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from ..runtime._calls import CallContext
from ..runtime._errors import InvalidArguments, RingfenceError, ToolTimeout
from ..runtime._kernel import Kernel
from ..runtime._tools import Consequence, ToolSpec
from ..runtime.policy._decide import Posture
from ._deadline import Deadline
from ._judged import judging
from ._names import escape_name, escape_text, unescape_path
from ._workspace import FileOps, Workspace
from .changes._store import CheckpointStore
from .changes._undo import recorded

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "INLINE_SECONDS",
    "LIST_DEFAULT_ENTRIES",
    "LIST_INLINE_MAX_DIR_BYTES",
    "MAX_ENTRIES",
    "READ_INLINE_MAX_BYTES",
    "file_tool_specs",
    "register_file_tools",
]

# Like an MCP call's call_timeout_seconds.
DEFAULT_TIMEOUT_SECONDS = 60.0
# list_directory's default cap, and the hard cap of list_directory and glob_files.
LIST_DEFAULT_ENTRIES = 5000
MAX_ENTRIES = 100_000
# Work below these sizes runs on the trio thread: it costs less than a thread hop
# (module docstring; benchmarks/README.md has the measurements).
READ_INLINE_MAX_BYTES = 256 * 1024
# How long an inline read or listing may hold the event loop before it hops to a worker
# (a 256 KiB read takes about 40 us; only a file changed since the probe comes near this).
INLINE_SECONDS = 0.05
LIST_INLINE_MAX_DIR_BYTES = 4096

_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "A file path: relative to the first workspace root, or absolute inside a root. "
    "Names are written as tools show them: a byte that is not UTF-8 as \\xHH, a backslash as "
    "\\\\.",
}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _small(files: FileOps, path: str, max_bytes: int) -> bool:
    """Whether ``path``'s ``st_size`` is at most ``max_bytes`` (the inline probe).

    Opened with ``O_PATH`` through the resolver, as the operation itself will be
    (a FIFO does not block, nothing is read). A path the resolver refuses counts
    as small: the operation, run inline, refuses it the same way at once.
    """
    try:
        fd = files.open_fd(path, os.O_PATH | os.O_CLOEXEC)
    except RingfenceError:
        return True
    try:
        return os.fstat(fd).st_size <= max_bytes
    finally:
        os.close(fd)


async def _run(
    ctx: CallContext,
    workspace: Workspace,
    seconds: float,
    fn: Callable[[FileOps, Callable[[str], None]], Any],
    inline: Callable[[FileOps], bool] | None = None,
) -> Any:
    """Run ``fn(files, on_notice)`` under a :class:`Deadline` of ``seconds``.

    ``files`` is the workspace, or under the ``unrestricted`` posture its
    host-root view. When ``inline(files)`` says the work is small it runs on
    the trio thread (a cancelled call does not start it); else in a worker
    thread (:func:`_in_worker`). Errors leave with their names escaped.
    """
    reached: list[str] = []  # places outside the roots (host-root view)
    said: list[str] = []  # what the search engine wants the session to know
    files: FileOps = workspace
    if ctx.posture is Posture.UNRESTRICTED:
        files = workspace.with_host_root(reached.append)
    deadline = Deadline(time.monotonic() + seconds, seconds, ctx.tool.name)
    try:
        if inline is not None and inline(files):
            await trio.lowlevel.checkpoint_if_cancelled()
            # The probe and the operation are two resolves: a file swapped for a huge one
            # between them held the event loop until the call's deadline. The inline try
            # gets INLINE_SECONDS; past that the (read-only) work is done again in a worker.
            quick = Deadline(
                min(deadline.at, time.monotonic() + INLINE_SECONDS), seconds, ctx.tool.name
            )
            try:
                with quick.active():
                    return fn(files, said.append)
            except ToolTimeout:
                deadline.check()  # the call's own deadline passed: that is the error
        return await _in_worker(deadline, partial(fn, files, said.append))
    except RingfenceError as exc:
        # A name in a message (from os, with surrogates) would break JSON and terminals.
        raise exc.with_(message=escape_text(exc.message)) from exc.__cause__
    finally:
        for where in dict.fromkeys(reached):  # the probe and the operation reach it alike
            ctx.emit(
                "notice",
                message=escape_text(f"unrestricted posture: {ctx.tool.name} reached {where}"),
            )
        for text in said:
            ctx.emit("notice", message=escape_text(f"{ctx.tool.name}: {text}"))


async def _in_worker(deadline: Deadline, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a worker thread under ``deadline``; no file work outlives the call.

    On cancellation the worker is told to stop (``deadline.stop``) and waited
    for (shielded) before the cancellation goes on.
    """
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()
    # "pending" until the worker starts; a call cancelled while pending marks it
    # "abandoned" and the worker, should it still start, does nothing.
    lock = threading.Lock()
    state = ["pending"]

    def work() -> Any:
        with lock:
            if state[0] == "abandoned":
                return None
            state[0] = "running"
        try:
            with deadline.active():
                return fn()
        finally:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

    try:
        return await trio.to_thread.run_sync(work, abandon_on_cancel=True)
    except trio.Cancelled:
        with lock:
            running = state[0] == "running"
            if not running:
                state[0] = "abandoned"
        if running:
            deadline.stop.set()
            with trio.CancelScope(shield=True):
                await done.wait()
        raise


def _cap(items: list[Any], limit: int, what: str, argument: str) -> list[Any]:
    """``items`` cut to ``limit``, with the marker object when cut."""
    if len(items) <= limit:
        return items
    marker = {
        "truncated": True,
        "shown": limit,
        "total": len(items),
        "message": f"{len(items) - limit} more {what} not shown; narrow the path or pattern, "
        f"or raise {argument} (at most {MAX_ENTRIES})",
    }
    return [*items[:limit], marker]


def _with_escaped_path(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "path": escape_name(result["path"])}


# What a search that leaves ``path`` out searches, as the rules judge it
# (:func:`ringfence.runtime.policy._judge.with_defaults`): a rule on ``path`` never matched a call
# without it, so ``grep_files(path=.)`` denied searching the first root only when spelled.
_SEARCH_DEFAULTS = {"path": "."}


def file_tool_specs(
    workspace: Workspace,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    checkpoints: CheckpointStore | None = None,
) -> list[ToolSpec]:
    """The ToolSpecs for ``workspace`` (see :func:`register_file_tools`)."""
    if not 0 < timeout_seconds < float("inf"):
        raise InvalidArguments(
            "timeout_seconds must be a positive number of seconds", field="timeout_seconds"
        )
    plain_run = partial(_run, workspace=workspace, seconds=timeout_seconds)

    async def run(
        ctx: CallContext,
        fn: Callable[[FileOps, Callable[[str], None]], Any],
        inline: Callable[[FileOps], bool] | None = None,
    ) -> Any:
        """The operation, its ``path`` judged as the file it resolves to (:mod:`._judged`):
        first here, where an ask can reach the approver, then at the place it is opened."""
        spelled = ctx.arguments.get("path")
        if not isinstance(spelled, str) or not ctx.judges_path("path"):
            return await plain_run(ctx, fn=fn, inline=inline)  # no rule looks at the path
        files: FileOps = workspace
        if ctx.posture is Posture.UNRESTRICTED:
            files = workspace.with_host_root(lambda _: None)
        try:
            resolved = files.final_name(unescape_path(spelled, "path"))
        except RingfenceError:
            resolved = None  # the operation reports it (and judges what it reaches)
        if resolved is not None:
            await ctx.confirm_path("path", resolved)
        with judging(partial(ctx.check_path, "path")):
            return await plain_run(ctx, fn=fn, inline=inline)

    def path_of(args: dict[str, Any], default: str | None = None) -> str:
        return unescape_path(args.get("path", default), "path")

    async def read_file(args: dict[str, Any], ctx: CallContext) -> str:
        path = path_of(args)
        offset, limit = args.get("offset", 1), args.get("limit")
        return await run(
            ctx,
            fn=lambda f, _: f.read_text(path, offset=offset, limit=limit),
            inline=lambda f: _small(f, path, READ_INLINE_MAX_BYTES),
        )

    async def list_directory(args: dict[str, Any], ctx: CallContext) -> list[dict[str, Any]]:
        path = path_of(args)
        entries = await run(
            ctx,
            fn=lambda f, _: f.list_dir(path),
            inline=lambda f: _small(f, path, LIST_INLINE_MAX_DIR_BYTES),
        )
        shown = [{**e, "name": escape_name(e["name"])} for e in entries]
        shown.sort(key=lambda e: e["name"])  # sorted as shown (escapes change the order)
        return _cap(shown, args.get("max_entries", LIST_DEFAULT_ENTRIES), "entries", "max_entries")

    async def write_file(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        path, content = path_of(args), args["content"]
        result = await recorded(
            ctx,
            checkpoints,
            lambda rec: run(ctx, fn=lambda f, _: f.write_text(path, content, record=rec)),
        )
        return _with_escaped_path(result)

    async def staged_check(unrestricted: bool, fn: Callable[[FileOps], Any]) -> None:
        """A dry run judges the write as its execution will, writing nothing (in a worker)."""
        files: FileOps = workspace.with_host_root(lambda _: None) if unrestricted else workspace
        await trio.to_thread.run_sync(lambda: fn(files))

    async def check_write_file(args: dict[str, Any], unrestricted: bool) -> None:
        path, content = path_of(args), args["content"]
        await staged_check(unrestricted, lambda f: f.check_write(path, content))

    async def check_edit_file(args: dict[str, Any], unrestricted: bool) -> None:
        path, old, new = path_of(args), args["old"], args["new"]
        await staged_check(unrestricted, lambda f: f.check_edit(path, old, new))

    async def edit_file(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        path, old, new = path_of(args), args["old"], args["new"]
        result = await recorded(
            ctx,
            checkpoints,
            lambda rec: run(ctx, fn=lambda f, _: f.edit_text(path, old, new, record=rec)),
        )
        return _with_escaped_path(result)

    async def glob_files(args: dict[str, Any], ctx: CallContext) -> list[Any]:
        pattern, path = args["pattern"], path_of(args, ".")
        # Every match is collected (the walk visits them all anyway), so the total is known.
        found = await run(ctx, fn=lambda f, _: f.glob(pattern, path, max_results=sys.maxsize))
        shown = sorted(escape_name(p) for p in found)
        return _cap(shown, args.get("max_results", 1000), "paths", "max_results")

    async def grep_files(args: dict[str, Any], ctx: CallContext) -> list[dict[str, Any]]:
        limit = args.get("max_results", 100)
        pattern, path, glob = args["pattern"], path_of(args, "."), args.get("glob")
        # One match more than shown says whether the list was cut, without searching on.
        found = await run(
            ctx,
            fn=lambda f, on_notice: f.grep(
                pattern, path, glob=glob, max_results=limit + 1, on_notice=on_notice
            ),
        )
        shown: list[dict[str, Any]] = [{**m, "path": escape_name(m["path"])} for m in found]
        shown.sort(key=lambda m: (m["path"], m["line"]))
        if len(shown) <= limit:
            return shown
        return [
            *shown[:limit],
            {
                "truncated": True,
                "shown": limit,
                "message": f"more matches than max_results={limit}; narrow the path, glob or "
                "pattern, or raise max_results (at most 10000)",
            },
        ]

    return [
        ToolSpec(
            "read_file",
            "Read a UTF-8 text file in the workspace. Returns the text of lines "
            "offset..offset+limit-1 (1-based; default: the whole file). Binary files are refused.",
            _schema(
                {
                    "path": _PATH,
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "The first line to return, counting from 1 (default 1).",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "The most lines to return (default: to the end of the file).",
                    },
                },
                ["path"],
            ),
            read_file,
            consequence=Consequence.READ,
        ),
        ToolSpec(
            "list_directory",
            "List a directory in the workspace: entries {name, type} sorted by name; "
            "type is file, directory, symlink or other. At most max_entries (default 5000); "
            "a cut list ends with {truncated: true, shown, total, message}. A name that is not "
            "UTF-8 is shown with \\xHH escapes (a backslash as \\\\) and is taken back so.",
            _schema(
                {
                    "path": {**_PATH, "description": "The directory ('.' for the first root)."},
                    "max_entries": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_ENTRIES,
                        "description": f"The most entries to return (default {LIST_DEFAULT_ENTRIES}).",
                    },
                },
                ["path"],
            ),
            list_directory,
            consequence=Consequence.READ,
        ),
        ToolSpec(
            "write_file",
            "Create or replace a file with the given UTF-8 content (missing directories are "
            "created). The file is replaced, never written into: hard links are not written "
            "through, and the old file's mode is kept. Git metadata is never written.",
            _schema(
                {
                    "path": _PATH,
                    "content": {"type": "string", "description": "The whole new content."},
                },
                ["path", "content"],
            ),
            write_file,
            stage_check=check_write_file,
            consequence=Consequence.REVERSIBLE,
        ),
        ToolSpec(
            "edit_file",
            "Replace exactly one occurrence of 'old' with 'new' in a UTF-8 text file. Fails "
            "when 'old' is missing or occurs more than once (add surrounding text).",
            _schema(
                {
                    "path": _PATH,
                    "old": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The exact text to replace.",
                    },
                    "new": {"type": "string", "description": "The replacement text."},
                },
                ["path", "old", "new"],
            ),
            edit_file,
            stage_check=check_edit_file,
            consequence=Consequence.REVERSIBLE,
        ),
        ToolSpec(
            "glob_files",
            "Find files by a relative glob pattern under 'path' (default: the first root). "
            "'*' and '?' match within a name, '**' any number of directories; a pattern ending "
            "in '/' matches directories only. Linked directories are never entered. At most "
            "max_results paths (default 1000); a cut list ends with {truncated: true, shown, "
            "total, message}.",
            _schema(
                {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "A relative pattern such as 'src/**/*.py'; no '..'.",
                    },
                    "path": {**_PATH, "description": "The directory to search in (default '.')."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_ENTRIES},
                },
                ["pattern"],
            ),
            glob_files,
            consequence=Consequence.READ,
            meta={"argument_defaults": _SEARCH_DEFAULTS},
        ),
        ToolSpec(
            "grep_files",
            "Search file contents under 'path' for a regular expression, line by line. Returns "
            "matches {path, line, text} sorted by path and line, at most max_results "
            "(default 100; a cut list ends with {truncated: true, shown, message}). 'glob' "
            "filters files ('*.py' matches file names). Binary files are skipped. The pattern "
            "is RE2 syntax (linear time): no lookaround or backreferences; \\w, \\d, \\s "
            "and \\b are ASCII.",
            _schema(
                {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "An RE2 regular expression (no lookaround or "
                        "backreferences).",
                    },
                    "path": {**_PATH, "description": "The directory to search in (default '.')."},
                    "glob": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Only files matching this glob.",
                    },
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 10000},
                },
                ["pattern"],
            ),
            grep_files,
            consequence=Consequence.READ,
            meta={"argument_defaults": _SEARCH_DEFAULTS},
        ),
    ]


def register_file_tools(
    kernel: Kernel,
    workspace: Workspace,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    checkpoints: CheckpointStore | None = None,
) -> None:
    """Register read_file, list_directory, write_file, edit_file, glob_files, grep_files.

    read_file, list_directory, glob_files and grep_files are ``read``;
    write_file and edit_file are ``reversible``. Each call ends within
    ``timeout_seconds`` (``timeout``). Raises InvalidArguments if a tool of
    the same name is already registered. With ``checkpoints``, every write and
    edit is a change set in that store (``"checkpoint"`` in its result).
    """
    for spec in file_tool_specs(
        workspace, timeout_seconds=timeout_seconds, checkpoints=checkpoints
    ):
        kernel.register(spec)
