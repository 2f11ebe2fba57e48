"""What exec checks cost: ``make -j1`` of 200 tiny targets in the confined sandbox, with and
without deny rules, interleaved in one run.

Each target's recipe is ``sh -c true`` (make runs it without a shell of its own: one
``execve`` per target, checked by the supervisor when deny rules apply). Two warm local
sessions (change sets on, as ``create_kernel`` starts them), one command each per round,
the arms alternating. Goals (issue 29): the run with deny rules within 1.2x of the run
without, and each checked exec within 100 µs (the difference over the execs made).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ringfence.backends._types import SessionSpec
from ringfence.backends.confined._execrules import exec_rules
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.runtime.policy._judge import Policy

from ._harness import Arm, interleave
from ._suite import Row, Scenario, Skip

RATIO_GOAL = 1.2
PER_EXEC_GOAL = 100e-6
TARGETS = 200
DENY = ("run_shell(rm -rf *)", "run_shell(curl *)", "run_shell(git push*)", "run_shell(touch *)")


def _makefile(targets: int) -> str:
    names = " ".join(f"t{i}" for i in range(targets))
    return f".PHONY: all {names}\nall: {names}\n" + "".join(
        f"t{i}:\n\t@sh -c true\n" for i in range(targets)
    )


async def run_exec_checks(quick: bool) -> list[Row]:
    if shutil.which("make") is None:
        raise Skip("make is not installed (apt-get install make)")
    if shutil.which("bwrap") is None:
        raise Skip("bubblewrap is not installed (apt-get install bubblewrap)")
    rounds = 4 if quick else 20
    rules = exec_rules(Policy.from_strings(deny=DENY), {"command": "make"})
    assert rules is not None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "Makefile").write_text(_makefile(TARGETS))
        spec = SessionSpec(roots=(root,), change_sets=True, spool_dir=root.parent)
        plain = await start_local(spec)
        checked = await start_local(spec)
        try:
            if not getattr(checked, "exec_checks", False):
                raise Skip("this machine's local sandbox has no exec checks")
            command = ["make", "-j1", "-s", "-f", str(root / "Makefile")]

            async def run(session: object, **kw: object) -> object:
                result = await session.run(  # type: ignore[attr-defined]
                    command, cwd=root, env={}, timeout=120, output_cap=4096, **kw
                )
                if result.exit_code != 0:
                    raise RuntimeError(f"make failed: {result.stderr[-500:]}")
                return result

            async def without() -> object:
                return await run(plain)

            calls: list[int] = []

            async def with_rules() -> object:
                result = await run(checked, exec_rules=rules)
                calls.append(result.execs_checked or 0)  # type: ignore[attr-defined]
                return result

            s = await interleave(
                [
                    Arm(f"make -j1, {TARGETS} targets, no deny rules", without, 1),
                    Arm(f"make -j1, {TARGETS} targets, {len(DENY)} deny rules", with_rules, 1),
                ],
                rounds=rounds,
                warmup=1,
            )
        finally:
            await plain.aclose()
            await checked.aclose()
    base = s[f"make -j1, {TARGETS} targets, no deny rules"]
    subject = s[f"make -j1, {TARGETS} targets, {len(DENY)} deny rules"]
    programs = TARGETS + 1  # make itself, then one sh per target
    execs = max(calls) if calls else programs  # exec calls, PATH lookups that missed included
    per_exec = (subject.median - base.median) / execs
    return [
        Row(
            "exec-checks",
            f"make -j1 of {TARGETS} `sh -c true` targets (local, change sets), deny rules on",
            subject,
            base,
            f"within {RATIO_GOAL:g}x the same without deny rules; <= "
            f"{PER_EXEC_GOAL * 1e6:.0f} µs per checked exec",
            subject.median / base.median <= RATIO_GOAL and per_exec <= PER_EXEC_GOAL,
            {
                "per_exec_s": per_exec,
                "exec_calls": execs,
                "programs": programs,
                "note": f"{execs} exec calls checked per run ({programs} programs started; make "
                f"searches PATH with execvp), {per_exec * 1e6:.0f} µs each (the runs' "
                "difference over the calls): two scheduler hand-offs per call, plus the "
                "supervisor's Python reading path and argv and matching the rules",
            },
        )
    ]


SCENARIO = Scenario(
    "exec-checks",
    "exec checks: make -j1 of 200 tiny targets with and without deny rules",
    f"within {RATIO_GOAL:g}x; <= {PER_EXEC_GOAL * 1e6:.0f} µs per exec",
    run_exec_checks,
)
SCENARIOS = [SCENARIO]
