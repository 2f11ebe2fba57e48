"""What a script sees and what a run returns: restricted Python, print, result, errors, output."""

from __future__ import annotations

import os
import stat

import pytest
from bridge_helpers import Ledger, kinds, register_tools, run

from ringfence.bridge import ALLOWED_MODULES
from ringfence.runtime import CallContext, Consequence, Kernel, Posture, ToolSpec


async def test_result_output_and_calls(ledger: Ledger) -> None:
    script = (
        'print("a", 1, sep="-", end="!\\n")\nprint()\nresult = {"peek": call_tool("peek", x="1")}'
    )
    async with Kernel() as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.status == "ok"
    assert result.output == "a-1!\n\n"
    assert result.has_result and result.result == {"peek": {"tool": "peek", "args": {"x": "1"}}}
    assert result.to_dict()["calls"][0]["decision"]["verdict"] == "allow"


async def test_no_result_and_a_result_that_is_not_json() -> None:
    async with Kernel() as kernel:
        none = await run(kernel, "x = 1")
        odd = await run(kernel, "result = {1, 2}")
    assert none.status == "ok" and not none.has_result and "result" not in none.to_dict()
    assert odd.result == "{1, 2}"


async def test_traceback_uses_script_line_numbers() -> None:
    script = "def f(n):\n    return 10 // n\n\n\nprint(f(2))\nprint(f(0))\n"
    async with Kernel() as kernel:
        result = await run(kernel, script)
    assert result.status == "error"
    assert result.output == "5\n"
    assert result.error["type"] == "ZeroDivisionError"
    assert result.error["line"] == 2
    assert result.error["traceback"] == (
        "Traceback (most recent call last):\n"
        "  script line 6, in <module>\n"
        "    print(f(0))\n"
        "  script line 2, in f\n"
        "    return 10 // n\n"
        "ZeroDivisionError: integer division or modulo by zero"
    )


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("x = ().__class__.__bases__[0]", '"__class__" is an invalid attribute name'),
        ("def f(:\n  pass", "SyntaxError"),
        ("_secret = 1", '"_secret" is an invalid variable name'),
        ("exec('import os')", "Exec calls are not allowed"),
        ("import _strptime", '"_strptime" is an invalid variable name'),
    ],
)
async def test_restricted_python_refuses_at_compile_time(source: str, fragment: str) -> None:
    async with Kernel() as kernel:
        result = await run(kernel, source)
    assert result.status == "compile_error"
    assert any(fragment in e for e in result.error["errors"]), result.error


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ('open("/etc/passwd")', "NameError"),
        ("import os", "ImportError"),
        ("import ctypes", "ImportError"),
        ("from . import x", "ImportError"),
        ("from string import Formatter", "ImportError"),
        ("from functools import update_wrapper", "ImportError"),
        ('"{0.__class__}".format(1)', "NotImplementedError"),
        ("import json\njson.codecs", "AttributeError"),
        ("import datetime\ndatetime.sys", "AttributeError"),
        ('getattr(call_tool, "__globals__")', "AttributeError"),
        ('getattr(ToolError, "__subclasses__")', "AttributeError"),
        ("import json\njson.dumps = print", "TypeError"),
        ('print("x", file=None or 1)', "TypeError"),
        ("printed", "NotImplementedError"),
        ("type(1)", "NameError"),
        ("import json\njson.no_such_name", "AttributeError"),
        ("vars()", "NameError"),
    ],
)
async def test_restricted_python_refuses_at_run_time(source: str, error: str) -> None:
    async with Kernel() as kernel:
        result = await run(kernel, source)
    assert result.status == "error", result
    assert result.error["type"] == error, result.error


async def test_every_allowed_module_imports_and_works() -> None:
    script = """
import base64, collections, csv, datetime, functools, hashlib, itertools, json, math, re
import statistics, string, textwrap, time
from json import dumps
rows = list(csv.reader(["a,b", "1,2"]))
out = [
    base64.b64encode(b"hi").decode(),
    collections.Counter("aab").most_common(1)[0][0],
    rows[1][1],
    datetime.datetime.strptime("2024-05-01", "%Y-%m-%d").year,
    functools.reduce(lambda a, b: a + b, [1, 2, 3]),
    hashlib.sha256(b"x").hexdigest()[:8],
    list(itertools.islice(itertools.count(), 3)),
    dumps({"k": 1}),
    math.floor(2.5),
    re.sub(r"\\d", "#", "a1b2"),
    statistics.median([3, 1, 2]),
    string.ascii_lowercase[:3],
    textwrap.shorten("hello world again", 11),
    time.strftime("%Y", time.gmtime(0)) + datetime.date(2024, 5, 1).strftime("-%m"),
]
result = out
"""
    async with Kernel() as kernel:
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    assert result.result == [
        "aGk=", "a", "2", 2024, 6, "2d711642", [0, 1, 2], '{"k": 1}', 2, "a#b#", 2,
        "abc", "hello [...]", "1970-05",
    ]  # fmt: skip
    assert len(ALLOWED_MODULES) == 14


