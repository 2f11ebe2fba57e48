"""Another local process against a run's bridge, through the API (``create_kernel`` + the script tool).

The runner connects to its bridge before it drops to the sandbox's uid, so the
run's socket and its directory stay the host's own: a process of the uid the
script runs as (65534, ``nobody``: the uid of many daemons) can neither remove,
replace nor rename them, so it can neither take the runner's connection nor get
the host to act on a link it planted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from typing import Any

import pytest
import trio

from ringfence._embed import create_kernel
from ringfence.runtime import CallContext, Consequence, ToolSpec

NOBODY = 65534
# The attacker's interpreter: one uid 65534 may run (this checkout's may sit under /root).
PYTHON = shutil.which("python3", path="/usr/bin:/bin")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the runner drops to 65534 only as root"),
    pytest.mark.skipif(PYTHON is None, reason="no system python3 for the attacker"),
]

# What a process of the sandbox's uid tries on the run's bridge directory: each step's outcome.
TAMPER = textwrap.dedent(
    """
    import json, os, socket, sys
    directory, sock_path = sys.argv[1], sys.argv[2]
    out = {}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "done"
        except OSError as exc:
            out[name] = exc.strerror
    attempt("unlink", lambda: os.unlink(sock_path))
    def bind():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(sock_path)
    attempt("bind", bind)
    attempt("plant", lambda: os.symlink("/etc/shadow", os.path.join(directory, "planted")))
    attempt("rename", lambda: os.rename(directory, directory + "-moved"))
    print(json.dumps(out))
    """
)


async def test_the_sandbox_uid_cannot_touch_a_runs_bridge_socket(tmp_path) -> None:
    started: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}

    def observe(line: str) -> None:
        record = json.loads(line)
        if record.get("kind") == "script_started":
            started.append(record)

    async def tamper(args: dict, ctx: CallContext) -> str:
        address = started[-1]["address"]
        assert address[0] == "unix", address
        sock_path = address[1]
        directory = os.path.dirname(sock_path)
        seen["before"] = os.lstat(sock_path)
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [PYTHON, "-I", "-c", TAMPER, directory, sock_path],
                user=NOBODY,
                group=NOBODY,
                extra_groups=[],
                capture_output=True,
                text=True,
                timeout=30,
                cwd="/",
            )
        )
        seen["attempts"] = json.loads(done.stdout)
        try:
            seen["after"] = os.lstat(sock_path)
            seen["listing"] = sorted(os.listdir(directory))
        except FileNotFoundError:
            seen["after"] = seen["listing"] = None
        shutil.rmtree(directory + "-moved", ignore_errors=True)  # the old code let it move
        return "tampered"

    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with create_kernel(
        roots=[workspace], posture="unrestricted", event_observer=observe
    ) as kernel:
        kernel.register(
            ToolSpec("tamper", "tries", {"type": "object"}, tamper, consequence=Consequence.READ)
        )
        outcome = await kernel.invoke(
            "run_tool_script", {"script": 'result = tools.tamper()\nprint("after")'}
        )
    # every step refused, nothing changed in the directory
    refused = {"Permission denied", "Operation not permitted"}  # EACCES; EPERM: /tmp is sticky
    assert set(seen["attempts"]) == {"unlink", "bind", "plant", "rename"}
    assert set(seen["attempts"].values()) <= refused, seen["attempts"]
    assert seen["after"].st_ino == seen["before"].st_ino
    assert seen["after"].st_uid == os.geteuid()
    assert seen["listing"] == ["bridge.sock"]
    assert outcome.ok, outcome.error
    assert outcome.value["result"] == "tampered"
