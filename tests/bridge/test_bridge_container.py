"""The runner inside a container, over a mounted Unix socket: the design the Docker backend uses.

This is not the Docker backend's integration (that launcher belongs to the
session's container); it starts a throwaway container per run with ``docker
run`` to prove the runner, the Unix transport, the secret on stdin and every
sandbox layer work there. It needs a local image with ``python3`` (default
``ringfence/debian``; ``RINGFENCE_SCRIPT_IMAGE`` to choose) and skips without one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bridge_helpers import Ledger, kinds, register_tools, run
from kernel_helpers import kill_host_once_sandboxed

from ringfence import _confine
from ringfence._confine.boot import argv as boot_argv
from ringfence.bridge._channel import BridgeListener
from ringfence.bridge._docker import PACKAGE_MOUNT
from ringfence.bridge._launch import RUNNER_MODULE, RUNNER_PATH, LocalLauncher
from ringfence.runtime import Kernel, Posture

IMAGE = os.environ.get("RINGFENCE_SCRIPT_IMAGE", "ringfence/debian")
MOUNT = "/run/ringfence-bridge"

pytestmark = pytest.mark.docker


def _image_has_python() -> str | None:
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    probe = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", IMAGE, "python3", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (
        None
        if probe.returncode == 0
        else f"no {IMAGE} image with python3: {probe.stderr.strip()[:200]}"
    )


@pytest.fixture(scope="module")
def container_python():
    why = _image_has_python()
    if why:
        pytest.skip(why)


class DockerRunLauncher(LocalLauncher):
    """One container per run; the listener's private directory is mounted into it."""

    name = "docker-run"
    transport = "unix"
    peer_is_child = False  # the peer is a process in the container, not the docker client

    def __init__(self) -> None:
        super().__init__(track_parent=False, secret_on_stdin=True)
        self.listener: BridgeListener | None = None

    def connect_address(self, listener: BridgeListener) -> list:
        self.listener = listener
        return ["unix", f"{MOUNT}/bridge.sock"]

    def sys_path(self) -> list[str]:
        return ["/opt/ringfence/lib"]

    def runner_argv(self, config_json: str) -> list[str]:
        import RestrictedPython

        assert self.listener is not None and self.listener.directory is not None
        rp = Path(RestrictedPython.__file__).resolve().parent
        confine = Path(_confine.__file__).parent
        runner = f"{PACKAGE_MOUNT}/bridge/_runner.py"
        return [
            "docker", "run", "--rm", "-i", "--network", "none",
            "-v", f"{self.listener.directory}:{MOUNT}",
            "-v", f"{RUNNER_PATH.parent}:{PACKAGE_MOUNT}/bridge:ro",
            "-v", f"{confine}:{PACKAGE_MOUNT}/_confine:ro",
            "-v", f"{rp}:/opt/ringfence/lib/RestrictedPython:ro",
            IMAGE, "python3", *boot_argv(RUNNER_MODULE, runner), config_json,
        ]  # fmt: skip


async def test_a_script_runs_in_a_container_with_every_layer(
    container_python, ledger: Ledger
) -> None:
    script = """
import json
codec_ok = "é".encode("cp1252") == b"\\xe9"   # a lazy stdlib import under Landlock's read rule
result = {"peek": call_tool("peek", x="from a container")["args"], "codec": codec_ok}
print("inside")
"""
    async with Kernel(posture=Posture.ASK) as kernel:
        register_tools(kernel, ledger)
        result = await run(
            kernel, script, transport="unix", launcher=DockerRunLauncher(), timeout=60
        )
    assert result.status == "ok", (result.error, result.returncode)
    assert result.result == {"peek": {"x": "from a container"}, "codec": True}
    assert result.output == "inside\n"
    assert ledger.runs == [("peek", {"x": "from a container"})]
    assert result.sandbox["missing"] == {}
    assert "drop_privileges" in result.sandbox["applied"]
    assert kinds(kernel, "script_started")[0]["launcher"] == "docker-run"


async def test_the_container_runner_cannot_read_or_write(container_python) -> None:
    source = 'try:\n    open("/etc/passwd")\nexcept PermissionError:\n    pass\nelse:\n    raise SystemExit("read")\nopen("/tmp/x", "w")'
    async with Kernel() as kernel:
        result = await run(
            kernel, source, transport="unix", mode="plain", launcher=DockerRunLauncher(), timeout=60
        )
    assert result.status == "error"
    assert result.error["type"] == "PermissionError", result.error


# -- the Docker backend's own session container (create_kernel(backend="docker")) ----------------

DEBIAN = "ringfence/debian:latest"


