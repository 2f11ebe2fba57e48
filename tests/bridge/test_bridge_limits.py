"""The bridge's bounds, attacked through real runs: hostile peers, nesting, budgets, output.

Each attack runs against the real bridge of a real script run (a real runner
subprocess); the attacker is a separate process that connects to the run's
listener before the runner does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
from bridge_helpers import Ledger, events, kinds, register_tools, run

from ringfence.bridge import ScriptConfig, register_script_tool
from ringfence.bridge._channel import MAX_PENDING_HANDSHAKES, MAX_REFUSAL_EVENTS
from ringfence.bridge._launch import LaunchRequest, LocalLauncher
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import (
    ApprovalAnswer,
    Consequence,
    Kernel,
    Posture,
    ScriptedApprover,
    ToolSpec,
)
from ringfence.runtime._redact import MARKER

YES = ScriptedApprover(lambda r: ApprovalAnswer.once())
SCRIPT = 'print("working")\nresult = call_tool("peek", x="a")["args"]'

# -- hostile local peers -------------------------------------------------------------------

ATTACKER = textwrap.dedent(
    """
    import json, socket, sys, time

    kind, where = sys.argv[1], json.loads(sys.argv[2])

    def connect():
        if where[0] == "tcp":
            return socket.create_connection((where[1], where[2]))
        s = socket.socket(socket.AF_UNIX)
        s.connect(where[1])
        return s

    def frame(body, length=None):
        return (32 + (len(body) if length is None else length)).to_bytes(4, "big") + bytes(32) + body

    def deep(depth):
        return b'{"type":"hello","x":' + b"[" * depth + b"]" * depth + b"}"

    socks = [connect() for _ in range(32 if kind == "silent" else 1)]
    print("ready", flush=True)
    try:
        if kind == "deep":  # 100,000 levels: the original crash
            socks[0].sendall(frame(deep(100_000)))
        elif kind == "deep_small":  # 1,900 levels in a frame under 4 KiB
            socks[0].sendall(frame(deep(1_900)))
        elif kind == "huge":  # 12 MiB announced and sent
            socks[0].sendall(frame(b"", 12 * 1024 * 1024))
            socks[0].sendall(b"[" * (12 * 1024 * 1024))
    except OSError:
        pass  # the host hung up: refused
    time.sleep(60)
    """
)


class AttackedLauncher(LocalLauncher):
    """Starts an attacker process against the run's listener, then the real runner."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.attacker: trio.Process | None = None

    async def launch(self, request: LaunchRequest) -> Any:
        address = json.dumps(request.listener.address)
        self.attacker = await trio.lowlevel.open_process(
            [sys.executable, "-c", ATTACKER, self.kind, address], stdout=-1
        )
        assert self.attacker.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await self.attacker.stdout.receive_some(64)
            assert chunk, "the attacker did not start"
            line += chunk
        assert line == b"ready\n"
        if self.kind != "silent":
            await trio.sleep(0.2)  # the frame is on its way before the runner exists
        return await super().launch(request)

    async def stop(self) -> None:
        if self.attacker is not None:
            self.attacker.kill()
            await self.attacker.wait()


async def _attacked_run(kind: str, ledger: Ledger, **config: Any) -> tuple[Kernel, Any]:
    launcher = AttackedLauncher(kind)
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        try:
            result = await run(kernel, SCRIPT, launcher=launcher, **config)
        finally:
            await launcher.stop()
    return kernel, result


def _refused(kernel: Kernel) -> list[dict[str, Any]]:
    return kinds(kernel, "bridge_refused")


@pytest.mark.parametrize(
    ("kind", "reason", "detail"),
    [
        ("deep", "handshake_oversized", "exceeds the 4096-byte limit before the handshake"),
        ("deep_small", "handshake_oversized", "deeper than the 64-level limit"),
        ("huge", "handshake_oversized", "exceeds the 4096-byte limit before the handshake"),
    ],
)
async def test_a_hostile_frame_before_the_handshake_is_refused_and_the_run_completes(
    ledger: Ledger, kind: str, reason: str, detail: str
) -> None:
    """Over TCP (no peer credentials) the frame reaches the handshake: refused unparsed."""
    kernel, result = await _attacked_run(kind, ledger, transport="tcp")
    assert result.status == "ok", result.error
    assert result.result == {"x": "a"} and result.output == "working\n"
    assert ledger.names() == ["peek"]  # the runner's call, and nothing else
    refused = _refused(kernel)
    assert [(r["reason"], detail in r["detail"]) for r in refused] == [(reason, True)]
    assert kinds(kernel, "script_finished")[0]["refused_peers"] == 1


