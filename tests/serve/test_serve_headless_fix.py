"""``ringfence serve``'s headless denial names the fix (issue 31, friction 8).

A real ``ringfence serve`` over stdio and an SDK client that declares no elicitation:
the refusal says the client cannot be asked, and which flags of ``serve`` let the call
run; nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from serve_helpers import error_code, real_command, stdio_session, text_of


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
