"""Code mode: the typed ``tools`` namespace, ``parallel`` calls, and errors a model can fix.

Every test runs real scripts in the real (strict) sandbox through the public
paths: ``run_script`` and ``kernel.invoke("run_tool_script")`` (the API),
``ringfence run-script`` (the CLI). ``serve`` is in tests/serve.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio
from bridge_helpers import Ledger, events, kinds, make_tool, register_tools, run
from cli_helpers import ringfence_process

from ringfence.bridge import ScriptConfig, register_script_tool
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import (
    ApprovalAnswer,
    ApprovalRequest,
    Consequence,
    Kernel,
    Posture,
    ScriptedApprover,
    ToolSpec,
)
from ringfence.runtime._plan import Plan


def script_calls(kernel: Kernel) -> list[dict]:
    """The ``proposed`` records of calls a script made."""
    return [e for e in kinds(kernel, "proposed") if e["origin"] == "script"]


# -- the typed API ---------------------------------------------------------------------


async def test_typed_calls_return_structured_results_through_the_gate(ledger: Ledger) -> None:
    script = """
got = tools.peek(x="a", n=2)
result = {"tool": got["tool"], "args": got["args"], "is_dict": isinstance(got, dict)}
"""
    async with Kernel(posture=Posture.ASK) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    assert result.result == {"tool": "peek", "args": {"x": "a", "n": 2}, "is_dict": True}
    assert ledger.runs == [("peek", {"x": "a", "n": 2})]
    (proposed,) = script_calls(kernel)
    assert proposed["tool"] == "peek" and proposed["arguments"] == {"x": "a", "n": 2}
    assert [c["tool"] for c in result.calls] == ["peek"]


@pytest.mark.parametrize(
    ("call", "field", "words"),
    [
        ('tools.peek(y="a")', "y", "is unknown (it takes: x, n)"),
        ("tools.peek(x=3)", "x", "must be a string, not int 3"),
        ("tools.peek(n=-1)", "n", "must be at least 0, not -1"),
        ('tools.peek("a")', None, "takes keyword arguments only (x=..., n=...)"),
    ],
)
async def test_argument_errors_are_raised_in_the_script_before_any_hop(
    call: str, field: str | None, words: str, ledger: Ledger
) -> None:
    script = f"""
try:
    {call}
except ToolError as e:
    result = [e.code, e.message, e.decision, e.tool]
"""
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    code, message, decision, tool = result.result
    assert (code, decision, tool) == ("invalid_arguments", None, "peek")
    assert words in message
    if field is not None:
        assert f"argument {field!r}" in message
    # Nothing crossed the bridge: no call reached the Gate, nothing ran, nothing recorded.
    assert script_calls(kernel) == [] and ledger.runs == [] and result.calls == ()


async def test_an_optional_argument_given_as_none_is_left_out(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, 'result = tools.peek(x="a", n=None)["args"]')
    assert result.result == {"x": "a"}
    assert script_calls(kernel)[0]["arguments"] == {"x": "a"}


async def test_the_gate_still_validates_what_the_script_check_lets_through(ledger: Ledger) -> None:
    """The script-side check is a first filter: the Gate decides (here: a pattern it alone checks)."""
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[a-z]+$"}},
        "additionalProperties": False,
    }

    async def fetch(args: dict, ctx: object) -> str:
        ledger.runs.append(("fetch", args))
        return "ok"

    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        kernel.register(ToolSpec("fetch", "fetch", schema, fetch, consequence=Consequence.READ))
        script = """
try:
    tools.fetch(code="NOT lower")
except ToolError as e:
    result = [e.code, e.field, e.decision is None]
"""
        result = await run(kernel, script)
    assert result.result == ["invalid_arguments", "code", True]
    assert len(script_calls(kernel)) == 1  # it crossed: the Gate refused it, and recorded it
    assert ledger.runs == []


async def test_mcp_style_names_become_namespaces_and_clashes_are_left_to_call_tool(
    ledger: Ledger,
) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        for name in ("mcp.files.read_text_file", "mcp.files.__read_resource", "a-b", "a_b"):
            kernel.register(make_tool(name, Consequence.READ, ledger))
        script = """
