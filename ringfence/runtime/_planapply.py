"""Applying a dry run's plan: every staged call re-enters the Gate, at most once.

:func:`apply_plan` (behind :meth:`Kernel.apply_plan` and ``ringfence plan
apply``) refuses a plan applied before, staged under other workspace roots,
or staged under a stricter posture than the applying session's (each unless
explicitly allowed), records ``plan_apply``, then invokes each staged call in
order through the road of :meth:`Kernel.invoke` (origin ``plan``): the same Gate,
rules, approver and events as the call would have had, never a shortcut. A call is
marked applied once the Gate has allowed it, just before it runs, so a refused
call (a rule, a person's no, nobody to ask) leaves the plan unspent: applying it
again runs the calls not yet applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ._calls import Authorization, Outcome
from ._errors import Denied
from ._plan import Plan
from .policy._decide import Posture

if TYPE_CHECKING:
    from ._kernel import Kernel

__all__ = ["apply_plan"]


async def apply_plan(
    kernel: Kernel, plan: Plan, *, rebase_roots: bool = False, allow_looser_posture: bool = False
) -> list[Outcome]:
    """Re-enter every staged call into the Gate, in order; stop at the first failure.

    Refused (Denied, nothing runs) when every call of the plan was applied before
    (the message names when and by which session), when it was staged under
    other workspace roots than this kernel's (unless ``rebase_roots``), or
    when this kernel's posture is looser than a call's staging posture
    (unless ``allow_looser_posture``). Calls applied before are skipped. Each
    call is marked applied (plan file and ledger) after the Gate allowed it and
    before it runs, so it runs at most once, and a call the Gate refused stays
    to be applied.
    """
    pending = [c for c in plan.calls if plan.applied_mark(c.call_id) is None]
    first = plan.first_applied()
    problem = None
    if first is not None and not pending:
        problem = (
            f"the plan {plan.path} was already applied ({first.describe()}; "
            f"{len(plan.calls)} of {len(plan.calls)} call(s) marked); a plan applies once"
        )
    elif plan.roots != kernel.roots and not rebase_roots:
        problem = (
            f"the plan was staged under the workspace roots {list(plan.roots)}, this session "
            f"has {list(kernel.roots)}; pass --rebase-roots (rebase_roots=True) to apply it here"
        )
    elif not allow_looser_posture:
        rank = list(Posture)
        looser = [
            c
            for c in plan.calls
            if rank.index(kernel.posture) > rank.index(Posture.parse(c.posture))
        ]
        if looser:
            problem = (
                f"posture {kernel.posture.value} is looser than the posture "
                f"{looser[0].posture} {looser[0].tool} was staged under; apply under "
                f"{looser[0].posture} or stricter, or pass --allow-looser-posture "
                "(allow_looser_posture=True)"
            )
    kernel.events.emit(
        "plan_apply",
        kernel.session_id,
        plan=str(plan.path) if plan.path else None,
        calls=len(plan.calls),
        applied_before=len(plan.calls) - len(pending),
        refused=problem,
        rebase_roots=rebase_roots and plan.roots != kernel.roots,
        allow_looser_posture=allow_looser_posture,
    )
    if problem is not None:
        raise Denied(f"plan apply refused: {problem}", rule="plan")
    outcomes: list[Outcome] = []
    for staged in pending:
        marking: list[BaseException] = []

        def mark(
            auth: Authorization,
            call_id: str = staged.call_id,
            marking: list[BaseException] = marking,
        ) -> None:
            if auth.staged:
                return  # staged again (a dry run applying): nothing runs, nothing is spent
            try:
                plan.mark_applied(call_id, kernel.session_id, auth.call_id)
            except BaseException as exc:
                marking.append(exc)
                raise

        outcome = await kernel._invoke(
            staged.tool,
            None,
            staged.arguments,
            "plan",
            None,
            staged.call_id,
            None,
            before_execute=mark,
        )
        if marking:  # the call was not run: another apply holds it, or no mark could be written
            raise marking[0]
        if plan.applied_mark(staged.call_id) is not None:  # it ran: its end, in the ledger
            code = outcome.error.code if outcome.error is not None else None
            await trio.to_thread.run_sync(
                lambda c=staged.call_id, o=outcome.ok, e=code: plan.mark_ended(c, o, e)
            )
        outcomes.append(outcome)
        if not outcome.ok:
            break
    return outcomes