async def test_silent_connections_cannot_keep_the_runner_out_over_tcp(ledger: Ledger) -> None:
    kernel, result = await _attacked_run("silent", ledger, transport="tcp")
    assert result.status == "ok", result.error
    assert result.result == {"x": "a"}
    assert ledger.names() == ["peek"]
    refused = _refused(kernel)
    evicted = 32 - MAX_PENDING_HANDSHAKES + 1  # the runner's arrival evicts one more
    unfinished = MAX_REFUSAL_EVENTS - evicted  # the rest, closed when the run ended
    assert [r["reason"] for r in refused] == (
        ["evicted"] * evicted + ["handshake_unfinished"] * unfinished + ["many"]
    )
    assert kinds(kernel, "script_finished")[0]["refused_peers"] == 32


async def test_by_default_foreign_peers_are_refused_by_credentials(ledger: Ledger) -> None:
    """The default transport is a Unix socket: a foreign pid never gets to the handshake,
    and 32 refusals make a bounded number of events."""
    kernel, result = await _attacked_run("silent", ledger)
    assert result.status == "ok", result.error
    assert result.result == {"x": "a"}
    assert ledger.names() == ["peek"]
    assert kinds(kernel, "script_started")[0]["address"][0] == "unix"
    refused = _refused(kernel)
    assert len(refused) == MAX_REFUSAL_EVENTS + 1  # then one summary, not one per peer
    assert {r["reason"] for r in refused[:-1]} == {"not_the_child"}
    assert refused[-1]["reason"] == "many"
    assert "is not the runner" in refused[0]["detail"]
    assert kinds(kernel, "script_finished")[0]["refused_peers"] == 32


async def test_a_deep_frame_over_the_default_socket_is_never_read(ledger: Ledger) -> None:
    kernel, result = await _attacked_run("deep", ledger)
    assert result.status == "ok", result.error
    assert ledger.names() == ["peek"]
    assert [r["reason"] for r in _refused(kernel)] == ["not_the_child"]


# -- nesting from inside the script ---------------------------------------------------------


async def test_too_deep_arguments_fail_the_call_and_the_script_goes_on() -> None:
    seen: list[Any] = []

    async def echo(args: dict, ctx: Any) -> Any:
        seen.append(args)
        return "ran"

    script = textwrap.dedent(
        """
        v = []
        for i in range(100):
            v = [v]
        try:
            call_tool("echo", v=v)
            code = None
        except ToolError as e:
            code = [e.code, e.message]
        result = [code, call_tool("echo", v=[[1]])]
        """
    )
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        kernel.register(
            ToolSpec("echo", "e", {"type": "object"}, echo, consequence=Consequence.READ)
        )
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    (code, message), value = result.result
    assert code == "invalid_arguments" and "64-level limit" in message
    assert value == "ran"
    assert seen == [{"v": [[1]]}]  # the deep call never reached the host's tools


async def test_a_too_deep_result_fails_the_call_and_the_script_goes_on() -> None:
    async def deep(args: dict, ctx: Any) -> Any:
        value: Any = 0
        for _ in range(100):
            value = [value]
        return value

    script = textwrap.dedent(
        """
        try:
            call_tool("deep")
        except ToolError as e:
            result = [e.code, e.message]
        """
    )
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        kernel.register(
            ToolSpec("deep", "d", {"type": "object"}, deep, consequence=Consequence.READ)
        )
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    code, message = result.result
    assert code == "tool_error" and "cannot cross the bridge" in message and "64-level" in message


# -- nested scripts ---------------------------------------------------------------------------


async def test_a_nested_run_tool_script_is_denied_and_the_script_goes_on(ledger: Ledger) -> None:
    """Through the real tool: the refusal is `denied`, nothing nested starts, the run completes."""
    script = textwrap.dedent(
        """
        try:
            call_tool("run_tool_script", script="call_tool('launch')")
            code = None
        except ToolError as e:
            code = [e.code, e.message]
        result = [code, call_tool("peek")["tool"]]
        """
    )
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.ok, outcome.error
    (code, message), peeked = outcome.value["result"]
    assert code == "denied" and "cannot be called from inside a script" in message
    assert peeked == "peek"
    assert ledger.names() == ["peek"]  # `launch` never ran
    assert len(kinds(kernel, "script_started")) == 1  # nothing nested started
    refused = kinds(kernel, "bridge_refused_call")
    assert len(refused) == 1
    assert refused[0]["called"] == SCRIPT_TOOL and refused[0]["call_id"] == outcome.call_id
    calls = outcome.value["calls"]
    assert [c["tool"] for c in calls] == [SCRIPT_TOOL, "peek"]
    assert calls[0]["error"] == "denied" and calls[1]["ok"] is True