out = [tools.mcp.files.read_text_file(x="1")["tool"], tools.mcp.files.read_resource_(x="2")["tool"]]
try:
    tools.a_b
except AttributeError as e:
    out.append(str(e))
out.append(call_tool("a-b", x="3")["tool"])
result = out
"""
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    first, second, missing, by_name = result.result
    assert (first, second, by_name) == (
        "mcp.files.read_text_file",
        "mcp.files.__read_resource",
        "a-b",
    )
    assert "tools has no tool or namespace 'a_b'" in missing


# -- parallel --------------------------------------------------------------------------


async def test_fifty_parallel_calls_each_gated_one_denied_the_others_run(ledger: Ledger) -> None:
    """One call among 50 is refused: the other 49 run, the script sees one exception."""
    script = """
def call(i):
    return tools.launch(x=str(i)) if i == 17 else tools.peek(x=str(i))
try:
    parallel(call(i) for i in range(50))
    result = "no error"
except ToolError as e:
    ok = [r["args"]["x"] for r in e.results if not isinstance(r, ToolError)]
    result = {"code": e.code, "tool": e.tool, "rule": e.decision["rule"], "ok": ok,
              "failed": [i for i, r in enumerate(e.results) if isinstance(r, ToolError)]}
"""
    async with Kernel(posture=Posture.ASK) as kernel:  # headless: launch's ask is a no
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    assert result.result["code"] == "denied" and result.result["tool"] == "launch"
    assert result.result["rule"] == "approver:posture:ask"
    assert result.result["failed"] == [17]
    assert result.result["ok"] == [str(i) for i in range(50) if i != 17]
    assert sorted(args["x"] for _, args in ledger.runs) == sorted(result.result["ok"])
    # Each call was proposed, decided and recorded on its own; the records are in call order.
    proposed = script_calls(kernel)
    assert len(proposed) == 50 and len({p["call_id"] for p in proposed}) == 50
    decided = {e["call_id"] for e in kinds(kernel, "decided")}
    assert {p["call_id"] for p in proposed} <= decided
    assert [c["tool"] for c in result.calls] == ["launch" if i == 17 else "peek" for i in range(50)]
    assert [c["ok"] for c in result.calls] == [i != 17 for i in range(50)]


async def test_parallel_calls_run_at_once_bounded_by_max_parallel(ledger: Ledger) -> None:
    state = {"now": 0, "most": 0}

    async def slow(args: dict, ctx: object) -> int:
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await trio.sleep(0.05)
        state["now"] -= 1
        return int(args["n"])

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        kernel.register(ToolSpec("slow", "slow", schema, slow, consequence=Consequence.READ))
        result = await run(
            kernel, "result = parallel(tools.slow(n=i) for i in range(12))", max_parallel=4
        )
    assert result.result == list(range(12))
    assert state["most"] == 4


async def test_return_exceptions_puts_each_error_in_its_place(ledger: Ledger) -> None:
    script = """
