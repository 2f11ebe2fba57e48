"""The user's ``[mcp.<server>]`` policy holds in Python as on the command line (issue 31, friction 4).

The README's Python example (``create_kernel`` + ``connect_servers``) was denied as
written: the user's ``read_only_tools`` lived in a policy file the kernel never read.
One way now: ``create_kernel(policy=True)`` reads the files the command line reads, and
every way of connecting that kernel's servers applies their ``[mcp.*]`` statements.
Real SDK peer over stdio, real policy files in ``$RINGFENCE_HOME``.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp_host_helpers import manifest, py_server

import ringfence
from ringfence.mcp_host import connect_servers


def user_policy(text: str) -> None:
    home = Path(os.environ["RINGFENCE_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "policy.toml").write_text(text)


async def test_the_user_s_read_only_tools_hold_for_connect_servers(
    tmp_path: Path, state: Path
) -> None:
    user_policy('[mcp.notes]\nread_only_tools = ["read_note"]\n')
    (state / "note-a.txt").write_text("the note")
    servers = manifest(py_server("notes", "annotated.py", state=state, reads=()))
    ws = tmp_path / "ws"
    ws.mkdir()
    # posture ask, nobody to ask: only a read tool runs
    async with (
        ringfence.create_kernel(roots=[ws], policy=True) as kernel,
        connect_servers(kernel, servers),
    ):
        spec = kernel.registry.get("mcp.notes.read_note")
        assert spec.consequence is ringfence.Consequence.READ, spec.meta["consequence_reason"]
        assert "the note" in (await kernel.call("mcp.notes.read_note", {"name": "a"}))["text"]
        # the rest still asks, and asking headless means no
        out = await kernel.invoke("mcp.notes.append_note", {"name": "a", "text": "x"})
        assert out.error is not None and out.error.code == "denied"
    assert (state / "note-a.txt").read_text() == "the note"


async def test_without_the_policy_the_reason_names_how_to_load_it(
    tmp_path: Path, state: Path
) -> None:
    user_policy('[mcp.notes]\nread_only_tools = ["read_note"]\n')
    servers = manifest(py_server("notes", "annotated.py", state=state, reads=()))
    ws = tmp_path / "ws"
    ws.mkdir()
    async with ringfence.create_kernel(roots=[ws]) as kernel, connect_servers(kernel, servers):
        spec = kernel.registry.get("mcp.notes.read_note")
        assert spec.consequence is not ringfence.Consequence.READ
        assert "create_kernel(policy=True)" in spec.meta["consequence_reason"]