# -- the call budget --------------------------------------------------------------------------


BUDGET_SCRIPT = textwrap.dedent(
    """
    codes = []
    for i in range(40):
        try:
            call_tool("peek", x=str(i))
            codes.append("ok")
        except ToolError as e:
            codes.append(e.code)
            last = e.message
    result = [codes, last]
    """
)


async def test_calls_past_the_budget_are_denied_and_cost_nothing(ledger: Ledger) -> None:
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": BUDGET_SCRIPT, "max_calls": 3})
    assert outcome.ok, outcome.error
    codes, message = outcome.value["result"]
    assert codes == ["ok"] * 3 + ["denied"] * 37
    assert "budget of 3 calls" in message and "max_calls=3" in message
    assert ledger.names() == ["peek"] * 3
    assert len(outcome.value["calls"]) == 3  # the result does not grow past the budget
    assert len(kinds(kernel, "started")) == 4  # the script and its 3 calls
    assert len(kinds(kernel, "script_call_budget")) == 1  # one event, not one per call
    finished = kinds(kernel, "script_finished")[0]
    assert finished["calls"] == 3 and finished["refused_over_budget"] == 37


async def test_the_operator_sets_the_budget_and_its_ceiling(ledger: Ledger) -> None:
    assert ScriptConfig().max_calls == 10_000
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, ledger)
        spec = register_script_tool(kernel, config=ScriptConfig(max_calls=2), spare=False)
        assert spec.input_schema["properties"]["max_calls"]["maximum"] == 2
        over = await kernel.invoke(SCRIPT_TOOL, {"script": BUDGET_SCRIPT, "max_calls": 5})
        default = await kernel.invoke(SCRIPT_TOOL, {"script": BUDGET_SCRIPT})
    assert over.error.code == "invalid_arguments" and over.error.field == "max_calls"
    assert default.ok, default.error
    assert default.value["result"][0] == ["ok"] * 2 + ["denied"] * 38
    assert ledger.names() == ["peek"] * 2


async def test_a_long_runs_calls_are_summarized_and_no_secret_survives(ledger: Ledger) -> None:
    """3,000 calls whose records and results hold a secret (the name of a tool the script
    calls, an echoed argument): the value keeps the first and last 100 records and
    summarizes the rest, and the secret is nowhere in it or in the event stream."""
    secret = "sk-live-Qz7kPqL9mWvB2nR4"

    async def echo(args: dict, ctx: Any) -> str:
        return "echo " + args["x"]

    script = textwrap.dedent(
        f"""
        S = {secret!r}
        seen = []
        for i in range(1500):
            seen.append(call_tool("echo", x=S + str(i)))
            try:
                call_tool(S, x="a")
            except ToolError as e:
                seen.append(e.code)
        result = seen[-4:]
        """
    )
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    async with Kernel(approver=YES, posture=Posture.UNRESTRICTED, secrets=[secret]) as kernel:
        kernel.register(ToolSpec("echo", "echo", schema, echo, consequence=Consequence.READ))
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.ok, outcome.error
    value = outcome.value
    assert value["result"] == [f"echo {MARKER}1498", "not_found", f"echo {MARKER}1499", "not_found"]
    calls = value["calls"]
    assert len(calls) == 200
    assert [c["tool"] for c in calls[:2]] == ["echo", MARKER]
    omitted = value["calls_omitted"]
    assert omitted["count"] == 2800 and omitted["after"] == 100
    rows = {(r["tool"], r["outcome"]): r["count"] for r in omitted["by_tool_and_outcome"]}
    assert rows == {("echo", "ok"): 1400, (MARKER, "not_found"): 1400}
    assert secret not in json.dumps(value)
    assert _leaks(json.dumps(value), secret) == []
    assert _leaks(json.dumps(events(kernel)), secret) == []
    assert kinds(kernel, "script_finished")[0]["calls"] == 3000  # the run itself kept all


# -- output: redact first, cut after; the spool holds it all -------------------------------

SECRET = "QzX7kPqL9mWvB2nR4tYhJ8c"  # 23 characters: with "-", a 24-byte period


def _leaks(text: str, secret: str = SECRET) -> list[str]:
    return [secret[i : i + 6] for i in range(len(secret) - 5) if secret[i : i + 6] in text]


def _spool_of(output: str) -> Path:
    match = re.search(r"full output in (\S+) …", output)
    assert match, output
    return Path(match.group(1))


