"""A host process's Unix socket or FIFO in a writable root is out of a sandboxed command's reach.

A path socket is found by its inode, whatever the caller's network namespace, and this
kernel's Landlock and seccomp do not see a ``connect`` path: without change sets the roots
are the host's directories bind-mounted writable, so a command connected to a dev server's,
an ssh-agent's or git's fsmonitor daemon's socket lying in the workspace (or wrote into a
FIFO a host process reads). A change set's overlay shows such an entry as its own inode,
which no host process listens on. Each attack runs with a real host listener (or reader)
that records whether anything reached it: the command is refused, unrun, and nothing did.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends_helpers import DOCKER_OPTIONS

from ringfence import create_kernel
from ringfence.runtime import Posture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

_CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect(sys.argv[1]); print('CONNECTED', s.recv(64))\n"
    "except OSError as e:\n"
    "    print('refused', e)\n"
)


class _Listener:
    """A host process's Unix listener at ``path`` that counts who connected."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections = 0
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(str(path))
        os.chmod(path, 0o777)  # any uid could connect: only the sandbox stands in the way
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(b"HOST-SECRET\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sock.close()


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[_Listener]:
    ws = tmp_path / "ws"
    (ws / "run").mkdir(parents=True)
    (ws / "notes.txt").write_text("hi\n")
    own = _Listener(ws / "run" / "dev.sock")
    yield own
    own.close()


def _cli(ws: Path, events: Path, command: str, *options: str) -> subprocess.CompletedProcess[str]:
    args = json.dumps({"command": command})
    call = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args", args, "--json"]
    return subprocess.run(
        [*call, "--approve", "yes", "--posture", "allow-all", "--events", str(events), *options],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_host_socket_in_the_root_is_refused_without_change_sets(
    tmp_path: Path, listener: _Listener
) -> None:
    ws = listener.path.parents[1]
    (ws / "probe.py").write_text(_CONNECT)
    command = f"python3 probe.py {listener.path}; echo ran > ran.txt"
    done = _cli(ws, tmp_path / "events.jsonl", command, "--no-change-sets")
    assert done.returncode == 1, (done.stdout, done.stderr)
    answer = json.loads(done.stdout)
    error = answer["error"]
    assert error["code"] == "unavailable" and error["field"] == "workspace", error
    assert str(listener.path) in error["details"]["paths"], error
    assert "CONNECTED" not in done.stdout and "HOST-SECRET" not in done.stdout
    assert listener.connections == 0
    assert not (ws / "ran.txt").exists()  # the command never ran


def test_with_change_sets_the_overlay_never_reaches_the_host_socket(
    tmp_path: Path, listener: _Listener
) -> None:
    """The default: the command runs, and its connect meets the overlay's own inode."""
    ws = listener.path.parents[1]
    (ws / "probe.py").write_text(_CONNECT)
    done = _cli(ws, tmp_path / "events.jsonl", f"python3 probe.py {listener.path}")
    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout)["result"]
    assert "refused" in result["stdout"] and "CONNECTED" not in result["stdout"], result
    assert listener.connections == 0


async def test_a_socket_bound_after_the_session_started_is_refused(
    tmp_path: Path, listener: _Listener
) -> None:
    """The incremental scan before each command lists the directory the socket appeared
    in (its ctime moved): a dev server started while the agent works is refused too."""
    ws = listener.path.parents[1]
    late = ws / "late"
    late.mkdir()
    listener.close()
    listener.path.unlink()
    (ws / "probe.py").write_text(_CONNECT)
    async with create_kernel(
        roots=[ws],
        posture=Posture.UNRESTRICTED,
        backend="local",
        change_sets=False,
        events_path=tmp_path / "events.jsonl",
    ) as kernel:
        first = await kernel.invoke("run_shell", {"command": "echo first"})
        assert first.error is None and first.value["stdout"] == "first\n", first
        server = _Listener(late / "server.sock")
        try:
            second = await kernel.invoke(
                "run_shell", {"command": f"python3 probe.py {server.path}; echo ran > ran.txt"}
            )
            assert second.error is not None and second.error.code == "unavailable", second
            assert str(server.path) in second.error.details["paths"]
            assert server.connections == 0
            assert not (ws / "ran.txt").exists()
        finally:
            server.close()


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_a_host_fifo_in_the_root_gets_nothing_from_a_command(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """A FIFO a host process reads: without change sets a command wrote into it."""
    if backend == "docker":
        request.getfixturevalue("docker_client")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(ws, 0o777)
    fifo = ws / "control.fifo"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the host process reading it
    keep = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # so no EOF between writers
    try:
        async with create_kernel(
            roots=[ws],
            posture=Posture.UNRESTRICTED,
            backend=backend,
            backend_options=DOCKER_OPTIONS if backend == "docker" else None,
            change_sets=False,
            events_path=tmp_path / "events.jsonl",
        ) as kernel:
            outcome = await kernel.invoke(
                "run_shell", {"command": "echo INJECTED > control.fifo; echo ran > ran.txt"}
            )
        assert outcome.error is not None and outcome.error.code == "unavailable", outcome
        assert str(fifo) in outcome.error.details["paths"]
        assert not (ws / "ran.txt").exists()
        # With change sets the command runs, and its FIFO is the overlay's: no host reader.
        async with create_kernel(
            roots=[ws],
            posture=Posture.UNRESTRICTED,
            backend=backend,
            backend_options=DOCKER_OPTIONS if backend == "docker" else None,
            change_sets=True,
            events_path=tmp_path / "events2.jsonl",
        ) as kernel:
            layered = await kernel.invoke(
                "run_shell", {"command": "timeout 3 sh -c 'echo INJECTED > control.fifo'"}
            )
        assert layered.error is None, layered
        ready, _, _ = select.select([reader], [], [], 0.5)
        assert not ready or os.read(reader, 64) == b""
    finally:
        os.close(keep)
        os.close(reader)


async def test_git_fsmonitor_daemons_socket_in_git_metadata_is_refused(tmp_path: Path) -> None:
    """Git's own ``fsmonitor--daemon.ipc`` is a host process's listener inside ``.git``
    (mounted read-only: a read-only bind still connects)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True, capture_output=True)
    (ws / "probe.py").write_text(_CONNECT)
    daemon = _Listener(ws / ".git" / "fsmonitor--daemon.ipc")
    try:
        async with create_kernel(
            roots=[ws],
            posture=Posture.UNRESTRICTED,
            backend="local",
            change_sets=False,
            events_path=tmp_path / "events.jsonl",
        ) as kernel:
            outcome = await kernel.invoke(
                "run_shell", {"command": f"python3 probe.py {daemon.path}; echo ran > ran.txt"}
            )
        assert outcome.error is not None and outcome.error.code == "unavailable", outcome
        assert str(daemon.path) in outcome.error.details["paths"]
        assert daemon.connections == 0
        assert not (ws / "ran.txt").exists()
    finally:
        daemon.close()
