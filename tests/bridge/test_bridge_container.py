"""The runner inside a container, over a mounted Unix socket: the design the Docker backend uses.

This is not the Docker backend's integration (that launcher belongs to the
session's container); it starts a throwaway container per run with ``docker
run`` to prove the runner, the Unix transport, the secret on stdin and every
sandbox layer work there. It needs a local image with ``python3`` (default
``ringfence/debian``; ``RINGFENCE_SCRIPT_IMAGE`` to choose) and skips without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bridge_helpers import Ledger, kinds, register_tools, run

from ringfence.bridge import BridgeListener, LocalLauncher
from ringfence.bridge._host import RUNNER_PATH
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
        return [
            "docker", "run", "--rm", "-i", "--network", "none",
            "-v", f"{self.listener.directory}:{MOUNT}",
            "-v", f"{RUNNER_PATH.parent}:/opt/ringfence/bridge:ro",
            "-v", f"{rp}:/opt/ringfence/lib/RestrictedPython:ro",
            IMAGE, "python3", "-I", "-S", "/opt/ringfence/bridge/_runner.py", config_json,
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
