"""Fixtures for the workspace tests: a real tree with roots, a sibling and an outside."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from workspace_helpers import RESOLVER_MODES, SECRET, Tree

from ringfence.workspace import Workspace


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    base = tmp_path.resolve()
    t = Tree(
        base,
        base / "ws",
        base / "ws2",
        base / "ws_sensitive_credentials",
        base / "outside",
    )
    for d in (t.ws, t.ws2, t.sibling, t.outside):
        d.mkdir()
    (t.ws / "hello.txt").write_text("hello\n")
    (t.ws / "sub").mkdir()
    (t.ws / "sub" / "inner.txt").write_text("inner\n")
    (t.ws2 / "two.txt").write_text("two\n")
    (t.sibling / "secret").write_bytes(SECRET)
    (t.outside / "secret").write_bytes(SECRET)
    return t


@pytest.fixture(params=RESOLVER_MODES)
def ws(request: pytest.FixtureRequest, tree: Tree) -> Iterator[Workspace]:
    """A Workspace over ws and ws2, once with the openat2 fast path and once walking only."""
    w = Workspace(tree.roots())
    w.use_openat2 = request.param == "openat2"
    yield w
    w.close()
