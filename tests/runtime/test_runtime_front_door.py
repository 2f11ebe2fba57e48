"""A host's own values handed to the API: what JSON cannot hold is refused by field, recorded.

``kernel.invoke`` and ``answer_tool_call`` take Python values; the Gate, the records and the
intent are JSON. A ``bytes`` or ``Path`` value, a set, a key that is not a string or an
integer too long to print raised ``TypeError``/``ValueError`` out of the API with nothing
recorded, and an ``int`` key was recorded as a string (another key than the tool was given).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ringfence

CASES: list[tuple[dict[Any, Any], str, str]] = [
    ({"path": "x.txt", "content": b"bytes"}, "content", "bytes"),
    ({"path": Path("x.txt"), "content": "c"}, "path", "PosixPath"),
    ({"path": "x.txt", "content": {"a", "b"}}, "content", "set"),
    ({"path": "x.txt", "content": "c", 1: "one"}, "arguments", "not a string"),
    ({"path": "x.txt", "content": [10**4000]}, "content[0]", "digits"),
]


@pytest.mark.parametrize(("arguments", "field", "said"), CASES)
async def test_a_value_json_cannot_hold_is_refused_by_field_and_recorded(
    tmp_path: Path, arguments: dict[Any, Any], field: str, said: str
) -> None:
    work, log = tmp_path / "work", tmp_path / "events.jsonl"
    work.mkdir()
    async with ringfence.create_kernel(roots=[work], posture="allow-all", events_path=log) as k:
        out = await k.invoke("write_file", arguments)
        assert out.error is not None and out.error.code == "invalid_arguments", out
        assert out.error.field == field and said in out.error.message, out.error
        block = await k.answer_tool_call(
            {"type": "tool_use", "id": "t1", "name": "write_file", "input": arguments}
        )
        assert block["is_error"] is True and said in block["content"], block
    assert not (work / "x.txt").exists()  # nothing ran
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [r for r in records if r.get("tool") == "write_file"]
    assert [r["kind"] for r in calls] == ["proposed", "failed"] * 2
    assert all("not recorded" in r["arguments"] for r in calls if r["kind"] == "proposed")
    assert not [r for r in records if r["kind"] in ("started", "finished")]


@pytest.mark.parametrize("ref", ["#/$defs/missing", "http://127.0.0.1:9/s.json", "urn:x"])
async def test_a_schema_ref_that_does_not_resolve_refuses_the_call_naming_it(
    tmp_path: Path, ref: str
) -> None:
    """A tool's (an MCP server's) input schema with a ``$ref`` to nothing, or to a document
    elsewhere (never fetched): every call ended in ``tool_error``, "failed inside ringfence:
    _WrappedReferencingError". It is refused as an uncheckable schema, naming the reference,
    and the tool never runs."""
    from ringfence.runtime import Consequence, ToolSpec

    ran: list[Any] = []

    async def run(args: dict[str, Any], ctx: Any) -> str:
        ran.append(args)
        return "ran"

    log = tmp_path / "events.jsonl"
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    ws = tmp_path / "ws"
    ws.mkdir()
    kernel = ringfence.create_kernel(roots=[ws], posture="allow-all", events_path=log)
    kernel.register(ToolSpec("dangling", "d", schema, run, Consequence.READ))
    async with kernel:
        out = await kernel.invoke("dangling", {"a": 1})
    assert out.error is not None and out.error.code == "invalid_arguments", out
    assert out.error.field == "input_schema" and ref.lstrip("#") in out.error.message, out.error
    assert ran == []
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert "failed" in kinds and "started" not in kinds