out = parallel((call_tool(t, x="v") for t in ["peek", "nope", "peek"]), return_exceptions=True)
result = [r.code if isinstance(r, ToolError) else r["tool"] for r in out]
"""
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.result == ["peek", "not_found", "peek"]


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("parallel([tools.peek(x=p) for p in 'ab'])", "no square brackets"),
        ("parallel(tools.peek(x=tools.peek(x='a')['tool']) for p in 'ab')", "has no result yet"),
        ("parallel(parallel(tools.peek(x=p) for p in 'a') for q in 'b')", "inside another"),
    ],
)
async def test_misused_parallel_says_how_to_write_it(
    source: str, words: str, ledger: Ledger
) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, f"\n{source}\n")
    assert result.status == "error"
    assert result.error["type"] == "TypeError" and words in result.error["message"]
    assert result.error["line"] == 2


async def test_asks_of_a_parallel_batch_come_one_at_a_time_in_the_batch_order(
    ledger: Ledger,
) -> None:
    state = {"asking": 0, "overlap": False}

    class Person:
        requests: list[ApprovalRequest] = []

        async def approve(self, request: ApprovalRequest) -> ApprovalAnswer:
            state["asking"] += 1
            state["overlap"] |= state["asking"] > 1
            self.requests.append(request)
            await trio.sleep(0.02 * (5 - int(request.arguments["n"])))  # later ones faster
            state["asking"] -= 1
            if request.arguments["n"] == 3:
                return ApprovalAnswer.deny("not that one")
            return ApprovalAnswer.once()

    person = Person()
    script = "result = parallel((tools.touch(n=i) for i in range(6)), return_exceptions=True)"
    async with Kernel(posture=Posture.ASK, approver=person) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script, timeout=30)
    assert result.status == "ok", result.error
    assert [r.arguments["n"] for r in person.requests] == list(range(6))
    assert state["overlap"] is False
    assert [c["ok"] for c in result.calls] == [True, True, True, False, True, True]
    assert sorted(args["n"] for _, args in ledger.runs) == [0, 1, 2, 4, 5]


async def test_a_dry_run_of_a_parallel_script_stages_each_call(tmp_path, ledger: Ledger) -> None:
    plan_path = tmp_path / "plan.json"
    script = """
out = parallel(tools.touch(x=p) for p in ["a", "b", "c"])
seen = parallel(tools.peek(x=p) for p in ["d"])
result = {"staged": [o["staged"] for o in out], "read": seen[0]["tool"]}
"""
    approver = ScriptedApprover(lambda r: ApprovalAnswer.once())
    async with Kernel(
        posture=Posture.ASK, approver=approver, dry_run=True, plan_path=plan_path
    ) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.ok, outcome.error
    assert outcome.value["result"] == {"staged": [True, True, True], "read": "peek"}
    assert ledger.runs == [("peek", {"x": "d"})]  # only the read ran
    plan = Plan.load(plan_path)
    assert [(c.tool, c.arguments, c.origin) for c in plan.calls] == [
        ("touch", {"x": p}, "script") for p in "abc"
    ]


async def test_parallel_calls_count_against_the_budget(ledger: Ledger) -> None:
    """Each call of a batch counts; past the budget each is refused on its own."""
    script = """
