"""``ringfence serve`` as a new user meets it (issue 31, frictions 8 and 10).

A real ``ringfence serve`` over stdio and an SDK client: a headless denial says the client
cannot be asked and which flags of ``serve`` let the call run (nothing is written); the
server's stderr carries no SDK deprecation noise for the logging it serves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import mcp_types as types
from serve_helpers import (
    Asker,
    error_code,
    real_command,
    stdio_session,
    subprocess_env,
    text_of,
)


async def test_a_client_that_cannot_be_asked_is_told_what_lets_the_call_run(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    events = tmp_path / "events.jsonl"
    command = real_command(workspace, events, "--posture", "ask")
    async with stdio_session(workspace, events, command=command, mode="legacy") as client:
        result = await client.call_tool("write_file", {"path": "a.txt", "content": "x"})
    text = text_of(result)
    assert error_code(result) == "denied"
    assert "cannot be asked" in text and "elicitation" in text
    assert "--posture allow-reversible" in text and "--allow 'write_file(path=a.txt)'" in text
    assert not (workspace / "a.txt").exists()


async def test_serving_logs_puts_no_deprecation_warning_on_stderr(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    events = tmp_path / "events.jsonl"
    errlog = tmp_path / "serve.stderr"
    command = real_command(workspace, events)
    async with stdio_session(
        workspace, events, command=command, mode="legacy", errlog=errlog
    ) as client:
        with warnings.catch_warnings():  # the client's own deprecation warning is not ours
            warnings.simplefilter("ignore")
            await client.set_logging_level("info")
        result = await client.call_tool("list_directory", {"path": "."})
        assert not result.is_error
    stderr = errlog.read_text()
    assert "serving" in stderr  # the server did write its stderr here
    assert "DeprecationWarning" not in stderr, stderr


async def test_a_session_approval_over_elicitation_can_name_a_pattern(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "notes").mkdir(parents=True)
    events = tmp_path / "events.jsonl"
    asker = Asker(
        lambda _p: types.ElicitResult(
            action="accept", content={"decision": "session", "pattern": "path=notes/* content=*"}
        )
    )
    command = real_command(workspace, events, "--posture", "ask")
    async with stdio_session(
        workspace, events, command=command, mode="legacy", asker=asker
    ) as client:
        form = None
        for name in ("a", "b", "c"):
            result = await client.call_tool(
                "write_file", {"path": f"notes/{name}.txt", "content": name}
            )
            assert not result.is_error, text_of(result)
            form = form or asker.asked[0].requested_schema
    assert len(asker.asked) == 1  # the pattern covered b and c
    assert "pattern" in form["properties"]
    assert sorted(p.name for p in (workspace / "notes").iterdir()) == ["a.txt", "b.txt", "c.txt"]


# -- 6. the first initialize is answered before the SDK loads ------------------------------------


def test_the_handshake_versions_are_the_sdk_s() -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    from ringfence.serve._early import HANDSHAKE_VERSIONS

    assert tuple(HANDSHAKE_PROTOCOL_VERSIONS) == HANDSHAKE_VERSIONS


def test_the_early_answer_needs_neither_the_sdk_nor_trio(tmp_path: Path) -> None:
    """What the command does before the kernel: answer on a pipe, nothing heavy imported."""
    probe = (
        "import os, sys\n"
        "from ringfence.serve._early import answer_initialize_early\n"
        "r, w = os.pipe(); out_r, out_w = os.pipe()\n"
        "os.write(w, sys.argv[1].encode() + b'\\n')\n"
        "early = answer_initialize_early(['native'], logging=True, fd_in=r, fd_out=out_w)\n"
        "print(os.read(out_r, 65536).decode().strip())\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'mcp_types', 'trio', "
        "'pydantic', 'anyio'}))\n"
    )
    request = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": "a",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "c", "version": "1"},
            },
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, request], capture_output=True, text=True, timeout=60
    )
    answer, loaded = done.stdout.splitlines()
    assert json.loads(answer)["id"] == "a"
    assert json.loads(answer)["result"]["protocolVersion"] == "2025-06-18"
    assert loaded == "[]", loaded


def test_the_early_answer_is_the_sdk_s_and_the_session_goes_on(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = subprocess_env()
    for expose, version in (
        ("native", "2025-11-25"),
        ("native", "2025-06-18"),
        ("native", "1999-01-01"),
        ("connectors", "2024-11-05"),
    ):
        argv = real_command(workspace, tmp_path / f"{expose}.jsonl", "--expose", expose)
        proc = subprocess.Popen(
            [sys.executable, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        proc.stdin.write((json.dumps(init) + "\n").encode())
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())
        for message in (
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ):
            proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline())
        proc.stdin.close()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
        assert first["id"] == 1 and "result" in first, first
        assert second["id"] == 2 and "tools" in second["result"], second  # one answer each
        assert b"differs from the SDK" not in err, err.decode()
        caps = first["result"]["capabilities"]
        assert ("resources" in caps) is (expose == "native")
