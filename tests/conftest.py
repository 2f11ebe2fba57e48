"""Shared fixtures. Every test gets its own RINGFENCE_HOME so nothing touches ~/.ringfence."""

from __future__ import annotations

import pytest
import trio


@pytest.fixture(autouse=True)
def ringfence_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("ringfence-home")
    monkeypatch.setenv("RINGFENCE_HOME", str(home))
    return home


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions handed to ``trio.to_thread.run_sync`` (thread hops) in a test."""
    seen: list[str] = []
    real = trio.to_thread.run_sync

    async def spy(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(getattr(fn, "__name__", "?"))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", spy)
    return seen
