"""Shared fixtures. Every test gets its own RINGFENCE_HOME so nothing touches ~/.ringfence."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def ringfence_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("ringfence-home")
    monkeypatch.setenv("RINGFENCE_HOME", str(home))
    return home
