"""Every call ends in exactly one outcome; caps redact first; odd text never crashes the kernel.

Items 10, 11 and 14 of the attack issue: a non-UTF-8 file name, an exception
no layer expected, a cancelled call, and a secret straddling a cut.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import ringfence_process as cli
from kernel_helpers import event_records

from ringfence import create_kernel
from ringfence.runtime import (
    ApprovalRequest,
    CallContext,
    Denied,
    FileSink,
    Kernel,
    MemorySink,
    Posture,
    Rules,
    ToolError,
    ToolSpec,
    verify_file,
)
from ringfence.runtime._output import cap_text
from ringfence.runtime._redact import MARKER
from ringfence.runtime._verify import verify_chain

OUTCOMES = {"finished", "failed", "cancelled", "staged"}
SECRET = "Zq7Xv9Lm3Np5Rt8Wk2Hs"


def outcomes_per_call(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """call_id -> the outcome kinds recorded for it, for every call that was proposed."""
    out: dict[str, list[str]] = {r["call_id"]: [] for r in records if r["kind"] == "proposed"}
    for r in records:
        if r["kind"] in OUTCOMES:
            out[r["call_id"]].append(r["kind"])
    return out


def assert_one_outcome_each(records: list[dict[str, Any]]) -> None:
    started = {r["call_id"] for r in records if r["kind"] == "started"}
    per_call = outcomes_per_call(records)
    assert started <= per_call.keys()
    assert all(len(kinds) == 1 for kinds in per_call.values()), per_call


def tool(name: str, executor: Any, consequence: str = "read") -> ToolSpec:
    return ToolSpec(
        name, f"test tool {name}", {"type": "object"}, executor, consequence=consequence
    )


# -- item 10: lone surrogates and unexpected exceptions --------------------------------


def test_a_non_utf8_file_name_is_listed_and_the_call_finishes(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / os.fsdecode(b"caf\xff.txt")).write_text("x")
    events = tmp_path / "events.jsonl"
    result = cli(
        "call", "list_directory", "--args", '{"path": "."}', "--workspace", "ws", "--json",
        "--events", str(events), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    names = [e["name"] for e in json.loads(result.stdout)["result"]]
    assert names == ["caf\\xff.txt"]  # the documented escaped form of the byte 0xff
    records = event_records(events)
    assert [r["kind"] for r in records if r.get("tool") == "list_directory"][-1] == "finished"
    assert_one_outcome_each(records)
    assert cli("events", "verify", str(events), cwd=tmp_path).returncode == 0


async def test_surrogates_anywhere_in_a_result_or_argument_are_escaped(tmp_path: Path) -> None:
    async def names(args: dict[str, Any], ctx: CallContext) -> Any:
        bad = os.fsdecode(b"\xfe\xff") + "\ud800"
        return {bad: [bad, "ok"], "text": "x" * 70_000 + bad}

    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL, spool_dir=tmp_path) as kernel:
        kernel.register(tool("names", names))
        outcome = await kernel.invoke("names", {})
        # An argument that is not valid Unicode cannot be signed or staged: refused by name.
        refused = await kernel.invoke("names", {"path": os.fsdecode(b"a\x80")})
    assert outcome.ok, outcome.error
    assert outcome.value["\\xfe\\xff\\ud800"][0] == "\\xfe\\xff\\ud800"
    json.dumps(outcome.value, ensure_ascii=False).encode("utf-8")  # printable as UTF-8
    assert refused.error is not None and refused.error.code == "invalid_arguments"
    assert refused.error.field == "path" and "\\x80" in refused.error.message
    records = sink.records()
    assert [r["arguments"] for r in records if r["kind"] == "proposed"][1] == {"path": "a\\x80"}
    assert_one_outcome_each(records)
    assert verify_chain(sink.lines).ok


async def test_an_exception_outside_the_executor_ends_in_failed() -> None:
    class BrokenApprover:
        async def approve(self, request: ApprovalRequest) -> Any:
            raise RuntimeError("the terminal went away")

    async def ran(args: dict[str, Any], ctx: CallContext) -> str:
        raise AssertionError("must not run")

    sink = MemorySink()
    async with Kernel(events_sink=sink, approver=BrokenApprover()) as kernel:
        kernel.register(tool("launch", ran, "irreversible"))
        outcome = await kernel.invoke("launch", {})
    assert isinstance(outcome.error, ToolError)
    assert "RuntimeError: the terminal went away" in outcome.error.message
    records = sink.records()
    assert records[-2]["kind"] == "failed" and records[-2]["error"]["code"] == "tool_error"
    assert_one_outcome_each(records)


async def test_the_lower_level_authorize_and_execute_record_whole_calls() -> None:
    async def boom(args: dict[str, Any], ctx: CallContext) -> str:
        raise KeyError("inside the tool")

    sink = MemorySink()
    async with Kernel(
        events_sink=sink, posture=Posture.ALLOW_ALL, rules=Rules(deny=("nope",))
    ) as kernel:
        kernel.register(tool("boom", boom))
        kernel.register(tool("nope", boom))
        with pytest.raises(Denied):
            await kernel.authorize("nope", {})
        auth = await kernel.authorize("boom", {})
        with pytest.raises(ToolError, match="KeyError"):
            await kernel.execute(auth)
    records = sink.records()
    assert [r["kind"] for r in records if r["kind"] in OUTCOMES] == ["failed", "failed"]
    assert_one_outcome_each(records)
    assert verify_chain(sink.lines).ok


# -- item 11: cancellation ---------------------------------------------------------------


def sleepy_tool() -> tuple[ToolSpec, trio.Event]:
    """A read tool ``sleepy`` that sleeps 30 s, and the event it sets when it has started."""
    started = trio.Event()

    async def sleepy(args: dict[str, Any], ctx: CallContext) -> str:
        started.set()
        await trio.sleep(30)
        return "woke"

    return tool("sleepy", sleepy), started


async def wait_until_started(events: Path, seconds: float, poll: float) -> None:
    """Poll the events file until a ``started`` record is in it (at most ``seconds``)."""
    with trio.fail_after(seconds):  # (the file appears with the kernel, after initialize)
        while not events.exists() or b'"kind":"started"' not in events.read_bytes():
            await trio.sleep(poll)


async def test_a_cancelled_call_ends_in_cancelled_and_the_log_verifies(tmp_path: Path) -> None:
    sleepy, started = sleepy_tool()
    events = tmp_path / "events.jsonl"
    async with Kernel(events_sink=FileSink(events), posture=Posture.ALLOW_ALL) as kernel:
        kernel.register(sleepy)
        with trio.move_on_after(5) as outer:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(kernel.invoke, "sleepy", {})
                    await started.wait()
                    scope.cancel()
        assert scope.cancelled_caught and not outer.cancelled_caught  # Cancelled propagated
    records = event_records(events)
    kinds = [r["kind"] for r in records]
    assert kinds[-3:] == ["started", "cancelled", "session_sealed"], kinds
    assert_one_outcome_each(records)
    result = cli("events", "verify", str(events), cwd=tmp_path)
    assert result.returncode == 0, result.stdout


async def test_a_call_in_flight_when_the_kernel_closes_ends_in_cancelled(tmp_path: Path) -> None:
    sleepy, started = sleepy_tool()
    events = tmp_path / "events.jsonl"
    kernel = Kernel(events_sink=FileSink(events), posture=Posture.ALLOW_ALL)
    kernel.register(sleepy)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(kernel.invoke, "sleepy", {})
        await started.wait()
        await kernel.aclose()  # shut down while the call runs in another task
        nursery.cancel_scope.cancel()
    records = event_records(events)
    assert [r["kind"] for r in records][-3:] == ["started", "cancelled", "session_sealed"]
    assert records[-2]["reason"] == "the kernel closed while the call was in flight"
    assert_one_outcome_each(records)
    assert verify_file(events).ok


async def test_a_real_shell_command_cancelled_mid_run(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    events = tmp_path / "events.jsonl"
    kernel = create_kernel(
        roots=[tmp_path / "ws"], posture="unrestricted", backend="local", events_path=events
    )
    async with kernel:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kernel.invoke, "run_shell", {"command": "sleep 30"})
                await wait_until_started(events, 10, 0.01)
                scope.cancel()
    assert scope.cancelled_caught
    records = event_records(events)
    assert [r["kind"] for r in records if r.get("tool") == "run_shell"][-1] == "cancelled"
    assert_one_outcome_each(records)
    assert verify_file(events).ok


# -- item 14: redact first, cut after ------------------------------------------------------


def leaks(text: str) -> bool:
    """True when any 6-character piece of the secret appears (a prefix or suffix cut off)."""
    return any(SECRET[i : i + 6] in text for i in range(len(SECRET) - 5))


async def test_a_secret_straddling_every_cut_never_leaks(tmp_path: Path) -> None:
    cap = 1000
    # Each text puts the secret across the cut of one cap: the result's head, the event
    # preview's head (a repr the redactor cannot walk), the error message's head.
    result_text = "r" * (cap // 2 - 7) + SECRET + "R" * 5000

    class Opaque:
        def __repr__(self) -> str:
            return "p" * (4096 // 2 - 9) + SECRET + "P" * 9000

    async def big(args: dict[str, Any], ctx: CallContext) -> str:
        return result_text

    async def opaque(args: dict[str, Any], ctx: CallContext) -> Opaque:
        return Opaque()

    async def noisy(args: dict[str, Any], ctx: CallContext) -> str:
        raise ToolError("e" * 3960 + SECRET + "E" * 100_000)

    sink = MemorySink()
    spool = tmp_path / "spool"
    async with Kernel(
        events_sink=sink,
        posture=Posture.ALLOW_ALL,
        secrets=[SECRET],
        output_cap_bytes=cap,
        spool_dir=spool,
    ) as kernel:
        for name, fn in (("big", big), ("opaque", opaque), ("noisy", noisy)):
            kernel.register(tool(name, fn))
        value = await kernel.call("big", {})
        await kernel.call("opaque", {})
        failed = await kernel.invoke("noisy", {})
    assert "ringfence cut" in value and not leaks(value)
    (spooled,) = spool.iterdir()
    assert spooled.read_text() == result_text.replace(SECRET, MARKER)  # whole, redacted
    assert failed.error is not None and not leaks(failed.error.message)
    assert len(failed.error.message.encode()) <= 8 * 1024  # error messages are capped too
    log = "\n".join(sink.lines)
    assert not leaks(log), [line for line in sink.lines if leaks(line)]
    # Each cut fell inside the redaction marker, never inside the secret.
    assert value.startswith("r" * (cap // 2 - 7) + MARKER[:7])
    assert failed.error.message.startswith("e" * 3960 + MARKER[:8])


def test_cap_text_redacts_before_it_cuts_and_bounds_the_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ringfence.runtime._output as caps

    text = "a" * 95 + SECRET + "b" * 300
    capped = cap_text(text, 200, tmp_path, redact=lambda t: t.replace(SECRET, MARKER))
    assert not leaks(capped.text) and capped.truncated
    assert Path(capped.spool_path or "").read_text() == text.replace(SECRET, MARKER)

    monkeypatch.setattr(caps, "MAX_SPOOL_BYTES", 100)
    capped = cap_text("c" * 500, 50, tmp_path)
    spooled = Path(capped.spool_path or "").read_text()
    assert spooled.startswith("c" * 100 + "\n[… ringfence kept the first 100 of 500 bytes")


# -- CallContext.emit -----------------------------------------------------------------------


async def test_emit_refuses_the_records_own_fields_and_the_kernels_kinds() -> None:
    async def clashing(args: dict[str, Any], ctx: CallContext) -> str:
        ctx.emit("bridge_refused_call", tool="run_tool_script", detail="nested")
        return "unreachable"

    async def faking(args: dict[str, Any], ctx: CallContext) -> str:
        ctx.emit("finished", output="all good")
        return "unreachable"

    async def polite(args: dict[str, Any], ctx: CallContext) -> str:
        ctx.emit("bridge_refused_call", nested_tool="run_tool_script")
        return "ok"

    sink = MemorySink()
    async with Kernel(events_sink=sink, posture=Posture.ALLOW_ALL) as kernel:
        for name, fn in (("clashing", clashing), ("faking", faking), ("polite", polite)):
            kernel.register(tool(name, fn))
        clash = await kernel.invoke("clashing", {})
        fake = await kernel.invoke("faking", {})
        assert await kernel.call("polite", {}) == "ok"
    assert clash.error is not None and clash.error.code == "tool_error"
    assert "tool is filled in by the kernel" in clash.error.message
    assert fake.error is not None and "written by the kernel only" in fake.error.message
    records = sink.records()
    assert Counter(r["kind"] for r in records)["finished"] == 1  # polite's only
    assert_one_outcome_each(records)
    refused = [r for r in records if r["kind"] == "bridge_refused_call"]
    assert refused == [{**refused[0], "tool": "polite", "nested_tool": "run_tool_script"}]


async def test_an_mcp_client_cancelling_a_call_through_serve_ends_in_cancelled(
    tmp_path: Path,
) -> None:
    """``notifications/cancelled`` from a real SDK client to ``python -m ringfence serve``."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    (tmp_path / "ws").mkdir()
    events = tmp_path / "events.jsonl"
    argv = ["-m", "ringfence", "serve", "--workspace", str(tmp_path / "ws"),
            "--posture", "unrestricted", "--events", str(events)]  # fmt: skip
    env = {"RINGFENCE_HOME": os.environ["RINGFENCE_HOME"], "PATH": os.environ["PATH"]}
    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    with (tmp_path / "serve.stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", cache=None) as client:
            with trio.CancelScope() as scope:  # the SDK sends notifications/cancelled
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.call_tool, "run_shell", {"command": "sleep 30"})
                    await wait_until_started(events, 20, 0.02)
                    scope.cancel()
            assert scope.cancelled_caught
            # The server goes on serving after the cancellation.
            listed = await client.list_tools()
            assert any(t.name == "run_shell" for t in listed.tools)
    records = event_records(events)
    shell = [r for r in records if r.get("tool") == "run_shell"]
    assert [r["kind"] for r in shell][-1] == "cancelled", shell
    # Cancelled by the notification while the server ran on, not swept up at shutdown.
    assert shell[-1]["reason"] != "the kernel closed while the call was in flight"
    assert_one_outcome_each(records)
    result = cli("events", "verify", str(events), cwd=tmp_path)
    assert result.returncode == 0, result.stdout
