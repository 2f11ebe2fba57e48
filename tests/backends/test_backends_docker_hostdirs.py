"""The docker backend's host directories outside the roots: the script bridge's and a pool's.

Each test mounts the attack through the public interface (a kernel in a subprocess, as the
user who would run it) and checks refusal and no effect: nothing of the command on the host
outside the roots, no directory left behind by a kernel that was never entered or was killed.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backends_helpers import DOCKER_OPTIONS, WORKSPACE_UID

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
        tops = Path(sys.argv[1]).parent.glob("ringfence-bridges-*")
        mounted = [d / "s" if (d / "s").is_dir() else d for d in tops]  # s: since the lock
        print("BRIDGES", json.dumps([sorted(p.name for p in d.rglob("*")) for d in mounted]))
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


# A kernel that starts its session, says so, and waits to be killed.
_LIVE_KERNEL = """
import sys, time, trio
from pathlib import Path
from ringfence import create_kernel
from ringfence.runtime import Posture
ws = Path(sys.argv[1]); ws.mkdir(exist_ok=True)
async def main():
    async with create_kernel(
        roots=[ws], posture=Posture.ALLOW_REVERSIBLE, backend="docker",
        backend_options={"image": "busybox", "memory": "96m", "pids": 64}, change_sets=True,
    ) as k:
        await k.call("run_shell", {"command": "true"})
        print("READY", flush=True)
        await trio.sleep(300)
trio.run(main)
"""

# A kernel made and never entered; the bridge directories it sees, then (after it is
# dropped) the ones left.
_NEVER_ENTERED = """
import gc, json, os, sys, tempfile
from pathlib import Path
from ringfence import create_kernel
ws = Path(sys.argv[1]); ws.mkdir(exist_ok=True)
def bridges():
    return sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith("ringfence-bridges-"))
k = create_kernel(roots=[ws], backend="docker", backend_options={"image": "busybox"})
print("MADE", json.dumps(bridges()))
child = os.fork()
if child == 0:  # a forked child that exits normally runs the exit handlers it inherited
    sys.exit(0)
os.waitpid(child, 0)
print("FORKED", json.dumps(bridges()))
del k
gc.collect()
print("DROPPED", json.dumps(bridges()))
"""


def _bridges(top: Path) -> set[str]:
    return {p.name for p in top.glob("ringfence-bridges-*")}


def _run(top: Path, script: str) -> dict[str, list[str]]:
    """Run ``script`` (as this user) with ``top`` as its TMPDIR; its tagged JSON lines."""
    env = {**os.environ, "PYTHONPATH": _SOURCE, "TMPDIR": str(top)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(top / "ws")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in done.stdout.splitlines()
        if " " in line
    }


def test_a_never_entered_kernel_leaves_no_bridge_directory(user_dir: Path) -> None:
    """``create_kernel(backend="docker")`` makes the script bridge's directory at once.
    Before, a kernel never entered (an error between making and entering it, a caller that
    only inspects it) closed nothing, and its directory stayed in the temporary directory for
    good, one per kernel. Now it goes when the kernel is dropped (or at the process's exit;
    not at a forked child's, whose parent still uses it)."""
    seen = _run(user_dir, _NEVER_ENTERED)
    assert len(seen["MADE"]) == 1, seen
    assert seen["FORKED"] == seen["MADE"], seen  # a forked child's exit leaves it
    assert seen["DROPPED"] == [], seen
    assert _bridges(user_dir) == set()


def test_a_killed_kernels_bridge_directory_goes_at_the_next_docker_kernel(
    docker_client: object, user_dir: Path
) -> None:
    """A SIGKILLed kernel closes nothing. Before, its bridge directory stayed for good (the
    container and change-set directories were reaped, this one never). Now the next docker
    kernel of the same user removes it (its owner's lock is free), and leaves a live
    kernel's alone."""
    env = {**os.environ, "PYTHONPATH": _SOURCE, "TMPDIR": str(user_dir)}
    live = subprocess.Popen(
        [sys.executable, "-c", _LIVE_KERNEL, str(user_dir / "ws")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert live.stdout is not None
        line = live.stdout.readline()
        assert line.startswith("READY"), line + live.stdout.read()
        (live_dir,) = _bridges(user_dir)
        # A second kernel while the first lives: the first's directory is kept.
        _run(user_dir, _NEVER_ENTERED)
        assert _bridges(user_dir) == {live_dir}
        os.kill(live.pid, signal.SIGKILL)
        live.wait(timeout=30)
        assert _bridges(user_dir) == {live_dir}  # the killed kernel removed nothing
        seen = _run(user_dir, _NEVER_ENTERED)
        assert live_dir not in seen["MADE"], seen
        assert _bridges(user_dir) == set()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(live.pid, signal.SIGKILL)
        live.wait(timeout=30)
        if live.stdout is not None:
            live.stdout.close()


async def test_a_container_naming_a_live_session_does_not_take_its_directories(
    docker_client: Any, workspace: Path, ringfence_home: Path
) -> None:
    """A session's start removes containers whose owner on this host is gone, with their
    change-set directories, by the container's labels. Labels are the engine's word: anyone
    who may create containers there (a shared engine's other tenant) can label one with this
    host, a dead pid, this host's pid space and a live session's id. Before, the next session
    then removed that live session's uppers under it, and its command's writes were lost.
    Now a session's directories go only when the owner they name is gone."""
    from ringfence.backends import SessionSpec
    from ringfence.backends.docker._session import OWNER_SPACE_LABEL, owner_space, start_docker

    dead = subprocess.Popen(["true"])
    dead.wait()
    other = workspace.parent / "other"
    other.mkdir()
    live = await start_docker(
        SessionSpec(roots=(workspace,), options=DOCKER_OPTIONS, change_sets=True)
    )
    fake = None
    try:
        await live.run("echo one > one.txt", cwd=workspace, env={}, timeout=20, output_cap=4096)
        top = ringfence_home / "docker-uppers" / live.session_id
        assert top.is_dir()
        fake = docker_client.containers.create(
            "ringfence/busybox:latest",
            ["true"],
            labels={
                "ringfence": "1",
                "ringfence.session": live.session_id,
                "ringfence.owner": f"{socket.gethostname()}:{dead.pid}",
                OWNER_SPACE_LABEL: owner_space(),
            },
        )
        second = await start_docker(
            SessionSpec(roots=(other,), options=DOCKER_OPTIONS, change_sets=True)
        )
        await second.aclose()
        assert (top / "c").is_dir(), "a live session's uppers were removed"
        result = await live.run(
            "echo two > two.txt", cwd=workspace, env={}, timeout=20, output_cap=4096
        )
        assert (result.uppers[0].path / "two.txt").read_text() == "two\n"
    finally:
        await live.aclose()
        if fake is not None:
            with contextlib.suppress(Exception):
                fake.remove(force=True)
