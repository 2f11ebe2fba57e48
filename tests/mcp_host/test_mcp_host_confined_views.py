"""What a confined server is shown of hidden directories is never the agent's choice.

A ``sandbox = "local"`` server whose command line names files in hidden directories (a venv
or a checkout under ``/tmp`` or a home) gets those shown read-only: the program, arguments
that are existing files, each by its real path, and a script's ``#!`` interpreter. Files in a
workspace root are the agent's to write, so the views were the agent's to choose: a server
script in the workspace (the documented way to confine an agent-writable server) whose first
line read ``#!/root/.ssh/id_rsa`` (a Python comment: the script still runs) had ``/root/.ssh``
shown whole, and an argument file the agent turned into a link showed the link's directory;
the server read the key and returned it. Now nothing is derived from a file in a root (its
link, its ``#!`` line, a ``pyvenv.cfg``): the roots are bound already, and such a file needs
no view.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_host_helpers import PYTHON, SERVERS, manifest, toml_str

from ringfence import create_kernel
from ringfence.runtime import Posture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def hidden() -> Iterator[Path]:
    """A directory under ``/tmp``, which the sandbox hides (its ``/tmp`` is private)."""
    where = Path(tempfile.mkdtemp(prefix="rf-hidden-", dir="/tmp"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


async def test_a_workspace_file_cannot_choose_what_the_sandbox_shows(
    tmp_path: Path, hidden: Path
) -> None:
    keys, tokens = hidden / "keys", hidden / "tokens"
    keys.mkdir()
    tokens.mkdir()
    (keys / "id_key").write_text("PRIVATE-KEY-the-sandbox-hides\n")
    (keys / "other").write_text("ANOTHER-SECRET-beside-it\n")
    (tokens / "token.json").write_text('{"token": "TOKEN-the-sandbox-hides"}\n')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # What the agent wrote: the server script the manifest runs, its first line a #! naming
    # the key (a comment to Python), and an argument file made a link to the token.
    script = workspace / "server.py"
    script.write_text(f"#!{keys / 'id_key'}\n" + (SERVERS / "escape.py").read_text())
    (workspace / "data.json").symlink_to(tokens / "token.json")
    block = (
        f'[[server]]\nname = "jail"\ntransport = "stdio"\ncommand = {toml_str(PYTHON)}\n'
        f'args = [{toml_str(script)}, {toml_str(workspace / "data.json")}]\nsandbox = "local"\n'
        'read_only_tools = ["read", "echo"]\n'
    )
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_ALL,
        mcp_manifest=manifest(block),
        events_path=tmp_path / "events.jsonl",
    ) as kernel:
        failures = kernel.extensions["mcp"].failures
        assert not failures, {k: v.message for k, v in failures.items()}
        assert "hello" in json.dumps(await kernel.call("mcp.jail.echo", {"text": "hello"}))
        seen = [
            json.dumps(await kernel.call("mcp.jail.read", {"path": str(p)}))
            for p in (keys / "id_key", keys / "other", tokens / "token.json")
        ]
    for answer in seen:
        assert "refused" in answer, answer
    assert not any(s in "".join(seen) for s in ("PRIVATE-KEY", "ANOTHER-SECRET", "TOKEN-the"))
    (event,) = [
        json.loads(line)
        for line in (tmp_path / "events.jsonl").read_text().splitlines()
        if '"mcp_connected"' in line
    ]
    layers = {layer["layer"]: layer for layer in event["sandbox"]["layers"]}
    assert str(hidden) not in layers["file system"]["detail"], layers["file system"]
