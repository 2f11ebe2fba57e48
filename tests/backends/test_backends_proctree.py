"""The local backend's process tree: what a command starts cannot outlive it, however it hides.

Real processes, through the backend session API. Each attack leaves processes
whose argv carries a unique tag; the tests look for the tag with psutil and a
fixture kills any survivor, so a failing run does not leave work on the machine.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ringfence import _proc
from ringfence.backends import SessionSpec
from ringfence.backends._doctor import _process_tracking
from ringfence.backends._host import start_host as start_local

GRACE = 0.2


def _alive(tag: str) -> list[str]:
    """Processes (not zombies: those run nothing) whose argv carries ``tag``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if tag in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.pid}: {cmdline}")
    return found


def _settled(tag: str, limit: float = 1.0) -> list[str]:
    """Survivors once SIGKILLed processes had ``limit`` to finish exiting."""
    deadline = time.monotonic() + limit
    while (left := _alive(tag)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


@pytest.fixture
def tag() -> Iterator[str]:
    tag = f"rf-tree-{secrets.token_hex(4)}"
    yield tag
    for proc in psutil.process_iter(["cmdline"]):  # clean up after a failure
        if tag in " ".join(proc.info["cmdline"] or []):
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture(params=["cgroup", "run-id"])
def method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test under cgroup tracking (skipped where not writable) and the run-id fallback."""
    found = _proc.tracking()
    if request.param == "cgroup":
        if found.method != "cgroup":
            assert found.method == "run-id" and found.detail  # the fallback says why
            pytest.skip(f"cgroup v2 not writable here: {found.detail}")
    else:
        monkeypatch.setattr(_proc, "_tracking", _proc.Tracking("run-id", "forced by the test"))
    return request.param


@pytest.fixture(params=["cgroup.kill", "freeze"])
def cgroup_kill(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Cgroup tracking, killed by ``cgroup.kill`` and by the pre-5.14 freeze-and-kill path."""
    _cgroup_only()
    found = _proc.tracking()
    forced = _proc.Tracking("cgroup", found.detail, found.base, request.param)
    monkeypatch.setattr(_proc, "_tracking", forced)
    return str(request.param)


def _cgroup_only() -> None:
    found = _proc.tracking()
    if found.method != "cgroup":
        assert found.method == "run-id" and found.detail
        assert _process_tracking().ok is False and found.detail in _process_tracking().detail
        pytest.skip(f"cgroup v2 not writable here: {found.detail}")


async def test_a_daemon_with_closed_descriptors_dies_with_the_command(
    tmp_path: Path, tag: str, method: str
) -> None:
    session = await start_local(SessionSpec(roots=(tmp_path,), kill_grace=GRACE))
    assert session.process_tracking["method"] == method
    daemon = (
        f"setsid bash -c 'exec 0<&- 1>&- 2>&-; exec -a {tag} sleep 300' & sleep 0.2; echo started"
    )
    r = await session.run(["bash", "-c", daemon], cwd=tmp_path, env={}, timeout=10, output_cap=100)
    assert r.exit_code == 0 and not r.timed_out and r.stdout == "started\n", r
    assert _settled(tag) == []


async def test_an_escape_that_scrubs_the_run_id_is_killed_at_the_timeout(
    tmp_path: Path, tag: str, cgroup_kill: str
) -> None:
    session = await start_local(SessionSpec(roots=(tmp_path,), kill_grace=GRACE))
    escape = (
        f"setsid -f env -u RINGFENCE_RUN_ID bash -c 'exec -a {tag}-a sleep 300'; "
        f"setsid -f env -u RINGFENCE_RUN_ID bash -c 'exec 0<&- 1>&- 2>&-; exec -a {tag}-b sleep 300'; "
        "sleep 300"
    )
    started = time.monotonic()
    r = await session.run(["bash", "-c", escape], cwd=tmp_path, env={}, timeout=0.5, output_cap=100)
    assert r.timed_out and r.status == "timeout", r
    # The kill did not wait on a pipe holder (300 s); generous for a loaded machine.
    assert time.monotonic() - started < 0.5 + GRACE + 15
    assert _settled(tag) == []


async def test_a_fork_bomb_that_escapes_is_bounded_by_the_timeout(
    tmp_path: Path, tag: str, cgroup_kill: str
) -> None:
    session = await start_local(SessionSpec(roots=(tmp_path,), kill_grace=GRACE))
    # Each process starts two escaping copies (new session, no run id), up to a depth
    # that keeps a failing run humane (63 processes), then forks short-lived children
    # without pause, so the tree is forking at the very moment it is killed.
    bomb = tmp_path / "bomb.sh"
    bomb.write_text(
        'd=$2; if [ "$d" -lt 5 ]; then\n'
        '  for i in 1 2; do setsid -f env -u RINGFENCE_RUN_ID bash "$0" "$1" $((d+1)); done\n'
        "fi\n"
        "trap '' TERM\n"
        'while :; do (exec -a "$1" sleep 0.02); done\n'
    )
    r = await session.run(
        ["bash", str(bomb), tag, "0"], cwd=tmp_path, env={}, timeout=1.0, output_cap=1000
    )
    assert r.timed_out, r
    assert _settled(tag) == []


async def test_the_fallback_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forced = _proc.Tracking("run-id", "cgroup2 is not usable: forced by the test")
    monkeypatch.setattr(_proc, "_tracking", forced)
    session = await start_local(SessionSpec(roots=(tmp_path,)))
    assert session.process_tracking == {"method": "run-id", "detail": forced.detail}
    check = _process_tracking()
    assert not check.ok and forced.detail in check.detail and check.fix
    assert check.backends == ()  # a weaker local backend, still a working one


async def test_cgroup_tracking_is_reported_and_leaves_no_cgroup(tmp_path: Path) -> None:
    _cgroup_only()
    found = _proc.tracking()
    assert _process_tracking().ok and found.base is not None
    assert "cgroup" in _process_tracking().detail
    session = await start_local(SessionSpec(roots=(tmp_path,)))
    for argv in (["true"], ["/no/such/binary"], ["sh", "-c", "sleep 300 & exit 3"]):
        await session.run(argv, cwd=tmp_path, env={}, timeout=5, output_cap=100)
    assert [p.name for p in Path(found.base).iterdir() if p.is_dir()] == []


async def test_a_ringfence_run_as_a_command_keeps_its_commands_inside_it(tmp_path: Path) -> None:
    _cgroup_only()
    found = _proc.tracking()
    assert found.base is not None
    session = await start_local(SessionSpec(roots=(tmp_path,)))
    inner = "from ringfence import _proc; print(_proc.tracking().base)"
    r = await session.run(
        [sys.executable, "-c", inner], cwd=tmp_path, env={}, timeout=30, output_cap=1000
    )
    # Nested: killing the outer command's cgroup kills the inner kernel's commands too.
    assert r.stdout.startswith(found.base + "/cmd-"), r
    assert [p.name for p in Path(found.base).iterdir() if p.is_dir()] == []


def test_what_a_crashed_kernel_left_in_its_cgroups_is_killed_by_the_next(
    tmp_path: Path, tag: str
) -> None:
    _cgroup_only()
    found = _proc.tracking()
    assert found.base is not None
    # A kernel process that is gone (no such pid) left a command's cgroup with a live process.
    stale = Path(found.base).parent / "999999999-dead" / "cmd-0"
    stale.mkdir(parents=True)
    orphan = psutil.Popen(["bash", "-c", f"exec -a {tag} sleep 300"], start_new_session=True)
    (stale / "cgroup.procs").write_text(str(orphan.pid))
    probed = _proc._probe()  # what the next ringfence process does first
    try:
        assert probed.method == "cgroup"
        assert orphan.wait(timeout=5) == -9 and not stale.parent.exists()
    finally:
        Path(probed.base or "/nonexistent").rmdir()
