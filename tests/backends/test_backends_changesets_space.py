"""A change set's space: bounded per command, a full disk named, a failed set's space given back.

Through the CLI on the confined backend. A command that writes more than the
checkpoint store keeps (``RINGFENCE_CHECKPOINTS_MIB``) is refused whole with the
limit named; a store on a full file system (a small tmpfs the test mounts) is
``unavailable`` naming it, never a bare ``OSError`` or ``BufferError``. Either
way the workspace is as before and the store holds nothing of the set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)
from test_backends_changesets import tree_state

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    return root


def used_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def call(capsys: pytest.CaptureFixture[str], ws: Path, command: str) -> tuple[int, dict]:
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    return cli_json(capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args)


def test_a_set_larger_than_the_store_keeps_is_refused_whole(
    ws: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_MIB", "1")
    before = tree_state(ws)
    # Many small files (packed) and one large one (a blob of its own): both counted.
    code, out = call(
        capsys,
        ws,
        "for i in $(seq 1 300); do head -c 4096 /dev/urandom > small$i; done; "
        "head -c 2000000 /dev/urandom > big",
    )
    assert code != 0 and out["error"]["code"] == "unavailable", out
    message = out["error"]["message"]
    assert "1 MiB" in message and "RINGFENCE_CHECKPOINTS_MIB" in message
    assert "refused whole" in message
    assert tree_state(ws) == before
    code, listed = cli_json(capsys, "checkpoints", "list", "--workspace", str(ws))
    assert code == 0 and listed["result"] == []
    assert used_bytes(ringfence_home / "checkpoints") < 64 * 1024  # nothing of it kept
    # Within the limit the same kind of command merges.
    code, out = call(capsys, ws, "head -c 100000 /dev/urandom > fits")
    assert code == 0, out
    assert (ws / "fits").stat().st_size == 100000


@pytest.fixture
def small_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """RINGFENCE_HOME on a 4 MiB tmpfs of the test's own (root only); layers elsewhere."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "small"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point)], check=True)
    layers = tmp_path / "layers"
    layers.mkdir()
    monkeypatch.setenv("RINGFENCE_HOME", str(point))
    monkeypatch.setenv("RINGFENCE_LAYERS_DIR", str(layers))
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.parametrize("shape", ["one large file", "many small files"])
def test_a_full_store_is_named_and_its_space_given_back(
    ws: Path, small_home: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    command = {
        "one large file": "head -c 8000000 /dev/urandom > big",
        "many small files": "for i in $(seq 1 600); do head -c 12000 /dev/urandom > f$i; done",
    }[shape]
    assert call(capsys, ws, "echo warm > warm.txt")[0] == 0  # the store exists
    free_before = shutil.disk_usage(small_home).free
    before = tree_state(ws)
    code, out = call(capsys, ws, command)
    assert code != 0 and out["error"]["code"] == "unavailable", out
    message = out["error"]["message"]
    assert "is full" in message and str(small_home) in message
    assert "BufferError" not in message and "Errno" not in message
    assert tree_state(ws) == before
    # What the failed set wrote into the store is gone again.
    assert shutil.disk_usage(small_home).free >= free_before - 64 * 1024


def test_a_killed_session_s_layers_are_removed_by_the_next_session(
    ws: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    """Its overlay directories (outside the spool: RINGFENCE_LAYERS_DIR) hold what its last
    command wrote; the next session's start removes them, and never a live session's."""
    import signal
    import sys
    import time

    layers = tmp_path / "layers"
    layers.mkdir()
    env = {**os.environ, "RINGFENCE_HOME": str(ringfence_home), "RINGFENCE_LAYERS_DIR": str(layers)}
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--workspace", str(ws)]
    argv += ["--posture", "allow-reversible", "--approve", "no", "--args"]
    killed = subprocess.Popen(
        [*argv, json.dumps({"command": "head -c 100000 /dev/zero > big; sleep 60"})],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not list(layers.glob("ringfence-layers-*/0/upper/big")) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = list(layers.glob("ringfence-layers-*"))
    assert len(left) == 1 and (left[0] / ".alive").exists()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    live = subprocess.Popen(
        [*argv, json.dumps({"command": "sleep 60"})],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The live session's own layers (its start may already have removed the dead one's).
        deadline = time.monotonic() + 120  # its own wait: a loaded machine starts it slowly
        while time.monotonic() < deadline and not [
            p for p in layers.glob("ringfence-layers-*") if p != left[0]
        ]:
            time.sleep(0.05)
        assert [p for p in layers.glob("ringfence-layers-*") if p != left[0]], "never started"
        # A third session starts while the second lives: the dead one's go, the live one's stay.
        out = subprocess.run([*argv, json.dumps({"command": "true"})], env=env, capture_output=True)
        assert out.returncode == 0, out.stderr
        now = list(layers.glob("ringfence-layers-*"))
        assert left[0] not in now and len(now) == 1
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()
