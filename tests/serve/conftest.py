"""Fixtures for the serve tests; the helpers live in serve_helpers.py (importable by name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_helpers import GIT_CONFIG, HELLO, SECRET

from ringfence import create_kernel


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_tools(*names): skip unless create_kernel registers these tools"
    )


@pytest.fixture
def real_tools(request: pytest.FixtureRequest, workspace: Path) -> dict[str, str]:
    """name → consequence of the native tools ``ringfence serve`` will serve for ``workspace``.

    Skips, naming what is missing, when the test's ``needs_tools`` marker names
    a tool ``create_kernel`` does not register on this tree. (Sync, with its own
    trio.run: a skip raised inside a trio test or fixture loses its reason.)
    """

    async def declared() -> dict[str, str]:
        async with create_kernel(roots=[workspace]) as kernel:
            return {s.name: s.consequence.value for s in kernel.tools() if s.source == "native"}

    tools = trio.run(declared)
    marker = request.node.get_closest_marker("needs_tools")
    missing = [n for n in (marker.args if marker else ()) if n not in tools]
    if missing:
        pytest.skip(f"create_kernel does not register {', '.join(missing)} on this tree yet")
    return tools
