"""Places: where ringfence keeps its files and finds bubblewrap, passed, never read from the
environment by the library (the command line reads RINGFENCE_HOME/BWRAP/LAYERS_DIR once).

The differential: the same environment variable that the command line obeys has no effect on
an embedded kernel, and the same value passed with ``use_places`` does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from ringfence import Places, Posture, create_kernel, use_places
from ringfence.cli._main import main
from ringfence.runtime._files import current_places, ringfence_home

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def test_use_places_nests_keeps_what_it_does_not_name_and_restores(tmp_path: Path) -> None:
    outer = current_places()
    with use_places(home=tmp_path / "a") as a:
        assert ringfence_home() == tmp_path / "a" and a.bwrap == outer.bwrap
        with use_places(bwrap="/opt/bwrap") as b:
            assert b == Places(home=tmp_path / "a", bwrap="/opt/bwrap", layers_dir=outer.layers_dir)
        assert current_places() == a
    assert current_places() == outer


async def test_places_reach_the_tasks_started_inside_the_block(tmp_path: Path) -> None:
    seen: list[Path] = []

    async def child() -> None:
        await trio.sleep(0)
        seen.append(ringfence_home())

    with use_places(home=tmp_path / "task-home"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        seen.append(await trio.to_thread.run_sync(ringfence_home))
    assert seen == [tmp_path / "task-home"] * 2


def test_an_embedded_kernel_keeps_its_files_where_it_was_told_not_where_the_env_says(
    tmp_path: Path, ringfence_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RINGFENCE_HOME in the environment is the command line's: a library kernel's change set
    goes to its places' home, and nothing appears in the directory the variable names."""
    elsewhere = tmp_path / "env-home"
    monkeypatch.setenv("RINGFENCE_HOME", str(elsewhere))
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def write() -> None:
        async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as kernel:
            await kernel.call("write_file", {"path": "a.txt", "content": "x\n"})

    trio.run(write)
    assert (workspace / "a.txt").read_text() == "x\n"
    assert not elsewhere.exists()
    assert list((ringfence_home / "checkpoints").iterdir())  # the change set, in the places' home
    # The command line obeys the variable: the same write from `ringfence call` lands there.
    code = main(["call", "write_file", "--args", json.dumps({"path": "b.txt", "content": "y\n"}),
                 "--workspace", str(workspace), "--posture", "allow-reversible"])  # fmt: skip
    assert code == 0 and list((elsewhere / "checkpoints").iterdir())


@needs_bwrap
async def test_a_bubblewrap_named_by_the_environment_never_runs_an_embedded_kernels_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in bubblewrap that would run commands unconfined (it records that it ran): set in
    RINGFENCE_BWRAP it is ignored by the library; passed with use_places it is what runs."""
    marker = tmp_path / "fake-bwrap-ran"
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    fake.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("RINGFENCE_BWRAP", str(fake))
    options = {"posture": Posture.ALLOW_REVERSIBLE}  # run_shell with change sets: reversible
    async with create_kernel(roots=[workspace], **options) as kernel:
        result = await kernel.call("run_shell", {"command": "echo confined > out.txt"})
    assert result["exit_code"] == 0 and (workspace / "out.txt").read_text() == "confined\n"
    assert not marker.exists()
    with use_places(bwrap=fake):
        async with create_kernel(roots=[workspace], **options) as kernel:
            outcome = await kernel.invoke("run_shell", {"command": "echo again > again.txt"})
    assert marker.exists()  # the passed bubblewrap is the one started
    assert outcome.error is not None and outcome.error.code == "unavailable"
    assert not (workspace / "again.txt").exists()