@pytest.fixture(scope="module")
def debian_image():
    """The backends' debian recipe (python3 inside); built on demand, so skipped when absent."""
    import docker

    try:
        client = docker.from_env()
        client.images.get(DEBIAN)
    except Exception as exc:
        pytest.skip(f"{DEBIAN} is not built here (`ringfence images build debian`): {exc}")
    finally:
        with contextlib.suppress(Exception):
            client.close()


def _docker_kernel(root: Path, **kw):
    from ringfence._embed import create_kernel
    from ringfence.runtime import ApprovalAnswer, ScriptedApprover

    root.chmod(0o755)  # the session's shell runs as 65534 for a root-owned root

    return create_kernel(
        roots=[root],
        backend="docker",
        backend_options={"image": "debian", "memory": "256m", "pids": 64},
        approver=ScriptedApprover(lambda r: ApprovalAnswer.once()),
        **kw,
    )


async def test_under_the_docker_backend_scripts_run_in_the_session_container(
    debian_image, tmp_path
) -> None:
    (tmp_path / "hosts.txt").write_text("alpha\nbeta\n")
    script = """
import json
names = call_tool("read_file", path="hosts.txt")
out = []
for line in names["content"].splitlines() if isinstance(names, dict) else names.splitlines():
    shell = call_tool("run_shell", command="echo hi " + line + " from $(hostname) as $(id -u)")
    out.append(shell["stdout"].strip())
result = out
"""
    async with _docker_kernel(tmp_path, posture=Posture.ALLOW_ALL) as kernel:
        outcome = await kernel.invoke("run_tool_script", {"script": script, "timeout_seconds": 60})
        started = kinds(kernel, "script_started")
        sandboxed = kinds(kernel, "script_sandbox")
        bridge_dir = Path(started[0]["address"][1]).parent.parent if started else None
    assert outcome.ok, outcome.error
    # Each line went through the Gate to run_shell, which ran in the session's container.
    assert outcome.value["result"] == [
        "hi alpha from ringfence as 65534",
        "hi beta from ringfence as 65534",
    ]
    assert started[0]["launcher"] == "docker"
    assert started[0]["address"][0] == "unix"
    assert sandboxed[0]["missing"] == {}
    assert "not root" in sandboxed[0]["applied"]["drop_privileges"]
    assert [c["tool"] for c in outcome.value["calls"]] == ["read_file", "run_shell", "run_shell"]
    assert bridge_dir is not None and not bridge_dir.exists()  # removed with the kernel


async def test_a_docker_script_past_its_timeout_is_stopped(debian_image, tmp_path) -> None:
    async with _docker_kernel(tmp_path) as kernel:
        outcome = await kernel.invoke(
            "run_tool_script",
            {"script": 'print("spinning")\nwhile True:\n    pass', "timeout_seconds": 2},
        )
        shell_tool_session = kernel.registry.get("run_shell").executor._session
        left = await shell_tool_session.top() if shell_tool_session is not None else []
        # At most the spare runner the launcher started after the launch (waiting on its
        # stdin): the spinning one is gone. The spare then runs the next script.
        again = await kernel.invoke("run_tool_script", {"script": "result = 2"})
    assert outcome.error.code == "timeout", outcome.error
    assert outcome.error.details["output"] == "spinning\n"
    assert sum("_runner.py" in line for line in left) <= 1, left
    assert again.ok and again.value["result"] == 2, again.error


DOCKER_HOST_SCRIPT = """
import sys, trio
from pathlib import Path
from ringfence._embed import create_kernel
from ringfence.runtime import ApprovalAnswer, FileSink, ScriptedApprover

async def main():
    root = Path(sys.argv[2])
    async with create_kernel(
        roots=[root], backend="docker", backend_options={"image": "debian"},
        approver=ScriptedApprover(lambda r: ApprovalAnswer.once()), events_path=sys.argv[1],
    ) as kernel:
        await kernel.invoke("run_tool_script", {"script": "while True:\\n    pass", "timeout_seconds": 120})

trio.run(main)
"""


def _in_container_runners() -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if f"{PACKAGE_MOUNT}/bridge/_runner.py" in cmd:
            found.append(proc)
    return found


def test_killing_the_host_ends_the_runner_in_the_container(debian_image, tmp_path) -> None:
    import sys

    import docker

    root = tmp_path / "ws"
    root.mkdir(mode=0o755)
    events = tmp_path / "events.jsonl"
    host_file = tmp_path / "host.py"
    host_file.write_text(DOCKER_HOST_SCRIPT)
    before = {p.pid for p in _in_container_runners()}
    host = subprocess.Popen([sys.executable, str(host_file), str(events), str(root)])
    client = docker.from_env()
    try:
        kill_host_once_sandboxed(host, events, _in_container_runners, before)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        # The killed host could not remove its container and change-set directories (an
        # id-mapped view of a root-owned workspace among them): the next session's sweep does.
        from ringfence.backends.docker._session import remove_stale_containers

        remove_stale_containers(client)
        client.close()
