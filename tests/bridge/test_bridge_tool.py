"""The run_tool_script tool, its wiring in create_kernel, and ``ringfence run-script``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio
from bridge_helpers import Ledger, kinds, register_tools
from cli_helpers import ringfence_process
from kernel_helpers import event_records

from ringfence._embed import create_kernel
from ringfence.bridge import ScriptConfig, register_script_tool
from ringfence.bridge._launch import LocalLauncher
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import ApprovalAnswer, Consequence, Kernel, Posture, ScriptedApprover
from ringfence.runtime.policy._decide import decide

YES = ScriptedApprover(lambda r: ApprovalAnswer.once())


def test_the_tool_is_irreversible_residual_and_composes_dry_runs() -> None:
    kernel = Kernel()
    spec = register_script_tool(kernel)
    assert kernel.registry.get(SCRIPT_TOOL) is spec
    assert spec.consequence is Consequence.IRREVERSIBLE
    assert spec.residual and spec.composes_dry_run
    for posture in Posture:
        verdict = decide(spec, posture, kernel.rules).verdict.value
        assert verdict == ("allow" if posture is Posture.UNRESTRICTED else "ask")


async def test_it_asks_first_and_a_refusal_starts_nothing() -> None:
    async with Kernel(posture=Posture.ALLOW_ALL) as kernel:  # headless approver
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": "x = 1"})
    assert outcome.error.code == "denied"
    assert outcome.decision.rule == "approver:residual"
    assert kinds(kernel, "script_started") == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"script": "x = 1", "timeout_seconds": 601}, "timeout_seconds"),
        ({"script": "x = 1", "timeout_seconds": 0}, "timeout_seconds"),
        # NaN (JSON parsers take it) passes every bound; it ended in a ValueError naming nothing
        ({"script": "x = 1", "timeout_seconds": float("nan")}, "timeout_seconds"),
        ({"script": ""}, "script"),
        ({}, "script"),
        ({"script": "x = 1", "sandbox": "none"}, "sandbox"),  # not the model's choice
    ],
)
async def test_bad_arguments_are_refused_by_field(arguments: dict, field: str) -> None:
    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, arguments)
    assert outcome.error.code == "invalid_arguments"
    assert outcome.error.field == field
    assert kinds(kernel, "script_started") == []


async def test_ok_value_has_output_result_and_calls(ledger: Ledger) -> None:
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel)
        outcome = await kernel.invoke(
            SCRIPT_TOOL,
            {"script": 'print("hi")\nresult = call_tool("peek")["tool"]', "timeout_seconds": 600},
        )
    assert outcome.ok, outcome.error
    assert outcome.value["status"] == "ok"
    assert outcome.value["output"] == "hi\n"
    assert outcome.value["result"] == "peek"
    assert [c["tool"] for c in outcome.value["calls"]] == ["peek"]
    started = kinds(kernel, "script_started")[0]
    assert started["call_id"] == outcome.call_id and started["cpu_seconds"] == 601


async def test_a_script_error_is_a_tool_error_with_its_traceback() -> None:
    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": 'print("before")\n\n{}["k"]'})
    assert outcome.error.code == "tool_error"
    assert outcome.error.message == "the script raised KeyError at script line 3: 'k'"
    details = outcome.error.details
    assert details["output"] == "before\n"
    assert "script line 3" in details["error"]["traceback"]


async def test_a_compile_error_names_the_script_field() -> None:
    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": "x.__dict__"})
    assert outcome.error.code == "invalid_arguments"
    assert outcome.error.field == "script"
    assert "__dict__" in outcome.error.message


async def test_a_timeout_kills_the_script_and_keeps_its_output() -> None:
    script = 'print("started")\nwhile True:\n    pass'
    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script, "timeout_seconds": 0.5})
    assert outcome.error.code == "timeout"
    assert outcome.error.field == "timeout_seconds"
    assert outcome.error.details["output"] == "started\n"
    assert kinds(kernel, "script_finished")[-1]["status"] == "timeout"


async def test_secrets_are_redacted_in_values_and_error_details() -> None:
    secret = "hunter2-very-secret"

    async def leak(args, ctx):
        return f"token={secret}"

    async with Kernel(approver=YES, secrets=[secret]) as kernel:
        from ringfence.runtime import ToolSpec

        kernel.register(
            ToolSpec("leak", "l", {"type": "object"}, leak, consequence=Consequence.READ)
        )
        register_script_tool(kernel)
        ok = await kernel.invoke(SCRIPT_TOOL, {"script": 'print(call_tool("leak"))\nresult = "x"'})
        bad = await kernel.invoke(
            SCRIPT_TOOL, {"script": 'v = call_tool("leak")\nprint(v)\nraise ValueError(v)'}
        )
    # The tool's own result is redacted before the script sees it, and again on the way out.
    assert secret not in json.dumps(ok.value) and secret not in json.dumps(bad.error.to_dict())
    assert secret not in "\n".join(kernel.events._sink.lines)


async def test_create_kernel_registers_it(tmp_path) -> None:
    async with create_kernel(roots=[tmp_path], approver=YES) as kernel:
        assert SCRIPT_TOOL in kernel.registry
        ok = await kernel.invoke(SCRIPT_TOOL, {"script": "result = 1"})
    assert ok.value["result"] == 1


async def test_a_backend_without_a_script_launcher_is_unavailable() -> None:
    from ringfence.bridge._tool import unavailable_backend

    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel, backend_session_factory=unavailable_backend("remote"))
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": "result = 1"})
    assert outcome.error.code == "unavailable"
    assert "'remote'" in outcome.error.message
    assert kinds(kernel, "script_started") == []


def _cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    posture = [k for k in os.environ if k.startswith("RINGFENCE_POSTURE")]
    return ringfence_process(*args, cwd=cwd, stdin=stdin, unset=posture)


def test_cli_run_script(tmp_path) -> None:
    script = tmp_path / "pipeline.py"
    script.write_text('print("line one")\nresult = {"n": 2}\n')
    human = _cli("run-script", str(script), "--approve", "yes", cwd=tmp_path)
    assert human.returncode == 0, human.stderr
    assert human.stdout == 'line one\n{\n  "n": 2\n}\n'
    log = tmp_path.with_name(f"{tmp_path.name}.events.jsonl")  # beside the workspace (the cwd)
    as_json = _cli(
        "run-script", str(script), "--approve", "yes", "--json", "--timeout", "30",
        "--events", str(log), cwd=tmp_path,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["result"]["result"] == {"n": 2}
    events = event_records(log)
    assert {"script_started", "script_sandbox", "script_finished"} <= {e["kind"] for e in events}


def test_cli_run_script_exit_codes(tmp_path) -> None:
    failing = tmp_path / "failing.py"
    failing.write_text("x = 1\nraise ValueError('no')\n")
    denied = _cli("run-script", str(failing), "--approve", "no", cwd=tmp_path)
    assert denied.returncode == 3
    error = _cli("run-script", str(failing), "--approve", "yes", cwd=tmp_path)
    assert error.returncode == 1
    assert "script line 2" in error.stderr
    assert (
        "ringfence: tool_error: the script raised ValueError at script line 2: no" in error.stderr
    )
    too_long = _cli(
        "run-script", str(failing), "--approve", "yes", "--timeout", "900", cwd=tmp_path
    )
    assert too_long.returncode == 2
    missing = _cli("run-script", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode == 2 and "cannot read the script" in missing.stderr


async def _warm_runners(n: int) -> list:
    """The live runners once there are ``n`` (the pool refills in the background)."""
    from bridge_helpers import runner_processes

    with trio.fail_after(30):
        while len(found := runner_processes()) != n:
            await trio.sleep(0.05)
    return found


async def _pool_ready(launcher: LocalLauncher, n: int) -> None:
    with trio.fail_after(30):
        while launcher.ready < n:
            await trio.sleep(0.02)


async def test_a_warm_runner_is_used_replaced_and_ended_with_its_launcher() -> None:
    from bridge_helpers import run, runner_processes

    launcher = LocalLauncher(warm=1)
    try:
        async with Kernel() as kernel:
            first = await run(kernel, "result = 1", launcher=launcher)
            assert first.result == 1
            await _pool_ready(launcher, 1)
            (spare,) = runner_processes()  # waiting for the next run
            second = await run(kernel, "result = 2", launcher=launcher)
            assert second.result == 2
            assert kinds(kernel, "script_started")[-1]["pid"] == spare.pid  # it ran there
            # A warm runner that died is replaced, not used.
            await _pool_ready(launcher, 1)
            (spare,) = runner_processes()
            spare.kill()
            spare.wait(5)
            third = await run(kernel, "result = 3", launcher=launcher)
            assert third.result == 3
            assert kinds(kernel, "script_started")[-1]["pid"] != spare.pid
            await _pool_ready(launcher, 1)
    finally:
        await launcher.aclose()
    assert runner_processes() == []  # closing the launcher ended the pool


async def test_the_tools_pool_starts_with_the_first_run_and_ends_with_the_kernel() -> None:
    from bridge_helpers import runner_processes

    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel, config=ScriptConfig(warm_runners=2))
        assert runner_processes() == []  # nothing starts before the first run
        assert (await kernel.invoke(SCRIPT_TOOL, {"script": "result = 1"})).ok
        await _warm_runners(2)
    assert runner_processes() == []  # closing the kernel ended the pool


async def test_concurrent_scripts_take_warm_runners_and_the_pool_refills() -> None:
    """k scripts started together find k warm runners: none starts an interpreter."""
    from bridge_helpers import run, runner_processes

    launcher = LocalLauncher(warm=3)
    try:
        async with Kernel() as kernel:
            await run(kernel, "pass", launcher=launcher)
            await _pool_ready(launcher, 3)
            warm = {p.pid for p in runner_processes()}
            results: list = []

            async def one(i: int) -> None:
                results.append(await run(kernel, f"result = {i}", launcher=launcher))

            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(one, i)
            assert sorted(r.result for r in results) == [0, 1, 2]
            used = {e["pid"] for e in kinds(kernel, "script_started")[-3:]}
            assert used == warm
            await _pool_ready(launcher, 3)
            assert not {p.pid for p in runner_processes()} & warm  # all new
    finally:
        await launcher.aclose()


BIG_RESULT = 'result = ["a" * 3000 + str(i) for i in range(400)]'  # each string under the cap
BIG_KEYS = 'result = {"k" * 3000 + str(i): i for i in range(400)}'  # the kernel caps no key
BIG_ERROR = 'raise ValueError(*["e" * 3000 + str(i) for i in range(400)])'
LONG_NAMES = """
for i in range(300):
    try:
        call_tool("t" * 3000 + str(i))
    except ToolError:
        pass
