"""Where the programs ringfence starts unconfined are looked up: never a workspace root.

A plugin's hook or server, or the operator's own unconfined MCP server, names a bare
program (``python3``, ``npx``) looked up on the operator's ``PATH``, and an activated
project venv (``.venv/bin``) or ``node_modules/.bin`` puts a workspace directory there:
the agent could plant the program the host then runs as the operator. :func:`search_path` is that ``PATH`` without its
relative entries and those in a root; :func:`in_root` tells whether a path lies in one,
as written or resolved through links.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from ..runtime._errors import Unavailable

__all__ = ["in_root", "program_outside_roots", "search_path"]


def in_root(path: str, roots: Sequence[str | os.PathLike[str]]) -> str | None:
    """The workspace root ``path`` lies in (as written or resolved), or None."""
    for spelled in {os.path.normpath(path), os.path.realpath(path)}:
        for root in roots:
            for base in {os.path.normpath(root), os.path.realpath(root)}:
                if spelled == base or spelled.startswith(base.rstrip("/") + "/"):
                    return os.fspath(root)
    return None


def search_path(path: str, roots: Sequence[str | os.PathLike[str]]) -> str:
    """``path`` (a ``PATH`` value) without its relative entries and those in a root."""
    kept = [
        e for e in path.split(os.pathsep) if e and os.path.isabs(e) and in_root(e, roots) is None
    ]
    return os.pathsep.join(kept)


def program_outside_roots(
    program: str, roots: Sequence[str | os.PathLike[str]], path: str, what: str
) -> str:
    """``program`` as it will run: a bare name looked up on :func:`search_path`, then
    checked to lie outside every root. Raises Unavailable naming it (``what``: whose)."""
    if "/" not in program:
        found = shutil.which(program, path=search_path(path, roots))
        if found is None:
            raise Unavailable(
                f"{what}'s program {program!r} is not on PATH (its entries in a workspace "
                "root left out: the agent writes there)",
                field="command",
            )
        program = found
    root = in_root(program, roots)
    if root is not None:
        raise Unavailable(
            f"{what}'s program {program} lies in the workspace root {root}, whose files the "
            "agent writes: it is not run unconfined",
            field="command",
        )
    return program