async def test_a_secret_across_the_cut_leaves_no_part_behind(tmp_path: Path) -> None:
    """Secrets everywhere, so every cut (head end, tail start) falls inside one."""
    script = f'print(("{SECRET}" + "-") * 400)'
    async with Kernel(
        approver=YES, secrets=[SECRET], output_cap_bytes=1024, spool_dir=tmp_path
    ) as kernel:
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.ok, outcome.error
    output = outcome.value["output"]
    assert "ringfence cut" in output and len(output.encode()) <= 1024
    assert output.startswith(MARKER + "-") and output.endswith("-\n")
    assert _leaks(output) == []
    assert _leaks(json.dumps(events(kernel))) == []
    spool = _spool_of(output)
    assert spool.read_text() == (MARKER + "-") * 400 + "\n"  # all of it, redacted
    assert spool.stat().st_mode & 0o777 == 0o600
    assert list(tmp_path.iterdir()) == [spool]  # one spool file, not one per layer


async def test_a_secret_registered_after_it_was_printed_is_redacted_in_the_spool(
    tmp_path: Path,
) -> None:
    late = "late-Secret-9f8e7d6c5b4a"

    async def take(args: dict, ctx: Any) -> str:
        return "taken"

    script = textwrap.dedent(
        f"""
        print("{late}")
        print("x" * 5000)
        call_tool("take", env={{"API_TOKEN": "{late}"}})
        print("{late}")
        """
    )
    async with Kernel(approver=YES, output_cap_bytes=1024, spool_dir=tmp_path) as kernel:
        kernel.register(
            ToolSpec("take", "t", {"type": "object"}, take, consequence=Consequence.READ)
        )
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.ok, outcome.error
    output = outcome.value["output"]
    assert _leaks(output, late) == []
    spool = _spool_of(output).read_text()
    assert _leaks(spool, late) == []
    assert spool == f"{MARKER}\n{'x' * 5000}\n{MARKER}\n"


async def test_the_spool_holds_the_full_output_up_to_its_disk_cap(tmp_path: Path) -> None:
    script = 'for i in range(30000):\n    print("line", i)'
    expected = "".join(f"line {i}\n" for i in range(30000))  # 278,890 bytes
    async with Kernel(output_cap_bytes=2048, spool_dir=tmp_path / "full") as kernel:
        whole = await run(kernel, script)
    async with Kernel(output_cap_bytes=2048, spool_dir=tmp_path / "capped") as kernel:
        capped = await run(kernel, script, output_spool_bytes=10_000)
    assert whole.output.startswith("line 0\n") and whole.output.endswith("line 29999\n")
    assert len(whole.output.encode()) <= 2048
    assert _spool_of(whole.output).read_text() == expected
    # Past the disk cap: the first bytes, and a line saying what was not kept.
    match = re.search(
        r"the first 10000 bytes are in (\S+) \(the 10000-byte spool cap\)", capped.output
    )
    assert match, capped.output
    kept = Path(match.group(1)).read_text()
    assert kept.startswith(expected[:10_000])
    assert f"{len(expected) - 10_000} more bytes of script output not kept" in kept
    assert capped.output.endswith("line 29999\n")


async def test_short_output_writes_no_spool(tmp_path: Path) -> None:
    async with Kernel(output_cap_bytes=2048, spool_dir=tmp_path) as kernel:
        result = await run(kernel, 'print("short")')
    assert result.output == "short\n"
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


async def test_a_forged_batch_larger_than_the_budget_stops_the_run_and_runs_nothing(
    ledger: Ledger,
) -> None:
    """A runner that sends more calls in one batch than the run may make is cut off at once."""
    from bridge_helpers import RawClient

    from ringfence.bridge._channel import BridgeListener
    from ringfence.bridge._session import ScriptSession
    from ringfence.bridge._wire import ProtocolError

    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        listener = await BridgeListener.open("tcp")
        run_ = ScriptSession(
            kernel, ScriptConfig(max_calls=5), lambda k, **d: None, "t", "p", lambda: None
        )
        errors: list[BaseException] = []

        async def serve() -> None:
            try:
                await run_.serve("pass")
            except ProtocolError as exc:
                errors.append(exc)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_.admission.accept_loop, listener, nursery)
                nursery.start_soon(serve)
                child = await RawClient.connect(listener.address)
                await child.handshake(run_.admission.secret)
                await child.send({"type": "sandboxed", "report": {}})
                script = await child.recv()
                assert script is not None and script["type"] == "script"
                assert script["max_calls"] == 5
                calls = [{"id": i, "tool": "peek", "arguments": {}} for i in range(6)]
                await child.send({"type": "calls", "calls": calls})
                with trio.fail_after(10):
                    while not errors:
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            await child.stream.aclose()
            run_.admission.channel.close()
        finally:
            listener.aclose_sync()
    assert errors[0].reason == "oversized"
    assert "larger than the run's budget of 5" in errors[0].message
    assert ledger.runs == []


