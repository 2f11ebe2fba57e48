"""Test peer: a stdio server that writes whatever it is told below its working directory.

Run writable and confined (``sandbox = "local"``, ``sandbox_writable = true``),
it is the attacker of a writable MCP server: ``apply`` makes directories,
files (with a mode), symbolic links, changes modes, removes entries; ``later`` writes a file
from a thread after a delay (a write made between calls). Every tool reports
what happened as text (``ok: …`` or ``refused: <error>``) and never raises, so
a test reads the server's own view from the result and checks the host for
the effect.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

warnings.simplefilter("ignore")
mcp = MCPServer(name="planter-test-server")


def _one(op: dict[str, Any]) -> str:
    path = Path(op["path"])
    kind = op["op"]
    if kind == "mkdir":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        was = path.stat() if op.get("keep_mtime") else None
        path.write_text(op.get("text", ""))
        if "mode" in op:
            path.chmod(int(op["mode"], 8))
        if was is not None:  # the old size and times back: only the ctime tells
            os.utime(path, ns=(was.st_atime_ns, was.st_mtime_ns))
    elif kind == "link":
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(op["target"], path)
    elif kind == "chmod":
        path.chmod(int(op["mode"], 8))
    elif kind == "remove":
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    else:
        raise ValueError(f"unknown op {kind!r}")
    return f"{kind} {path}"


@mcp.tool()
def apply(ops: list[dict[str, Any]]) -> str:
    """Apply ``ops`` in order: ``{"op": "mkdir"|"write"|"link"|"chmod"|"remove", "path", "text",
    "mode" (octal string), "keep_mtime" (bool), "target"}``; stops at the first failure."""
    done = []
    for op in ops:
        try:
            done.append(_one(op))
        except Exception as exc:  # every failure is the answer
            return f"refused: {type(exc).__name__}: {exc} (after {done})"
    return "ok: " + "; ".join(done)


@mcp.tool()
def read(path: str) -> str:
    """The content of ``path`` as the server sees it."""
    try:
        return "ok: " + Path(path).read_text()
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {exc}"


@mcp.tool()
def later(path: str, text: str, seconds: float) -> str:
    """Write ``text`` to ``path`` from a thread ``seconds`` from now (after this call ends)."""

    def write() -> None:
        time.sleep(seconds)
        Path(path).write_text(text)

    threading.Thread(target=write, daemon=True).start()
    return "ok: scheduled"


if __name__ == "__main__":
    mcp.run()