"""


@pytest.mark.parametrize("script", [BIG_RESULT, BIG_KEYS, BIG_ERROR, LONG_NAMES])
async def test_what_a_script_returns_is_bounded_by_the_output_cap(script: str, tmp_path) -> None:
    """The attack: a script's result, error or called tool names made of many pieces, each
    under the cap the kernel applies string by string, so the sum (1.2 MB here) would reach
    the model whole. The value stays within a few caps; a cut result says so, and the spool
    file its marker names holds all of it."""
    cap = 8192
    async with Kernel(approver=YES, output_cap_bytes=cap, spool_dir=tmp_path) as kernel:
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script, "max_calls": 300})
    shown = outcome.value if outcome.ok else outcome.error.to_dict()
    # the call records are bounded on their own: 200 kept, a name cut at 200 characters
    bound = 6 * cap + (200 * 600 if script == LONG_NAMES else 0)
    assert len(json.dumps(shown)) < bound, len(json.dumps(shown))
    if script in (BIG_RESULT, BIG_KEYS):
        assert "output cap" in outcome.value["result_cut"]
        spooled = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert any(
            ("a" * 3000 + "399") in p.read_text() or ("k" * 3000 + "399") in p.read_text()
            for p in spooled
        )
    if script == LONG_NAMES:
        assert outcome.ok and len(kinds(kernel, "proposed")) >= 300  # each one judged


async def test_a_script_that_exhausts_its_memory_is_told_the_limit() -> None:
    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": 'x = "a" * 10**10'})
    assert outcome.error is not None and outcome.error.code == "tool_error"
    assert "MemoryError" in outcome.error.message
    assert "memory_bytes" in outcome.error.message and str(1024**3) in outcome.error.message


async def test_a_script_cannot_flood_the_event_stream_with_big_arguments(ledger: Ledger) -> None:
    """The attack: every call is recorded with its arguments, and a script builds a megabyte
    for free; 80 calls of 1 MB each would add 80 MB to the event stream in one run (at
    600 s, gigabytes). Past the run's byte budget (max_call_bytes, 64 MiB by default) the
    calls are refused, named, and not recorded."""
    script = """
