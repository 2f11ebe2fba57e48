"""A form's ``pattern`` cannot stall the kernel (real SDK peer ``servers/redos_form.py``).

An accepted answer is validated against the server's form before it is sent. That check ran
jsonschema with Python's backtracking ``re`` on the kernel's thread: a form whose default is a
near miss of ``^(a+)+$`` (the person keeps it) stalled every call of the session for seconds.
Now the answer is matched with RE2 (linear time); a pattern RE2 cannot compile cancels it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import trio
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.mcp_host.testing import ScriptedElicitor

EXTRA = 'elicitation_policy = "allow"\nread_only_tools = ["*"]'


def keep_default(prompt):  # the person presses Enter: the form's default is the answer
    from ringfence.mcp_host._elicitation import ElicitationAnswer

    return ElicitationAnswer("accept", {"v": prompt.requested_schema["properties"]["v"]["default"]})


async def test_a_backtracking_form_pattern_does_not_stall_the_kernel(
    make_kernel, state: Path
) -> None:
    elicitor = ScriptedElicitor(keep_default)
    m = manifest(py_server("form", "redos_form.py", state=state, extra=EXTRA))
    gaps: list[float] = []
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor):

        async def heartbeat() -> None:  # how long the kernel's event loop went without running
            last = time.monotonic()
            while True:
                await trio.sleep(0.05)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        start = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            reply = await kernel.invoke("mcp.form.ask", {})
            quick = await kernel.invoke("mcp.form.quick", {})
            nursery.cancel_scope.cancel()
        elapsed = time.monotonic() - start
    # A loaded machine stalls a loop now and then; the backtracking would take ~80 s.
    assert elapsed < 20.0 and max(gaps, default=0.0) < 5.0, (elapsed, gaps)
    assert quick.error is None
    assert len(elicitor.prompts) == 1
    assert reply.error is None
    line = next(x for x in reply.value["text"].splitlines() if x.startswith('{"action"'))
    assert json.loads(line) == {"action": "cancel", "content": None}  # it does not fit: not sent


async def test_a_form_pattern_re2_cannot_compile_cancels_the_answer(
    make_kernel, state: Path
) -> None:
    elicitor = ScriptedElicitor(keep_default)
    m = manifest(py_server("form", "redos_form.py", state=state, extra=EXTRA))
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor) as cs:
        reply = await kernel.invoke("mcp.form.ask_lookahead", {})
        failures = cs["form"].diagnostics.to_dict()["failures"]
    line = next(x for x in reply.value["text"].splitlines() if x.startswith('{"action"'))
    assert json.loads(line)["action"] == "cancel"
    assert any("RE2" in f["message"] for f in failures), failures


async def test_a_huge_form_is_refused_unread_without_stalling_the_kernel(
    make_kernel, state: Path
) -> None:
    """A form whose message and one field's description are a megabyte of words each: the
    credential checks read all of it on the kernel's thread (~7 s of its loop per megabyte:
    every call of the session waited). A request over 16,384 characters is now refused
    before anything reads it, the person is never shown it, and the refusal says why."""
    from ringfence.mcp_host._elicitation import MAX_REQUEST_CHARACTERS

    elicitor = ScriptedElicitor(keep_default)
    m = manifest(py_server("form", "redos_form.py", state=state, extra=EXTRA))
    gaps: list[float] = []
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor) as cs:

        async def heartbeat() -> None:
            last = time.monotonic()
            while True:
                await trio.sleep(0.05)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            reply = await kernel.invoke("mcp.form.ask_long", {})
            quick = await kernel.invoke("mcp.form.quick", {})
            nursery.cancel_scope.cancel()
        failures = cs["form"].diagnostics.to_dict()["failures"]
    assert max(gaps, default=0.0) < 1.0, max(gaps)
    assert quick.error is None and reply.error is None, (quick.error, reply.error)
    assert elicitor.prompts == []  # never shown
    line = next(x for x in reply.value["text"].splitlines() if x.startswith('{"refused"'))
    assert f"{MAX_REQUEST_CHARACTERS:,} characters" in json.loads(line)["refused"]
    assert any("16,384 characters" in f["message"] for f in failures), failures
