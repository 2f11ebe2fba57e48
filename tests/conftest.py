"""Shared fixtures. Every test gets its own RINGFENCE_HOME so nothing touches ~/.ringfence."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from tiers import FOLDER_TIERS, MODULE_TIERS

from ringfence.runtime import use_places


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A run that leaves a tier out (``-m "... not servers ..."``, ``make test-fast``) does not
    import that tier's modules either: collecting them is most of a fast run's start."""
    left_out = {m.group(1) for m in re.finditer(r"\bnot (\w+)", config.option.markexpr or "")}
    if not left_out:
        return None
    rel = collection_path.relative_to(config.rootpath).as_posix()
    for folder, tier in FOLDER_TIERS.items():
        if tier in left_out and (rel + "/").startswith(folder):
            return True
    if any(tier in left_out and rel in modules for tier, modules in MODULE_TIERS.items()):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers: a test that skips without bubblewrap runs real sandboxes (``sandbox``); a test
    that needs Docker or npm is ``docker``/``npm`` already; the tables in tiers.py mark the rest
    that starts processes. ``make test-fast`` runs what is left (under a minute, two cores).

    Workers (``make test``, pytest-xdist ``--dist loadgroup``): a module's tests run on one
    worker (they share its fixtures); the bridge's modules all on one, since each test
    checks that no script runner of this checkout is left anywhere on the machine.
    """
    for item in items:
        if any(
            "bubblewrap" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")
        ):
            item.add_marker(pytest.mark.sandbox)
        module = item.nodeid.split("::", 1)[0]
        for folder, tier in FOLDER_TIERS.items():
            if module.startswith(folder):
                item.add_marker(tier)
        for tier, modules in MODULE_TIERS.items():
            if module in modules:
                item.add_marker(tier)
        group = "bridge" if module.startswith("tests/bridge/") else module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session", autouse=True)
def no_mount_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end, unmount what a test left mounted under the run's temporary directory (a
    killed session's id-mapped view, say), so pytest can delete it on a later run; a test
    that checks such leftovers does so itself."""
    yield
    base = str(tmp_path_factory.getbasetemp())
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for point in reversed(points):
        if point.startswith(base + "/"):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@pytest.fixture(autouse=True)
def ringfence_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The test's own home: the library's (``use_places``) and its CLI children's
    (``RINGFENCE_HOME``)."""
    home = tmp_path_factory.mktemp("ringfence-home")
    monkeypatch.setenv("RINGFENCE_HOME", str(home))
    with use_places(home=home):
        yield home


@pytest.fixture
def no_bwrap(tmp_path: Path) -> Iterator[Path]:
    """bubblewrap missing, for the library (``use_places(bwrap=...)`` of a path that is
    not there); set before the test's trio run starts, so its every task sees it."""
    missing = tmp_path / "no-bwrap"
    with use_places(bwrap=missing):
        yield missing


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home for the kernel: a .bashrc and an SSH key that must stay untouched."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_text("# the user's bashrc\n")
    (home / ".ssh" / "id_ed25519").write_text(f"FAKE-PRIVATE-KEY-{secrets.token_hex(8)}\n")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def under_tmp() -> Iterator[Path]:
    """A directory in ``/tmp`` itself, whatever ``TMPDIR`` says: the local sandbox's private
    ``/tmp`` hides it, as it hides a user's checkout, venv or pipx there."""
    base = Path(tempfile.mkdtemp(prefix="ringfence-under-tmp-", dir="/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


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