async def test_script_classes_may_keep_state() -> None:
    script = """
class Counter:
    def __init__(self):
        self.n = 0
    def bump(self):
        self.n = self.n + 1
        return self.n
c = Counter()
c.bump()
total = 0
for a, (b, d) in [(1, (2, 3))]:
    total += a + b + d
result = [c.bump(), total]
"""
    async with Kernel() as kernel:
        result = await run(kernel, script)
    assert result.result == [2, 6], result.error


async def test_call_tool_errors_arrive_as_tool_errors(ledger: Ledger) -> None:
    script = """
codes = []
for name, kw in [("nope", {}), ("peek", {"x": 1}), ("peek", {"x": {1, 2}})]:
    try:
        call_tool(name, **kw)
    except ToolError as e:
        codes.append([e.code, e.tool])
try:
    call_tool(5)
except ToolError as e:
    codes.append([e.code, e.tool])
result = codes
"""
    async with Kernel() as kernel:
        register_tools(kernel, ledger)
        result = await run(kernel, script)
    assert result.result == [
        ["not_found", "nope"],
        ["invalid_arguments", "peek"],
        ["invalid_arguments", "peek"],
        ["invalid_arguments", ""],
    ]
    assert ledger.runs == []


async def test_a_script_cannot_start_another_script(ledger: Ledger) -> None:
    from ringfence.bridge import register_script_tool

    script = 'try:\n    call_tool("run_tool_script", script="x = 1")\nexcept ToolError as e:\n    result = e.code'
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_script_tool(kernel)
        result = await run(kernel, script)
    assert result.result == "denied"
    assert kinds(kernel, "bridge_refused_call")[0]["called"] == "run_tool_script"
    assert len(kinds(kernel, "script_started")) == 1


async def test_output_keeps_head_and_tail_past_the_cap() -> None:
    script = 'for i in range(2000):\n    print("line", i)'
    async with Kernel(output_cap_bytes=1000) as kernel:
        result = await run(kernel, script)
    assert result.output.startswith("line 0\nline 1\n")
    assert result.output.endswith("line 1998\nline 1999\n")
    assert "ringfence cut" in result.output
    assert len(result.output) < 2200


async def test_unix_socket_transport_is_private_and_cleaned_up() -> None:
    seen: dict = {}
    kernels: list[Kernel] = []

    async def inspect(args: dict, ctx: CallContext) -> str:
        path = kinds(kernels[0], "script_started")[0]["address"][1]
        seen["path"] = path
        seen["sock"] = stat.S_IMODE(os.stat(path).st_mode)
        seen["dir"] = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
        seen["owner"] = os.stat(path).st_uid
        return "looked"

    async with Kernel() as kernel:
        kernels.append(kernel)
        kernel.register(
            ToolSpec("inspect", "i", {"type": "object"}, inspect, consequence=Consequence.READ)
        )
        result = await run(kernel, 'result = call_tool("inspect")', transport="unix")
    assert result.result == "looked", result.error
    assert seen["sock"] == 0o600 and seen["dir"] == 0o700
    # the runner connects before it drops to the sandbox's uid: the socket stays the host's
    # (test_bridge_local_peers: that uid cannot touch it)
    assert seen["owner"] == os.geteuid()
    assert not os.path.exists(os.path.dirname(seen["path"]))


async def test_messages_the_bridge_cannot_carry_become_errors_not_a_dead_bridge(
    ledger: Ledger,
) -> None:
    async def big(args: dict, ctx: CallContext) -> list[str]:
        return ["y" * 1000] * 10

    async def raw(args: dict, ctx: CallContext) -> bytes:
        return b"not json"

    script = """
codes = []
for name, kw in [("peek", {"x": "a" * 10000}), ("big", {}), ("raw", {})]:
    try:
        call_tool(name, **kw)
    except ToolError as e:
        codes.append([e.code, "too large" in e.message or "cannot cross the bridge" in e.message])
codes.append(call_tool("peek", x="small")["tool"])
print(codes)
result = "b" * 10000
"""
    async with Kernel() as kernel:
        register_tools(kernel, ledger)
        kernel.register(ToolSpec("big", "b", {"type": "object"}, big, consequence=Consequence.READ))
        kernel.register(ToolSpec("raw", "r", {"type": "object"}, raw, consequence=Consequence.READ))
        result = await run(kernel, script, max_frame=4096)
    assert result.output == (
        "[['invalid_arguments', True], ['tool_error', True], ['tool_error', True], 'peek']\n"
    )
    assert result.status == "error"
    assert result.error["type"] == "ResultTooLarge"
    assert ledger.runs == [("peek", {"x": "small"})]
