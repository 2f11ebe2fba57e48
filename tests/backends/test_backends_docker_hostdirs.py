"""The docker backend's host directories outside the roots: the script bridge's and a pool's.

Each test mounts the attack through the public interface (a kernel in a subprocess, as the
user who would run it) and checks refusal and no effect: nothing of the command on the host
outside the roots, no directory left behind by a kernel that was never entered or was killed.
"""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends_helpers import WORKSPACE_UID

import ringfence

pytestmark = pytest.mark.docker

_SOURCE = str(Path(ringfence.__file__).resolve().parents[1])


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A private temporary directory (TMPDIR, RINGFENCE_HOME, the workspace) of the
    workspace user, removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="rf-hostdirs-"))
    os.chown(top, WORKSPACE_UID, WORKSPACE_UID)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _as_user(top: Path, script: str, **kw: object) -> subprocess.Popen[str]:
    """``script`` in this interpreter, as the workspace user in the docker group."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a kernel as another user")
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        pytest.skip("no docker group: a non-root user cannot reach the daemon")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": _SOURCE,
        "TMPDIR": str(top),
        "HOME": str(top),
        "RINGFENCE_HOME": str(top / "home"),
    }
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv to start a kernel as another user")
    return subprocess.Popen(
        [
            setpriv,
            f"--reuid={WORKSPACE_UID}",
            f"--regid={WORKSPACE_UID}",
            f"--groups={docker_gid}",
            sys.executable,
            "-c",
            script,
            str(top / "ws"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,  # type: ignore[arg-type]
    )


_WRITE_THE_BRIDGE = """
import json, sys, trio
from pathlib import Path
from ringfence import create_kernel
from ringfence.runtime import Posture
ws = Path(sys.argv[1]); ws.mkdir()
async def main():
    async with create_kernel(
        roots=[ws], posture=Posture.ALLOW_REVERSIBLE, backend="docker",
        backend_options={"image": "busybox", "memory": "96m", "pids": 64}, change_sets=True,
    ) as k:
        r = await k.invoke("run_shell", {"command":
            "echo EVIL > /run/ringfence-bridge/evil; mkdir /run/ringfence-bridge/d; "
            "ln -s / /run/ringfence-bridge/root; ls -a /run/ringfence-bridge"})
        print("RESULT", json.dumps(r.value if r.ok else r.error.message))
        print("BRIDGES", json.dumps([sorted(p.name for p in d.rglob("*"))
              for d in Path(sys.argv[1]).parent.glob("ringfence-bridges-*")]))
trio.run(main)
"""


def test_a_command_writes_nothing_into_the_hosts_bridge_directory(
    docker_client: object, user_dir: Path
) -> None:
    """ringfence not running as root: change sets make the container user ringfence's own
    uid, which owns the host's bridge directory (``$TMPDIR/ringfence-bridges-*``). Before,
    that directory was mounted writable at ``/run/ringfence-bridge``, so a command wrote
    files, directories and links on the host outside the roots, with no change set (the
    result said ``changes: null``), kept until the kernel closed. Now the mount is
    read-only: the writes fail, the host directory and the workspace stay empty."""
    proc = _as_user(user_dir, _WRITE_THE_BRIDGE)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    result = next(line for line in out.splitlines() if line.startswith("RESULT "))
    bridges = next(line for line in out.splitlines() if line.startswith("BRIDGES "))
    assert "Read-only file system" in result, result
    assert bridges == "BRIDGES [[]]", out  # the kernel's one bridge directory, nothing in it
    assert os.listdir(user_dir / "ws") == []
