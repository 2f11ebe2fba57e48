"""``ringfence serve`` as a new user meets it (issue 31, frictions 8 and 10).

A real ``ringfence serve`` over stdio and an SDK client: a headless denial says the client
cannot be asked and which flags of ``serve`` let the call run (nothing is written); the
server's stderr carries no SDK deprecation noise for the logging it serves.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import mcp_types as types
from serve_helpers import Asker, error_code, real_command, stdio_session, text_of


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
