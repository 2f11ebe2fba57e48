"""The six native file tools, as ToolSpecs over a :class:`Workspace`.

Each executor reads ``ctx.posture``: ``unrestricted`` lifts the root
restriction for that call only (so switching the session back restores it);
git metadata stays refused in every posture. File work runs in a worker
thread; notices about paths outside the roots are emitted afterwards, from
the trio side.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from ..runtime import CallContext, Consequence, Kernel, Posture, ToolSpec
from ._workspace import Workspace

__all__ = ["file_tool_specs", "register_file_tools"]

_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "A file path: relative to the first workspace root, or absolute inside a root.",
}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


async def _run(ctx: CallContext, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    notices: list[str] = []
    unrestricted = ctx.posture is Posture.UNRESTRICTED
    try:
        return await trio.to_thread.run_sync(
            partial(fn, *args, unrestricted=unrestricted, notices=notices, **kwargs)
        )
    finally:
        for where in notices:
            ctx.emit("notice", message=f"unrestricted posture: {ctx.tool.name} reached {where}")


def file_tool_specs(workspace: Workspace) -> list[ToolSpec]:
    """The ToolSpecs for ``workspace`` (see :func:`register_file_tools`)."""

    async def read_file(args: dict[str, Any], ctx: CallContext) -> str:
        return await _run(
            ctx,
            workspace.read_text,
            args["path"],
            offset=args.get("offset", 1),
            limit=args.get("limit"),
        )

    async def list_directory(args: dict[str, Any], ctx: CallContext) -> list[dict[str, str]]:
        return await _run(ctx, workspace.list_dir, args["path"])

    async def write_file(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        return await _run(ctx, workspace.write_text, args["path"], args["content"])

    async def edit_file(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        return await _run(ctx, workspace.edit_text, args["path"], args["old"], args["new"])

    async def glob_files(args: dict[str, Any], ctx: CallContext) -> list[str]:
        return await _run(
            ctx,
            workspace.glob,
            args["pattern"],
            args.get("path", "."),
            max_results=args.get("max_results", 1000),
        )

    async def grep_files(args: dict[str, Any], ctx: CallContext) -> list[dict[str, Any]]:
        return await _run(
            ctx,
            workspace.grep,
            args["pattern"],
            args.get("path", "."),
            glob=args.get("glob"),
            max_results=args.get("max_results", 100),
        )

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
            "type is file, directory, symlink or other.",
            _schema(
                {"path": {**_PATH, "description": "The directory ('.' for the first root)."}},
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
            consequence=Consequence.REVERSIBLE,
        ),
        ToolSpec(
            "glob_files",
            "Find files by a relative glob pattern under 'path' (default: the first root). "
            "'*' and '?' match within a name, '**' any number of directories; a pattern ending "
            "in '/' matches directories only. Linked directories are never entered.",
            _schema(
                {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "A relative pattern such as 'src/**/*.py'; no '..'.",
                    },
                    "path": {**_PATH, "description": "The directory to search in (default '.')."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 100000},
                },
                ["pattern"],
            ),
            glob_files,
            consequence=Consequence.READ,
        ),
        ToolSpec(
            "grep_files",
            "Search file contents under 'path' for a regular expression, line by line. Returns "
            "matches {path, line, text} sorted by path and line, at most max_results "
            "(default 100). 'glob' filters files ('*.py' matches file names). Binary files "
            "are skipped.",
            _schema(
                {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "A regular expression (no lookaround or backreferences).",
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
        ),
    ]


def register_file_tools(kernel: Kernel, workspace: Workspace) -> None:
    """Register read_file, list_directory, write_file, edit_file, glob_files, grep_files.

    read_file, list_directory, glob_files and grep_files are ``read``;
    write_file and edit_file are ``reversible``. Raises InvalidArguments if a
    tool of the same name is already registered.
    """
    for spec in file_tool_specs(workspace):
        kernel.register(spec)