junk = "x" * 1_000_000
refused = []
for i in range(80):
    try:
        call_tool("peek", junk=junk)
    except ToolError as exc:
        refused.append(exc.field)
result = refused
"""
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script, "timeout_seconds": 120})
        proposed = [e for e in kinds(kernel, "proposed") if e["tool"] == "peek"]
        budget = kinds(kernel, "script_call_bytes_budget")
        finished = kinds(kernel, "script_finished")
    assert outcome.ok, outcome.error
    # peek refuses the argument itself (invalid_arguments), after recording it whole
    refused = [field for field in outcome.value["result"] if field == "max_call_bytes"]
    assert refused, outcome.value["result"]
    assert len(proposed) + len(refused) == 80
    assert len(proposed) <= 64 * 1024 * 1024 // 1_000_000
    assert len(budget) == 1 and budget[0]["max_call_bytes"] == 64 * 1024 * 1024
    assert finished[-1]["refused_over_bytes"] == len(refused)


DEEP = "x = []\nfor i in range(100000):\n    x = [x]\n"
UNSHOWABLE = {
    "a huge int as the result": ("result = 10**100000", "ok"),
    "a huge int in an error": ("raise ValueError(10**100000)", "ValueError"),
    "a deep list as the result": (DEEP + "result = x", "ok"),
    "a deep list in an error": (DEEP + "raise ValueError(x)", "ValueError"),
    "a lone surrogate as the result": ("result = chr(0xd800)", "ok"),
    "a lone surrogate in an error": ("raise ValueError(chr(0xd800))", "ValueError"),
    "a lone surrogate as a key": ("result = {chr(0xdfff): 1}", "ok"),
}


@pytest.mark.parametrize("name", list(UNSHOWABLE))
async def test_a_value_the_runner_cannot_show_never_ends_the_runner(name: str) -> None:
    """The attack: a result or an exception that cannot be printed or encoded (int past
    CPython's digit limit, a list deeper than the recursion limit, a lone surrogate) ended
    the runner with its own traceback (host paths) in place of the script's outcome, and the
    calls the script had made were not reported. The outcome is the script's, with its calls."""
    source, expected = UNSHOWABLE[name]
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, Ledger())
        register_script_tool(kernel)
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": 'call_tool("peek")\n' + source, "timeout_seconds": 60}
        )
    shown = json.dumps(outcome.value if outcome.ok else outcome.error.to_dict())
    assert "_runner.py" not in shown and "Traceback (most recent call last):\n  File" not in shown
    if expected == "ok":
        assert outcome.ok, outcome.error
        assert outcome.value["calls"][0]["tool"] == "peek"
    else:
        assert outcome.error.message.startswith(f"the script raised {expected}"), outcome.error
        assert outcome.error.details["calls"][0]["tool"] == "peek"


