"""A script's call cannot hold the kernel with an argument whose check costs quadratic time.

jsonschema checks ``uniqueItems`` by sorting the items, and when they cannot be sorted
(objects) by comparing every pair, in Python: one keyword evaluation, so the check's step
budget never saw it. A tool whose schema has a ``uniqueItems`` array (common in MCP servers'
schemas: labels, tags, ids) let one call of a script hold the kernel's event loop: 2,000
objects took 21 s here, 5,000 about two minutes, 50,000 (a 500 KB argument) hours. The
check is now one pass with each item's canonical key in a set, with jsonschema's equality.
"""

from __future__ import annotations

import time
from typing import Any

from bridge_helpers import Ledger

from ringfence.bridge import register_script_tool
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import (
    ApprovalAnswer,
    CallContext,
    Consequence,
    Kernel,
    ScriptedApprover,
    ToolSpec,
)

YES = ScriptedApprover(lambda r: ApprovalAnswer.once())
LABELS = {
    "type": "object",
    "properties": {"labels": {"type": "array", "uniqueItems": True}},
    "required": ["labels"],
    "additionalProperties": False,
}
SCRIPT = """
labels = [{"n": i, "name": "label %d" % i} for i in range(5000)]
try:
    call_tool("label", labels=labels + [{"name": "label 7", "n": 7.0}])
except ToolError as e:
    print("duplicate:", e.code, e.field)
result = call_tool("label", labels=labels)
"""


async def test_a_unique_items_array_of_objects_is_checked_in_linear_time(ledger: Ledger) -> None:
    async def label(args: dict[str, Any], ctx: CallContext) -> int:
        ledger.runs.append(("label", args))
        return len(args["labels"])

    async with Kernel(approver=YES) as kernel:
        kernel.register(ToolSpec("label", "sets labels", LABELS, label, Consequence.READ))
        register_script_tool(kernel)
        started = time.monotonic()
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": SCRIPT, "timeout_seconds": 120})
        seconds = time.monotonic() - started
    assert outcome.ok, outcome.error
    # the duplicate (7 and 7.0 are one number, the keys in another order) is refused by the Gate
    assert outcome.value["output"] == "duplicate: invalid_arguments labels\n"
    assert outcome.value["result"] == 5000
    assert [len(args["labels"]) for _, args in ledger.runs] == [5000]  # only the valid call ran
    assert seconds < 60, seconds  # the pairwise check: about two minutes here


def test_unique_items_keeps_jsonschemas_equality() -> None:
    """Differential against jsonschema's equality over every pair (its own ``uniq`` sorts
    first when it can, and then misses ``[1], [true], [1]``): ``true`` is not ``1``, ``1`` is
    ``1.0``, arrays and objects are equal by their contents."""
    import itertools

    from jsonschema._utils import equal

    values: list[Any] = [
        None, True, False, 0, 1, 1.0, 0.0, "", "1", [], {}, [1], [True], [1.0], [[1]],
        {"a": 1}, {"a": 1.0}, {"a": True}, {"b": 1}, {"a": 1, "b": 2}, {"b": 2, "a": 1},
        {"a": [1, {"c": None}]}, {"a": [1.0, {"c": None}]}, {"a": [True, {"c": None}]},
    ]  # fmt: skip
    spec = ToolSpec("t", "", LABELS, lambda a, c: None, Consequence.READ)
    for n in (1, 2, 3):
        for items in itertools.product(values, repeat=n):
            try:
                spec.validate({"labels": list(items)})
                ours = True
            except Exception:
                ours = False
            pairs = itertools.combinations(items, 2)
            assert ours == (not any(equal(a, b) for a, b in pairs)), items
