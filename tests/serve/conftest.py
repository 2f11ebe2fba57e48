"""Fixtures for the serve tests; the helpers live in serve_helpers.py (importable by name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_helpers import GIT_CONFIG, HELLO, SECRET

from ringfence import create_kernel

REAL_TOOLS = ("read_file", "write_file", "run_tool_script")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with a file to read and a .git/config; a secret sits next to it, outside."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text(HELLO)
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text(GIT_CONFIG)
    (tmp_path / "secret.txt").write_text(SECRET)
    return ws


@pytest.fixture
def events(tmp_path: Path) -> Path:
    return tmp_path / "events.jsonl"


@pytest.fixture
def real_tools(workspace: Path) -> dict[str, str]:
    """name → consequence of the native tools ``ringfence serve`` will serve here.

    Skips, naming what is missing, until ``create_kernel`` registers the real
    file tools and run_tool_script. (A sync fixture with its own trio.run: a
    skip raised from an async fixture loses its reason under pytest-trio.)
    """

    async def declared() -> dict[str, str]:
        async with create_kernel(roots=[workspace]) as kernel:
            return {s.name: s.consequence.value for s in kernel.tools() if s.source == "native"}

    tools = trio.run(declared)
    missing = [n for n in REAL_TOOLS if n not in tools]
    if missing:
        pytest.skip(f"create_kernel does not register {', '.join(missing)} on this tree yet")
    return tools
