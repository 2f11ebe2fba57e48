"""Argument validation against a tool's JSON schema: regex keywords in linear time.

A tool's schema can come from an MCP server ringfence does not trust. jsonschema
matches ``pattern``/``patternProperties`` with Python's backtracking ``re``, so one
crafted pattern froze the kernel's thread for minutes during validation. These
tests run the attack through a real Kernel and a ToolSpec built from the hostile
schema, as the MCP adapter builds it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import trio
from runtime_helpers import Ledger

from ringfence.runtime import (
    CallContext,
    Consequence,
    HeadlessDenyApprover,
    InvalidArguments,
    Kernel,
    MemorySink,
    Posture,
    ToolSpec,
)

# Catastrophic backtracking in Python's re: six of these words take seconds, twelve minutes.
REDOS = r"^(\w+\s?)*$"
TWELVE_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu!"


def _kernel(schema: dict[str, Any], ledger: Ledger) -> tuple[Kernel, MemorySink]:
    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        ledger.runs.append(("hostile", args))
        return "ran"

    sink = MemorySink()
    kernel = Kernel(
        posture=Posture.ALLOW_REVERSIBLE, approver=HeadlessDenyApprover(), events_sink=sink
    )
    kernel.register(ToolSpec("hostile", "from a server", schema, run, consequence=Consequence.READ))
    return kernel, sink


def _string_schema(**keywords: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"type": "string", **keywords}}}


async def test_a_redos_pattern_in_a_schema_validates_in_linear_time(ledger: Ledger) -> None:
    kernel, sink = _kernel(_string_schema(pattern=REDOS), ledger)
    started = time.monotonic()
    out = await kernel.invoke("hostile", {"name": TWELVE_WORDS})
    assert time.monotonic() - started < 15  # backtracking: far longer than a minute
    assert out.error is not None and out.error.code == "invalid_arguments"
    assert out.error.field == "name" and "does not match" in out.error.message
    assert ledger.runs == []
    assert "finished" not in [r.get("kind") for r in sink.records()]
    # The pattern still works as a pattern: a matching value passes.
    assert await kernel.call("hostile", {"name": "alpha beta gamma"}) == "ran"


async def test_redos_in_pattern_properties_and_additional_properties(ledger: Ledger) -> None:
    schema = {
        "type": "object",
        "patternProperties": {REDOS: {"type": "integer"}},
        "additionalProperties": False,
    }
    kernel, _ = _kernel(schema, ledger)
    for key in (TWELVE_WORDS, "x" * 40 + "!"):
        started = time.monotonic()
        out = await kernel.invoke("hostile", {key: 1})
        assert time.monotonic() - started < 15
        assert out.error is not None and out.error.code == "invalid_arguments"
        assert "does not match any of the regexes" in out.error.message
    out = await kernel.invoke("hostile", {"alpha beta": "not an integer"})
    assert out.error is not None and out.error.field == "alpha beta"
    assert await kernel.call("hostile", {"alpha beta": 3}) == "ran"
    assert ledger.runs == [("hostile", {"alpha beta": 3})]


async def test_validation_does_not_block_other_calls(ledger: Ledger) -> None:
    kernel, _ = _kernel(_string_schema(pattern=REDOS), ledger)
    done: list[str] = []

    async def attack() -> None:
        for _ in range(20):
            await kernel.invoke("hostile", {"name": TWELVE_WORDS})
        done.append("attack")

    with trio.fail_after(15):  # a blocked loop: the 20 validations' minutes
        async with trio.open_nursery() as nursery:
            nursery.start_soon(attack)
            assert await kernel.call("hostile", {"name": "ok"}) == "ran"
    assert done == ["attack"]


async def test_a_pattern_re2_cannot_compile_is_refused_clearly(ledger: Ledger) -> None:
    for pattern in (r"^(?=.*\d).+$", r"(a)\1", "(?<!x)y"):
        kernel, sink = _kernel(_string_schema(pattern=pattern), ledger)
        out = await kernel.invoke("hostile", {"name": "a1"})
        assert out.error is not None and out.error.code == "invalid_arguments"
        assert out.error.field == "input_schema"
        assert "hostile" in out.error.message and "not RE2 syntax" in out.error.message
        assert repr(pattern) in out.error.message
        assert "failed" in [r.get("kind") for r in sink.records()]
        # Fail closed only where the pattern applies: a call without that argument runs.
        assert await kernel.call("hostile", {}) == "ran"
    assert ledger.runs == [("hostile", {})] * 3


async def test_unevaluated_properties_with_pattern_properties_is_refused(ledger: Ledger) -> None:
    schema = {
        "type": "object",
        "allOf": [{"patternProperties": {REDOS: {"type": "integer"}}}],
        "unevaluatedProperties": False,
    }
    kernel, _ = _kernel(schema, ledger)
    started = time.monotonic()
    out = await kernel.invoke("hostile", {TWELVE_WORDS: 1})
    assert time.monotonic() - started < 15
    assert out.error is not None and out.error.field == "input_schema"
    assert "unevaluatedProperties" in out.error.message
    assert ledger.runs == []


def test_a_tool_name_ending_in_a_newline_is_refused() -> None:
    """``^[...]{1,128}$`` with ``match`` admitted ``read_file\\n``: a second tool a deny rule
    written ``read_file`` would not name, drawn the same in every listing."""

    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        return "ran"

    with pytest.raises(InvalidArguments) as caught:
        ToolSpec("read_file\n", "d", {"type": "object"}, run, Consequence.READ)
    assert caught.value.field == "name"


async def test_arguments_nested_past_the_bound_are_refused_and_recorded(ledger: Ledger) -> None:
    """A host's ``invoke`` with arguments 5,000 levels deep raised RecursionError out of the
    redactor: now an ``invalid_arguments`` outcome, recorded, and nothing runs."""
    kernel, sink = _kernel({"type": "object"}, ledger)
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    out = await kernel.invoke("hostile", {"name": deep})
    assert out.error is not None and out.error.code == "invalid_arguments"
    assert out.error.field == "arguments" and "deeper than" in out.error.message
    assert ledger.runs == []
    kinds = [(r["kind"], r.get("arguments")) for r in sink.records() if r.get("call_id")]
    assert kinds[0][0] == "proposed" and "not recorded" in kinds[0][1]
    assert kinds[-1][0] == "failed"
    # A hundred levels is the bound; within it the call runs.
    shallow: Any = "leaf"
    for _ in range(98):
        shallow = [shallow]
    assert await kernel.call("hostile", {"name": shallow}) == "ran"


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
async def test_a_number_json_cannot_hold_is_refused_by_field_and_recorded(
    ledger: Ledger, number: float
) -> None:
    """NaN passed every bound of a schema (each comparison with NaN is false: ``maximum: 10``
    let it through to the tool, and so would a policy rule on the value), and the event log
    recorded ``null`` for what the tool was given. NaN and ±Infinity are not JSON: refused
    naming the field, recorded as refused, and nothing runs."""
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"replicas": {
            "type": "number", "minimum": 0, "maximum": 10}}}},
    }  # fmt: skip
    kernel, sink = _kernel(schema, ledger)
    out = await kernel.invoke("hostile", {"spec": {"replicas": number}})
    assert out.error is not None and out.error.code == "invalid_arguments", out
    assert out.error.field == "spec.replicas" and "not a JSON number" in out.error.message
    assert ledger.runs == []
    kinds = [(r["kind"], r.get("arguments")) for r in sink.records() if r.get("call_id")]
    assert kinds[0][0] == "proposed" and "not recorded" in kinds[0][1]
    assert kinds[-1][0] == "failed"
    assert await kernel.call("hostile", {"spec": {"replicas": 10.0}}) == "ran"


def test_an_input_schema_nested_past_the_bound_is_refused() -> None:
    """A server's schema 2,000 levels deep raised RecursionError from the meta-schema check."""

    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        return "ran"

    schema: dict[str, Any] = {"type": "object"}
    for _ in range(1000):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(InvalidArguments) as caught:
        ToolSpec("deep", "d", schema, run, Consequence.READ)
    assert caught.value.field == "input_schema" and "deeper than" in caught.value.message