first = parallel((tools.peek(x=str(i)) for i in range(2)), return_exceptions=True)
second = parallel((tools.peek(x=str(i)) for i in range(2, 4)), return_exceptions=True)
result = [r.code if isinstance(r, ToolError) else "ok" for r in first + second]
"""
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script, max_calls=3)
    assert result.status == "ok", result.error
    assert result.result == ["ok", "ok", "ok", "denied"]
    assert len(ledger.runs) == 3 and len(result.calls) == 3
    assert kinds(kernel, "script_finished")[-1]["refused_over_budget"] == 1


# -- errors a model can fix ------------------------------------------------------------


async def test_a_failing_call_ends_the_script_with_its_own_lines_and_code(ledger: Ledger) -> None:
    script = "def fetch(p):\n    return tools.peek(x=p)\n\nfetch(1)\n"
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "error"
    assert result.error["type"] == "ToolError" and result.error["code"] == "invalid_arguments"
    assert result.error["tool"] == "peek" and result.error["field"] == "x"
    assert result.error["traceback"] == (
        "Traceback (most recent call last):\n"
        "  script line 4, in <module>\n"
        "    fetch(1)\n"
        "  script line 2, in fetch\n"
        "    return tools.peek(x=p)\n"
        "ToolError: invalid_arguments: tools.peek: argument 'x' must be a string, not int 1; "
        "the call was not sent"
    )
    assert "_runner" not in json.dumps(result.error) and "_typed" not in json.dumps(result.error)


async def test_a_denied_call_in_parallel_ends_the_script_at_the_parallel_line(
    ledger: Ledger,
) -> None:
    script = 'x = 1\nparallel(call_tool(t) for t in ["peek", "launch"])\nprint("not reached")\n'
    async with Kernel(posture=Posture.ASK) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "error" and result.output == ""
    assert result.error["code"] == "denied" and result.error["line"] == 2
    assert result.error["traceback"].splitlines()[1:3] == [
        "  script line 2, in <module>",
        '    parallel(call_tool(t) for t in ["peek", "launch"])',
    ]


async def test_the_tool_result_holds_output_value_and_calls_together(ledger: Ledger) -> None:
    script = 'print("reading")\nresult = parallel(tools.peek(x=p) for p in "ab")[1]["args"]\n'
    async with Kernel(approver=ScriptedApprover(lambda r: ApprovalAnswer.once())) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel, spare=False)
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.value["status"] == "ok"
    assert outcome.value["output"] == "reading\n"
    assert outcome.value["result"] == {"x": "b"}
    assert [c["tool"] for c in outcome.value["calls"]] == ["peek", "peek"]
    assert all(c["call_id"] for c in outcome.value["calls"])


# -- the CLI ---------------------------------------------------------------------------


def test_run_script_cli_with_typed_and_parallel_calls(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"text of {name}\n")
    script = tmp_path / "pipeline.py"
    script.write_text(
        "texts = parallel(tools.read_file(path=p) for p in ['a.txt', 'b.txt'])\n"
        "try:\n    tools.read_file(path=3)\nexcept ToolError as e:\n    print(e.code, e.field)\n"
        "result = {'lines': [t.strip() for t in texts]}\n"
    )
    posture = [k for k in os.environ if k.startswith("RINGFENCE_POSTURE")]
    done = ringfence_process(
        "run-script", str(script), "--approve", "yes", "--json",
        "--events", str(tmp_path.with_name(f"{tmp_path.name}.events.jsonl")),  # beside the root
        cwd=tmp_path, unset=posture,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    value = json.loads(done.stdout)["result"]
    assert value["output"] == "invalid_arguments path\n"
    assert value["result"] == {"lines": ["text of a.txt", "text of b.txt"]}
    assert [c["tool"] for c in value["calls"]] == ["read_file", "read_file"]


def test_run_script_cli_real_errors_are_caught_by_code_and_an_uncaught_one_shows_script_lines(
    tmp_path: Path,
) -> None:
    """Real read_file failures raise ToolError with the ringfence code; an uncaught one ends the
    script with the model's own lines (never the runner's), output and calls kept, in both forms."""
    (tmp_path / "a.txt").write_text("alpha\n")
    script = tmp_path / "fix.py"
    script.write_text(
        "codes = []\n"
        "for p in ['../outside.txt', 'missing.txt']:\n"
        "    try:\n        tools.read_file(path=p)\n"
        "    except ToolError as e:\n        codes.append([e.code, e.tool, e.field])\n"
        "print('caught', codes)\n"
        "def load(name):\n    return tools.read_file(path=name)\n"
        "load('a.txt')\nload('gone.txt')\nprint('not reached')\n"
    )
    trace = (
        "Traceback (most recent call last):\n"
        "  script line 11, in <module>\n"
        "    load('gone.txt')\n"
        "  script line 9, in load\n"
        "    return tools.read_file(path=name)\n"
        "ToolError: not_found: gone.txt does not exist"
    )
    caught = (
        "caught [['outside_workspace', 'read_file', 'path'], ['not_found', 'read_file', 'path']]\n"
    )
    posture = [k for k in os.environ if k.startswith("RINGFENCE_POSTURE")]
    argv = ("run-script", str(script), "--approve", "yes")
    human = ringfence_process(*argv, cwd=tmp_path, unset=posture)
    assert human.returncode == 1 and human.stdout == caught
    assert "".join(f"  │ {line}\n" for line in trace.split("\n")) in human.stderr
    assert "ringfence: tool_error: the script raised ToolError at script line 9" in human.stderr
    as_json = ringfence_process(*argv, "--json", cwd=tmp_path, unset=posture)
    assert as_json.returncode == 1
    details = json.loads(as_json.stdout)["error"]["details"]
    assert details["output"] == caught
    assert [c.get("error", "ok") for c in details["calls"]] == [
        "outside_workspace", "not_found", "ok", "not_found",
    ]  # fmt: skip
    assert details["error"]["traceback"] == trace
    assert (details["error"]["code"], details["error"]["line"]) == ("not_found", 9)
    for text in (human.stderr, as_json.stdout):
        assert "_runner" not in text and "ringfence/" not in text and '.py"' not in text


# -- events ----------------------------------------------------------------------------


async def test_every_parallel_call_has_its_own_started_and_finished(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        await run(kernel, 'parallel(tools.peek(x=p) for p in "abcd")')
    ids = [p["call_id"] for p in script_calls(kernel)]
    for kind in ("started", "finished"):
        assert sorted(e["call_id"] for e in kinds(kernel, kind) if e["call_id"] in ids) == sorted(
            ids
        )
    assert all(e["parent_id"] == "parent-test" for e in script_calls(kernel))
    assert {e["trace_id"] for e in events(kernel) if e.get("call_id") in ids} == {"trace-test"}


def test_script_config_checks_its_new_fields() -> None:
    from ringfence.runtime import InvalidArguments

    for bad in ({"max_parallel": 0}, {"warm_runners": -1}, {"warm_runners": 65}):
        with pytest.raises(InvalidArguments) as err:
            ScriptConfig(**bad)
        assert err.value.field == next(iter(bad))


async def test_a_call_made_but_not_yielded_inside_parallel_is_an_error_not_lost(
    ledger: Ledger,
) -> None:
    script = """
