"""A confined server's ``env`` is the server's alone: nothing outside the sandbox runs with it.

The manifest's ``[server.env]`` of a ``sandbox = "local"`` server was the environment of the
whole chain that starts it: the spawn gate's shell and bubblewrap, both host processes outside
the sandbox, then the sandbox's supervisor before it applied Landlock and seccomp. A variable
the dynamic loader reads (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``LD_AUDIT``) naming a file in
the workspace, which the agent can write, so ran the agent's code on the host, as the user,
unconfined (``/usr/bin/dash`` and ``/usr/bin/bwrap`` each ran it). Now the chain gets the
SDK's minimal environment only, and the supervisor hands the server its variables at the
server's own exec, after every layer: the server still sees each of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from mcp_host_helpers import PYTHON, SERVERS, manifest, toml_str

from ringfence import create_kernel
from ringfence.runtime import Posture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

HOOK = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void hook(void) {
    const char *out = getenv("RF_HOOK_OUT");
    char exe[512] = {0};
    if (!out || readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return;
    FILE *f = fopen(out, "a");
    if (f) { fprintf(f, "%s\n", exe); fclose(f); }
}
"""


def _hook_library(where: Path) -> Path:
    """A shared library that appends its process's program to ``$RF_HOOK_OUT`` when loaded."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the preloaded library")
    source = where.with_suffix(".c")
    source.write_text(HOOK)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(where), str(source)], check=True)
    source.unlink()
    return where


def test_the_transport_and_the_supervisor_name_the_same_variable() -> None:
    from ringfence._confine import SANDBOXED_ENV
    from ringfence.mcp_host.transport import _stdio

    assert _stdio.SANDBOXED_ENV == SANDBOXED_ENV


async def test_a_confined_servers_env_reaches_no_process_outside_the_sandbox(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # What the agent wrote into the workspace (write_file and run_shell can).
    hook = _hook_library(workspace / "hook.so")
    escaped = tmp_path / "escaped.log"  # outside the roots: the sandbox cannot write it
    block = (
        f'[[server]]\nname = "jail"\ntransport = "stdio"\ncommand = {toml_str(PYTHON)}\n'
        f'args = [{toml_str(SERVERS / "escape.py")}]\nsandbox = "local"\n'
        'read_only_tools = ["read", "echo"]\n'
        f"[server.env]\nLD_PRELOAD = {toml_str(hook)}\nRF_HOOK_OUT = {toml_str(escaped)}\n"
        'RF_SERVER_MARK = "for-the-server"\n'
    )
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_ALL,
        mcp_manifest=manifest(block),
        events_path=tmp_path / "events.jsonl",
    ) as kernel:
        assert await kernel.call("mcp.jail.echo", {"text": "hello"}) is not None
        seen = json.dumps(await kernel.call("mcp.jail.read", {"path": "/proc/self/environ"}))
    # Nothing outside the sandbox loaded the workspace's library: no host process wrote.
    ran = escaped.read_text().splitlines() if escaped.exists() else []
    assert ran == [], f"the workspace's library ran outside the sandbox in {ran}"
    # The server itself still runs with its variables (confined, after every layer).
    assert "RF_SERVER_MARK=for-the-server" in seen, seen
    assert f"LD_PRELOAD={hook}" in seen, seen
    assert "RINGFENCE_SANDBOXED_ENV" not in seen
    connected = [
        json.loads(line)
        for line in (tmp_path / "events.jsonl").read_text().splitlines()
        if '"mcp_connected"' in line
    ]
    assert connected and connected[0]["sandbox"]["confined"] is True


async def test_the_sandbox_is_never_a_bwrap_the_agent_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap was looked up on the kernel's PATH, which an activated project venv starts
    with ``<ws>/.venv/bin``: the agent's ``.venv/bin/bwrap`` (write_file, chmod) ran on the
    host, unconfined, as the sandbox of every confined server (and command). It is looked up
    without the roots' entries now, and one found in a root through a link is refused."""
    workspace = tmp_path / "ws"
    (workspace / ".venv" / "bin").mkdir(parents=True)
    marker = tmp_path / "planted-bwrap-ran"
    planted = workspace / ".venv" / "bin" / "bwrap"
    real = shutil.which("bwrap")
    planted.write_text(f'#!/bin/sh\ntouch {marker}\nexec {real} "$@"\n')
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted.parent}:{os.environ['PATH']}")
    block = (
        f'[[server]]\nname = "jail"\ntransport = "stdio"\ncommand = {toml_str(PYTHON)}\n'
        f'args = [{toml_str(SERVERS / "escape.py")}]\nsandbox = "local"\n'
        'read_only_tools = ["echo"]\n'
    )

    def kernel() -> object:
        return create_kernel(
            roots=[workspace],
            posture=Posture.ALLOW_ALL,
            mcp_manifest=manifest(block),
            events_path=tmp_path / "events.jsonl",
        )

    async with kernel() as k:  # type: ignore[attr-defined]
        assert "hello" in json.dumps(await k.call("mcp.jail.echo", {"text": "hello"}))
    assert not marker.exists()
    # A PATH entry outside the roots whose bwrap links into one: refused, naming the root.
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "bwrap").symlink_to(planted)
    monkeypatch.setenv("PATH", f"{elsewhere}:{os.environ['PATH']}")
    async with kernel() as k:  # type: ignore[attr-defined]
        failure = k.extensions["mcp"].failures["jail"]
    assert failure.code == "unavailable" and "lies in the workspace root" in failure.message
    assert not marker.exists()
