"""What a policy costs: run_shell decided under 200 rules, against the posture-only decision.

Two rows, interleaved in one run:

- the decision alone (``decide`` for a ``run_shell`` call): a 200-rule policy
  (deny, ask and allow rules over commands and paths) against no policy. Every
  call carries a command line not seen before, so the shell parse and the
  verdict cache are cold: the cost a new command pays.
- end to end (issue 14's goal): ``run_shell`` of ``true`` through the Gate on
  the local backend, with the 200-rule policy against without, under the same
  posture; again a new command line each call. Goal: the policy adds ≤ 5 %,
  judged as the decision row's overhead over this row's baseline (the direct
  ratio of two kernels is noise-bound on a shared machine; it is reported too).
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

from ringfence.backends._run_shell import register_shell_tool
from ringfence.runtime._kernel import Kernel
from ringfence.runtime._tools import ToolSpec
from ringfence.runtime.policy._decide import Posture, Rules, decide
from ringfence.runtime.policy._judge import Policy
from ringfence.workspace._workspace import Workspace

from ._harness import Arm, SyncArm, interleave, interleave_blocking
from ._suite import Row, Scenario

E2E_GOAL = 0.05
RULES = 200


def sample_policy(roots: list[str]) -> Policy:
    """200 rules of the kinds a team writes: deny, ask and allow, commands and paths."""
    deny = [f"run_shell(danger{i} *)" for i in range(50)] + [
        f"write_file(path=secret{i}/**)" for i in range(10)
    ]
    ask = [f"run_shell(deploy{i}*)" for i in range(30)] + [
        f"write_file(path=release{i}/**)" for i in range(10)
    ]
    allow = (
        [f"run_shell(tool{i} --flag *)" for i in range(90)]
        + ["run_shell(true *)", "run_shell(git status*)", "run_shell(pytest*)"]
        + [f"write_file(path=src{i}/**)" for i in range(7)]
    )
    policy = Policy.from_strings(deny=deny, ask=ask, allow=allow).with_roots(roots)
    assert len(policy.rules) == RULES
    return policy


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:
    raise AssertionError("the decision bench runs no tool")


async def run(quick: bool) -> list[Row]:
    rounds, batch = (6, 200) if quick else (30, 500)
    spec = ToolSpec("run_shell", "", {"type": "object"}, _never, residual=True)
    with_policy = Rules(policy=sample_policy(["/ws"]))
    posture_only = Rules()
    counter = itertools.count()

    def decide_policy() -> object:
        command = f"git status && pytest -q tests/t{next(counter)}.py | true"
        return decide(spec, Posture.ASK, with_policy, {"command": command})

    def decide_posture() -> object:
        command = f"git status && pytest -q tests/t{next(counter)}.py | true"
        return decide(spec, Posture.ASK, posture_only, {"command": command})

    s = interleave_blocking(
        [
            SyncArm("posture-only decision", decide_posture, batch),
            SyncArm("200-rule policy decision", decide_policy, batch),
        ],
        rounds=rounds,
        warmup=1,
    )
    base, subj = s["posture-only decision"], s["200-rule policy decision"]

    e2e_rounds, e2e_batch = (8, 30) if quick else (30, 80)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        policy = sample_policy([str(root)])
        async with (
            Kernel(posture=Posture.UNRESTRICTED) as plain,
            Kernel(posture=Posture.UNRESTRICTED, rules=Rules(policy=policy)) as ruled,
        ):
            register_shell_tool(plain, backend="local", workspace=Workspace([root]))
            register_shell_tool(ruled, backend="local", workspace=Workspace([root]))

            async def call_plain() -> object:
                return await plain.call("run_shell", {"command": f"true {next(counter)}"})

            async def call_ruled() -> object:
                return await ruled.call("run_shell", {"command": f"true {next(counter)}"})

            e2e = await interleave(
                [
                    Arm("run_shell true, no policy", call_plain, e2e_batch),
                    Arm("run_shell true, 200-rule policy", call_ruled, e2e_batch),
                ],
                rounds=e2e_rounds,
                warmup=1,
            )
    e2e_base, e2e_subj = e2e["run_shell true, no policy"], e2e["run_shell true, 200-rule policy"]
    # The goal is judged on the decision's overhead (interleaved, µs-precise) as a share of
    # run_shell true: two kernels' end-to-end medians differ by more than 5 % from noise
    # alone on a shared 2-core machine (0.6x to 1.2x seen between runs).
    decision_overhead = subj.median - base.median
    added = decision_overhead / e2e_base.median
    return [
        Row(
            "policy-shell",
            "run_shell decision, 200-rule policy, new command line each call",
            subj,
            base,
            "informational (the decision alone)",
            None,
            {"overhead_s": subj.median - base.median},
        ),
        Row(
            "policy-shell",
            "run_shell `true` end to end (local), 200-rule policy vs none",
            e2e_subj,
            e2e_base,
            f"policy adds <= {E2E_GOAL:.0%}",
            added <= E2E_GOAL,
            {
                "added": added,
                "measured_ratio": e2e_subj.median / e2e_base.median,
                "note": f"the decision adds {added:.1%} of run_shell true "
                "(decision overhead / this baseline); the direct ratio is noise-bound",
            },
        ),
    ]


SCENARIO = Scenario(
    "policy-shell",
    "run_shell under a 200-rule policy",
    f"policy adds <= {E2E_GOAL:.0%} to run_shell true",
    run,
)
