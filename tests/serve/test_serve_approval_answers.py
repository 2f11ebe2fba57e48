"""A hostile MCP client's answer to an approval: its words are bounded before anything reads them.

The client that makes a call is also the one asked about it (``ClientApprover``). What it
sends back is its own choice: a session pattern past the form's ``maxLength`` (split with
shlex, whose time grows with the square of the text: 2 MB held the server's loop 200 s), a
decision that is no choice, a client name of megabytes (quoted in every answer's reason,
recorded in ``approval_answered``). Each is refused or cut; nothing runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from serve_helpers import Asker, bearer_client, error_code, serve_in_process, text_of

from ringfence.serve._approver import MAX_PATTERN_CHARACTERS


def _answered(sink: object) -> list[dict[str, object]]:
    return [r for r in sink.records() if r["kind"] == "approval_answered"]  # type: ignore[attr-defined]


async def test_a_session_pattern_past_the_forms_limit_is_refused_unsplit(workspace: Path) -> None:
    huge = "path=" + "a" * 60_000  # under the old code: split, and the grant made
    asker = Asker(
        lambda _p: types.ElicitResult(
            action="accept", content={"decision": "session", "pattern": huge}
        )
    )
    async with serve_in_process(workspace, posture="ask") as served:
        async with (
            bearer_client(served.token) as http,
            Client(
                streamable_http_client(served.url, http_client=http),
                elicitation_callback=asker,
                cache=None,
                read_timeout_seconds=60.0,
            ) as client,
        ):
            result = await client.call_tool("note_file", {"path": "wide.txt", "content": "x"})
        answered = _answered(served.sink)
    assert len(asker.asked) == 1
    assert error_code(result) == "denied", text_of(result)
    assert f"over the form's limit of {MAX_PATTERN_CHARACTERS:,}" in text_of(result)
    assert not (workspace / "wide.txt").exists()
    assert [r["choice"] for r in answered] == ["deny"]
    assert answered[0]["pattern"] is None
    assert len(json.dumps(answered)) < 4_000  # the pattern is never recorded


async def test_a_clients_huge_name_and_decision_are_cut_in_the_answers_record(
    workspace: Path,
) -> None:
    name = "client\u202e" + "n" * 2_000_000
    decision = "d" * 2_000_000
    asker = Asker(lambda _p: types.ElicitResult(action="accept", content={"decision": decision}))
    async with serve_in_process(workspace, posture="ask") as served:
        async with (
            bearer_client(served.token) as http,
            Client(
                streamable_http_client(served.url, http_client=http),
                elicitation_callback=asker,
                client_info=types.Implementation(name=name, version="1"),
                cache=None,
                read_timeout_seconds=60.0,
            ) as client,
        ):
            result = await client.call_tool("note_file", {"path": "named.txt", "content": "x"})
        answered = _answered(served.sink)
    assert error_code(result) == "denied", text_of(result)
    assert "sent no valid decision" in text_of(result)
    assert "characters)" in text_of(result)
    assert len(text_of(result)) < 4_000
    assert not (workspace / "named.txt").exists()
    assert [r["choice"] for r in answered] == ["deny"]
    reason = str(answered[0]["reason"])
    assert len(reason) < 1_000, len(reason)
    assert "\u202e" not in reason and "\\u202e" in reason  # quoted escaped, one line