ITEMS_RAISE = """
class D(dict):
    def items(self):
        raise {exc}
result = [D(a=1)]
"""
ITEMS_SECOND = """
seen = []
class D(dict):
    def items(self):
        seen.append(1)
        if len(seen) > 1:
            raise KeyError("the second look")
        return [("a", 1)]
result = D(a=1)
"""
LINENO = """
import functools
def boom(self):
    raise {exc}
class E(SyntaxError):
    {body}
e = E("m")
e.filename = "<script>"
{extra}
raise e
"""
MISBEHAVING = {
    "a result whose items() raises KeyError": (ITEMS_RAISE.format(exc='KeyError("x")'), "ok"),
    "a result whose items() raises SystemExit": (ITEMS_RAISE.format(exc="SystemExit(0)"), "ok"),
    "a result that fails only when encoded again": (ITEMS_SECOND, "ok"),
    "a SyntaxError subclass with a text lineno": (
        LINENO.format(exc="1", body="pass", extra='e.lineno = "x"'),
        "E",
    ),
    "a SyntaxError subclass whose lineno raises KeyboardInterrupt": (
        LINENO.format(
            exc="KeyboardInterrupt", body="lineno = functools.cached_property(boom)", extra=""
        ),
        "E",
    ),
}


NEARLY_FULL = """
hold = []
try:
    while True:
        hold.append("h" * 1_000_000)
except MemoryError:
    pass
for i in range(15):
    hold.pop()
result = "y" * 10_000_000
"""