def both(p):
    tools.touch(x="side effect")
    return tools.peek(x=p)
parallel(both(p) for p in "ab")
"""
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "error" and result.error["type"] == "TypeError"
    assert "a call to touch was made while parallel() collected" in result.error["message"]
    assert ledger.runs == []  # nothing was sent


def _deep_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return {"type": "object", "properties": {"x": schema}}


def _wide_schema(size: int) -> dict:
    return {"type": "object", "properties": {"x": {"type": "string", "description": "d" * size}}}


@pytest.mark.parametrize("schema", ["deep", "wide"])
async def test_a_tool_schema_cannot_stop_every_script(ledger: Ledger, schema: str) -> None:
    """The attack: a tool whose input schema nests deeper than the bridge's bound (40 levels
    of properties), or schemas larger together than a frame (two of 9 MB), registered by
    an untrusted MCP server, made every run of every script fail at its start ("the script
    bridge refused a message"). Such a schema is left out of the script's manifest (named
    in an event); the tool stays callable, and its calls are validated by the Gate."""
    calls: list[dict] = []

    async def record(args: dict, ctx: object) -> str:
        calls.append(args)
        return "ran"

    async with Kernel(approver=ScriptedApprover(lambda r: ApprovalAnswer.once())) as kernel:
        register_tools(kernel, ledger)
        register_script_tool(kernel)
        made = [_deep_schema(40)] if schema == "deep" else [_wide_schema(9_000_000)] * 2
        for i, s in enumerate(made):
            kernel.register(ToolSpec(f"odd{i}", "odd", s, record, consequence=Consequence.READ))
        script = """
result = [call_tool("peek")["tool"], tools.odd0(x={"a": {}} if DEEP else "fine")]
try:
    call_tool("odd0", x=5)
except ToolError as exc:
    result.append(exc.code)
"""
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": script.replace("DEEP", str(schema == "deep"))}
        )
        trimmed = kinds(kernel, "script_manifest_trimmed")
        decided = [e for e in kinds(kernel, "decided") if e["tool"] == "odd0"]
    assert outcome.ok, outcome.error
    assert outcome.value["result"] == ["peek", "ran", "invalid_arguments"]
    assert len(calls) == 1  # the call the Gate refused never ran
    assert trimmed and "odd0" in trimmed[0]["tools"]
    assert len(decided) == 1  # the valid call was decided; the invalid one refused before