async def test_a_parallel_batch_larger_than_the_budget_is_refused_in_the_script(
    ledger: Ledger,
) -> None:
    script = """
try:
    parallel(tools.peek(x=str(i)) for i in range(4))
except ToolError as e:
    result = [e.code, e.field, e.decision]
"""
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script, max_calls=3)
    assert result.result == ["denied", "max_calls", None]
    assert ledger.runs == [] and result.calls == ()


def test_a_temporary_directory_too_long_for_the_bridge_socket_is_named(tmp_path: Path) -> None:
    """``run-script`` with a TMPDIR whose bridge socket address passes the 107 bytes a Unix
    socket address holds said ``OSError: AF_UNIX path too long``; it names the limit and
    TMPDIR now, and leaves no bridge directory behind."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "empty.py"
    script.write_text("print('ran')\n")
    done = subprocess.run(
        [sys.executable, "-m", "ringfence", "run-script", str(script), "--workspace", str(ws),
         "--posture", "unrestricted", "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(deep)},
        check=False,
    )  # fmt: skip
    error = json.loads(done.stdout)["error"]
    assert done.returncode != 0 and error["code"] == "unavailable", done.stdout
    assert "107" in error["message"] and "TMPDIR" in error["message"], error
    assert "Traceback" not in done.stderr and list(deep.iterdir()) == []


# -- how many runs are alive at once ------------------------------------------------------


async def test_scripts_started_together_run_at_most_max_concurrent_runs_at_once(
    ledger: Ledger,
) -> None:
    """The attack: one model turn (or several MCP clients) starts many scripts at once under
    a posture that lets them run. Each runner may use ``limits.memory_bytes``; at most
    ``max_concurrent_runs`` are alive together, the others wait for a slot and then run.

    Until 2026-12-07 every one started at once: 12 scripts, 12 runners alive (12 GiB
    allowed), and nothing stopped a hundred.
    """
    from bridge_helpers import runner_processes

    from ringfence.bridge._config import DEFAULT_MAX_CONCURRENT_RUNS

    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel, config=ScriptConfig(warm_runners=0))
        n = DEFAULT_MAX_CONCURRENT_RUNS + 3
        outcomes: list[Any] = []
        peak = 0

        async def one(i: int) -> None:
            script = f'import time\ntime.sleep(1.5)\ncall_tool("touch", x="{i}")\nresult = {i}'
            outcomes.append(await kernel.invoke(SCRIPT_TOOL, {"script": script}))

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
            while len(outcomes) < n:
                peak = max(peak, len(runner_processes()))
                await trio.sleep(0.05)
        assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
        assert sorted(o.value["result"] for o in outcomes) == list(range(n))
        assert 0 < peak <= DEFAULT_MAX_CONCURRENT_RUNS, peak
        waiting = kinds(kernel, "script_waiting")
        assert len(waiting) >= n - DEFAULT_MAX_CONCURRENT_RUNS
        assert waiting[0]["max_concurrent_runs"] == DEFAULT_MAX_CONCURRENT_RUNS
    assert sorted(args["x"] for name, args in ledger.runs) == sorted(str(i) for i in range(n))


async def test_a_run_that_finds_no_slot_within_its_timeout_is_unavailable_and_runs_nothing(
    ledger: Ledger,
) -> None:
    """A run waiting for a slot past its own timeout is refused, naming the field, and
    nothing of it runs: no runner starts, its calls are never made."""
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel, config=ScriptConfig(warm_runners=0, max_concurrent_runs=1))
        late: list[Any] = []

        async def waiting() -> None:
            await trio.sleep(0.5)  # the long run holds the one slot by now
            script = 'call_tool("touch", x="late")'
            late.append(await kernel.invoke(SCRIPT_TOOL, {"script": script, "timeout_seconds": 1}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting)
            long = await kernel.invoke(
                SCRIPT_TOOL, {"script": 'import time\ntime.sleep(3)\ncall_tool("touch", x="long")'}
            )
        assert long.ok, long.error
        (refused,) = late
        assert refused.error is not None and refused.error.code == "unavailable"
        assert refused.error.field == "max_concurrent_runs"
        assert "max_concurrent_runs" in refused.error.message
        assert len(kinds(kernel, "script_started")) == 1
    assert ledger.runs == [("touch", {"x": "long"})]
