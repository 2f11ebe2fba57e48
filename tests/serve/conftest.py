"""Fixtures for the serve tests; the helpers live in serve_helpers.py (importable by name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_helpers import GIT_CONFIG, HELLO, SECRET


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
