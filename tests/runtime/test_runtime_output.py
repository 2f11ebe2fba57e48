"""Redaction (also across chunks) and output caps (head + tail + spool)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from runtime_helpers import Ledger, make_tool

from ringfence.runtime import (
    Consequence,
    Kernel,
    MemorySink,
    Posture,
    ToolError,
    ToolSpec,
)
from ringfence.runtime._output import cap_text
from ringfence.runtime._redact import MARKER, Redactor

SECRET = "sk-live-5f3a9c0d2e"


async def test_secret_printed_by_tool_never_leaves(ledger: Ledger) -> None:
    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL, secrets=[SECRET]) as kernel:
        kernel.register(make_tool("leak", Consequence.READ, ledger, output=f"key is {SECRET}!"))
        value = await kernel.call("leak", {"x": f"arg {SECRET}"})
    assert value == f"key is {MARKER}!"
    assert SECRET not in "\n".join(sink.lines)
    assert MARKER in "\n".join(sink.lines)


async def test_secret_in_error_and_nested_result(ledger: Ledger) -> None:
    async def fails(args, ctx):
        raise RuntimeError(f"could not use {SECRET}")

    async def nested(args, ctx):
        return {"items": [{"v": SECRET}], SECRET: 1}

    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL) as kernel:
        kernel.register(ToolSpec("fails", "", {"type": "object"}, fails, consequence="read"))
        kernel.register(ToolSpec("nested", "", {"type": "object"}, nested, consequence="read"))
        kernel.redactor.register_env({"GITHUB_TOKEN": SECRET, "HOME": "/root"})
        failed = await kernel.invoke("fails", {})
        value = await kernel.call("nested", {})
    assert isinstance(failed.error, ToolError)
    assert SECRET not in failed.error.message and MARKER in failed.error.message
    assert json.dumps(value).count(MARKER) == 2 and SECRET not in json.dumps(value)
    assert SECRET not in "\n".join(sink.lines)
    assert kernel.redactor.redact("/root") == "/root"  # HOME is not a credential name


def test_stream_redactor_catches_split_secret() -> None:
    redactor = Redactor([SECRET])
    for split in range(1, len(SECRET)):
        stream = redactor.stream()
        chunks = ["out: " + SECRET[:split], SECRET[split:] + " end", "\nmore"]
        text = "".join(stream.feed(c) for c in chunks) + stream.flush()
        assert text == f"out: {MARKER} end\nmore", split


def test_stream_redactor_one_char_at_a_time() -> None:
    redactor = Redactor([SECRET, "pw-1234"])
    stream = redactor.stream()
    source = f"a {SECRET} b pw-1234 c {SECRET}"
    text = "".join(stream.feed(ch) for ch in source) + stream.flush()
    assert text == f"a {MARKER} b {MARKER} c {MARKER}"


def test_short_values_are_not_registered() -> None:
    redactor = Redactor(["no", ""])
    assert redactor.redact("no way") == "no way"


def test_cap_keeps_head_and_tail_and_spools(tmp_path: Path) -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL"
    capped = cap_text(text, 100, tmp_path)
    assert capped.truncated
    assert capped.text.startswith("HEAD") and capped.text.endswith("TAIL")
    assert "cut 9908 of 10008 bytes" in capped.text
    assert capped.spool_path is not None and capped.spool_path in capped.text
    assert Path(capped.spool_path).read_text() == text
    assert cap_text("short", 100, tmp_path) == cap_text("short", 100)
    assert not cap_text("short", 100).truncated


def test_cap_never_splits_a_character() -> None:
    capped = cap_text("é" * 1000, 101)
    capped.text.encode("utf-8")  # would raise on a broken surrogate
    assert capped.text.startswith("é") and capped.text.endswith("é")


async def test_kernel_caps_large_results(tmp_path: Path, ledger: Ledger) -> None:
    big = "B" * 5000 + "E"
    async with Kernel(
        posture=Posture.ALLOW_ALL, output_cap_bytes=200, spool_dir=tmp_path
    ) as kernel:
        kernel.register(make_tool("big", Consequence.READ, ledger, output=big))
        value = await kernel.call("big", {})
    assert len(value.encode()) < 400 and value.endswith("E")
    spooled = list(tmp_path.iterdir())
    assert len(spooled) == 1 and spooled[0].read_text() == big


async def test_secret_named_in_arguments_is_redacted_from_the_first_event(ledger: Ledger) -> None:
    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL) as kernel:
        kernel.register(make_tool("leak", Consequence.READ, ledger, output=f"echo {SECRET}"))
        outcome = await kernel.invoke("leak", {"env": {"DEPLOY_TOKEN": SECRET, "LANG": "C.UTF-8"}})
    assert outcome.error is not None  # the schema refuses 'env'; it was still recorded, redacted
    assert SECRET not in "\n".join(sink.lines)
    proposed = next(r for r in sink.records() if r["kind"] == "proposed")
    assert proposed["arguments"]["env"] == {"DEPLOY_TOKEN": MARKER, "LANG": "C.UTF-8"}


async def test_credentials_in_headers_lists_and_error_details_never_leave(ledger: Ledger) -> None:
    basic = base64.b64encode(b"alice:pa55-word-basic").decode()

    async def fails(args, ctx):
        raise ToolError("upstream failed", upstream_body=f"echo {SECRET}")

    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL, secrets=[SECRET]) as kernel:
        kernel.register(ToolSpec("fails", "", {"type": "object"}, fails, consequence="read"))
        outcome = await kernel.invoke(
            "fails",
            {
                "headers": {
                    "Authorization": "Bearer abcd-live-token",
                    "Proxy-Authorization": f"Basic {basic}",
                },
                "API_TOKEN": ["list-secret-1234"],
            },
        )
    wire = json.dumps(outcome.to_dict())
    assert SECRET not in wire and outcome.error.details["upstream_body"] == f"echo {MARKER}"
    events = "\n".join(sink.lines)
    for leaked in ("abcd-live-token", "list-secret-1234", basic, "pa55-word-basic"):
        assert leaked not in events and leaked not in wire, leaked