async def test_a_result_larger_than_the_memory_left_never_ends_the_runner() -> None:
    """The attack: a script fills its memory, leaves a little, and sets a result that needs
    more to encode. The runner's MemoryError while reading it ended the runner, and its
    traceback (this host's paths) was the tool's error. Now the result says it cannot be
    shown, and why."""
    from ringfence.bridge import ScriptLimits

    config = ScriptConfig(warm_runners=0, limits=ScriptLimits(memory_bytes=400 << 20))
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, Ledger())
        register_script_tool(kernel, config=config)
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": 'call_tool("peek")\n' + NEARLY_FULL, "timeout_seconds": 60}
        )
    shown = json.dumps(outcome.value if outcome.ok else outcome.error.to_dict())
    assert "_runner.py" not in shown and "Traceback (most recent call last):" not in shown
    assert outcome.ok, outcome.error
    assert outcome.value["calls"][0]["tool"] == "peek"
    assert outcome.value["result"] == "<str object that cannot be shown: MemoryError>"


RAISED_AGAIN = """
e = ValueError("the real error")
for i in range(1_000_000):
    try:
        if i % 2:
            raise e
        raise e
    except ValueError:
        pass
raise e
"""


async def test_an_exception_raised_a_million_times_is_still_the_scripts_error() -> None:
    """The attack: one exception object raised again and again grows its traceback by a frame
    each time; a million raises made the report 43 MB, over the bridge's frame, and the
    script's ValueError came back as "the script's result is too large to return". The
    traceback keeps the first and last entries (a repeated line counted), so the error is
    the script's, named, with its line."""
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, Ledger())
        register_script_tool(kernel)
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": 'call_tool("peek")\n' + RAISED_AGAIN, "timeout_seconds": 60}
        )
    assert outcome.error is not None
    assert outcome.error.message.startswith("the script raised ValueError"), outcome.error
    assert "the real error" in outcome.error.message
    trace = outcome.error.details["error"]["traceback"]
    assert "more frames not shown" in trace and len(trace) < 20_000, len(trace)
    assert outcome.error.details["calls"][0]["tool"] == "peek"


CALL_WHILE_ENCODED = """
class D(dict):
    def items(self):
        call_tool("peek", x="made while the outer call was encoded")
        return [("a", 1)]
try:
    call_tool("peek", x=D(a=1))
except ToolError as e:
    outer = e.code
result = outer
"""


async def test_a_call_made_while_a_calls_arguments_are_encoded_does_not_stop_the_run(
    ledger: Ledger,
) -> None:
    """The attack: encoding a call's arguments runs the script's code (a dict subclass's
    ``items``), which makes another call. That call took the sequence number the outer
    message already carried, the host refused the outer one as a replay and stopped the
    run ("the script bridge refused a message"), and the tool's value lost the calls made.
    Now the arguments are encoded before the message takes its number: both calls reach the
    Gate in order, each on its own (the outer one is refused by peek's schema)."""
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel)
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": CALL_WHILE_ENCODED, "timeout_seconds": 60}
        )
        refused = kinds(kernel, "bridge_refused")
    assert outcome.ok, outcome.error
    assert outcome.value["result"] == "invalid_arguments"
    assert [c["tool"] for c in outcome.value["calls"]] == ["peek", "peek"]
    assert ledger.runs == [("peek", {"x": "made while the outer call was encoded"})]
    assert not refused


@pytest.mark.parametrize("name", list(MISBEHAVING))
async def test_a_scripts_objects_that_misbehave_when_read_never_end_the_runner(name: str) -> None:
    """The attack: the runner reads the script's result and error after the script ended,
    and reading them runs the script's code (a dict subclass's ``items``, a
    ``cached_property``) or meets values of any type (``e.lineno = "x"``). What that raised
    ended the runner, whose traceback (this host's paths) became the tool's error and the
    calls made were not reported; a result that encoded once and failed the second time did
    the same. Now the outcome is the script's: a result as JSON or its text, an error named."""
    source, expected = MISBEHAVING[name]
    async with Kernel(approver=YES) as kernel:
        register_tools(kernel, Ledger())
        register_script_tool(kernel)
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": 'call_tool("peek")\n' + source, "timeout_seconds": 60}
        )
    shown = json.dumps(outcome.value if outcome.ok else outcome.error.to_dict())
    assert "_runner.py" not in shown and "Traceback (most recent call last):\n  File" not in shown
    assert "exited with code" not in shown, shown
    if expected == "ok":
        assert outcome.ok, outcome.error
        assert outcome.value["calls"][0]["tool"] == "peek"
        assert outcome.value["result"] in ("[{'a': 1}]", {"a": 1}), outcome.value
    else:
        assert outcome.error.message.startswith(f"the script raised {expected}"), outcome.error
        assert outcome.error.details["calls"][0]["tool"] == "peek"
