"""``ringfence plan show|apply FILE``.

Plans are authenticated with ``$RINGFENCE_HOME/keys/plan.key`` (see
:mod:`ringfence.runtime._plan`): ``show`` never creates that key, and says
whether a plan that does not check out was edited or signed with another key.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from ..runtime._errors import RingfenceError
from ..runtime._plan import Plan, ledger_note
from ..runtime._render import json_text, one_line
from ._output import error_line, exit_code_for, naming_file, print_error, print_ok
from ._session import add_session_options, kernel_from_args
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "plan")
    psub = p.add_subparsers(dest="plan_verb", required=True, metavar="ACTION")
    show = psub.add_parser("show", help="print the staged calls")
    show.add_argument("file", metavar="FILE", help="the plan a --dry-run wrote")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=run_show)
    apply = psub.add_parser(
        "apply",
        help="re-enter every staged call into the Gate (once: a plan applied before is refused)",
    )
    apply.add_argument("file", metavar="FILE", help="the plan a --dry-run wrote")
    apply.add_argument(
        "--rebase-roots",
        action="store_true",
        help="apply a plan staged under other workspace roots to this session's roots",
    )
    apply.add_argument(
        "--allow-looser-posture",
        action="store_true",
        help="apply under a posture looser than the one the calls were staged under",
    )
    add_session_options(apply, dry_run=False)
    apply.set_defaults(func=run_apply)


async def run_show(args: argparse.Namespace) -> int:
    with naming_file(args.file):
        plan = Plan.load(Path(args.file), create_key=False)
    unended = await trio.to_thread.run_sync(_unended, plan)
    names = _secret_names(args)
    if args.json:
        shown = {
            "roots": list(plan.roots),
            "calls": [{**asdict(c), "arguments": c.shown_arguments(names)} for c in plan.calls],
            "applied": {k: asdict(v) for k, v in plan.applied.items()},
            "unended": unended,
        }
        return print_ok(shown, True)
    # What the agent staged is shown through the one renderer: the arguments as JSON with
    # every control, bidi and separator character escaped, the diff of a staged change set
    # with its modes and kinds (runtime._render, workspace._diff).
    sys.stdout.write(
        f"{one_line(args.file)}: {len(plan.calls)} staged call(s) under the roots "
        f"{json_text(list(plan.roots))}\n"
    )
    for i, c in enumerate(plan.calls, 1):
        arguments = json_text(c.shown_arguments(names), sort_keys=True)
        mark = plan.applied.get(c.call_id)
        applied = f" — applied {one_line(mark.describe())}" if mark else ""
        if c.call_id in unended:
            applied = f" — {one_line(unended[c.call_id]['said'])}"
        sys.stdout.write(
            f"{i:3}. {one_line(c.tool)} [{one_line(c.consequence)}, via {one_line(c.origin)}, "
            f"posture {one_line(c.posture)}, session {one_line(c.session)}] {arguments}{applied}\n"
        )
        if c.tool == "apply_changes" and isinstance(c.arguments.get("id"), str):
            sys.stdout.write(_staged_diff(plan.roots, c.arguments["id"]))
    return 0


def _secret_names(args: argparse.Namespace) -> tuple[str, ...]:
    """The operator's credential-name globs (``RINGFENCE_SECRET_NAMES``), when read."""
    settings = getattr(args, "settings", None)
    return tuple(getattr(settings, "secret_names", ()) or ())


# Tools whose every write is a journaled change set: killed midway, rolled back whole.
_JOURNALED = frozenset({"write_file", "edit_file", "apply_changes", "undo"})


def _unended(plan: Plan) -> dict[str, dict[str, Any]]:
    """The calls marked applied whose end the ledger never got (ringfence stopped while they
    ran), each with what became of it: ``in_workspace`` (its change set is there: it
    finished; not there: the next start rolled back what it had written; None: unknown, a
    tool that writes through no change set) and ``said`` (that, for a person)."""
    out: dict[str, dict[str, Any]] = {}
    for c in plan.calls:
        note = ledger_note(c.call_id)
        if note is None or "call" not in note or "ended" in note:
            continue  # not applied, ended, or marked by a version that kept no end
        running = str(note["call"])
        when = plan.applied_mark(c.call_id)
        started = f"started {when.describe()}" if when is not None else "started"
        if c.tool not in _JOURNALED:
            out[c.call_id] = {"call": running, "in_workspace": None, "said": (
                f"{started}, never ended (ringfence stopped while it ran): whether it ran is "
                "unknown; plan apply never runs it again")}  # fmt: skip
            continue
        found = _set_of_call(plan.roots, running)
        if found is not None:
            out[c.call_id] = {"call": running, "in_workspace": True, "set": found, "said": (
                f"{started}, its end not recorded (ringfence stopped), but it finished: its "
                f"change set {found} is in the workspace")}  # fmt: skip
            continue
        by_hand = f"ringfence call {c.tool} --args {shlex.quote(json_text(c.arguments))}"
        out[c.call_id] = {"call": running, "in_workspace": False, "said": (
            f"NOT APPLIED: {started} and ringfence stopped while it ran (killed); the next "
            "start rolled back what it had written, so nothing of it is in the workspace, "
            f"and plan apply never runs a call twice: to make it, run `{by_hand}`")}  # fmt: skip
    return out


def _set_of_call(roots: tuple[str, ...], running: str) -> str | None:
    """The id of the change set the call ``running`` saved in the roots' store (recovered
    first: a store's start rolls back what a killed write left), or None."""
    from ..workspace._workspace import Workspace
    from ..workspace.changes._store import CheckpointStore

    try:
        with Workspace(list(roots)) as workspace:
            store = CheckpointStore(workspace)
            try:
                for set_id in reversed(store.ids()):
                    with contextlib.suppress(RingfenceError, OSError, ValueError):
                        cs = store.load(set_id)
                        if cs.call_id == running and not cs.staged:
                            return cs.id
            finally:
                store.close()
    except (RingfenceError, OSError):
        return None
    return None


def _staged_diff(roots: tuple[str, ...], set_id: str) -> str:
    """A staged change set (a dry run's shell command) as a diff, indented under its call."""
    from ..workspace._workspace import Workspace
    from ..workspace.changes._store import CheckpointStore

    try:
        with Workspace(list(roots)) as workspace:
            store = CheckpointStore(workspace)
            try:
                diff = store.diff(set_id)
            finally:
                store.close()
    except RingfenceError as exc:
        return f"     (change set {one_line(set_id)} cannot be shown: {error_line(exc.message)})\n"
    return "".join(f"     {line}\n" for line in diff.removesuffix("\n").split("\n") if diff)


async def run_apply(args: argparse.Namespace) -> int:
    with naming_file(args.file):
        plan = Plan.load(Path(args.file))
    before = sum(1 for c in plan.calls if plan.applied_mark(c.call_id) is not None)
    try:
        async with kernel_from_args(args) as kernel:
            outcomes = await kernel.apply_plan(
                plan, rebase_roots=args.rebase_roots, allow_looser_posture=args.allow_looser_posture
            )
    except RingfenceError as exc:
        # A call an earlier apply never ended (killed) is said, not left behind "applied".
        unended = await trio.to_thread.run_sync(_unended, plan)
        if not unended:
            raise
        [(first, fate), *_] = unended.items()
        raise exc.with_(
            message=f"{exc.message}; {len(unended)} call(s) marked applied never ended — "
            f"{first}: {fate['said']}",
            details={**exc.details, "unended": unended},
        ) from None
    unended = await trio.to_thread.run_sync(_unended, plan)
    failed = next((o.error for o in outcomes if o.error is not None), None)
    if args.json:
        report = {
            "applied": [o.to_dict() for o in outcomes],
            "applied_before": before,
            "not_attempted": len(plan.calls) - before - len(outcomes),
            "unended": unended,
        }
        if failed is None:
            return print_ok(report, True)
        # what ran before the failure, on a copy: the outcome's error is not rewritten
        return print_error(failed.with_(details={**failed.details, **report}), True)
    else:
        if before:
            sys.stdout.write(f"skipped: {before} call(s) applied before\n")
        for call_id, fate in unended.items():
            sys.stdout.write(f"call {one_line(call_id)}: {one_line(fate['said'])}\n")
        for o in outcomes:
            status = "ok" if o.ok else f"{o.error.code}: {error_line(o.error.message)}"
            sys.stdout.write(f"{one_line(o.tool)}: {status}\n")
        left = len(plan.calls) - before - len(outcomes)
        if left:
            sys.stdout.write(f"stopped: {left} call(s) not attempted\n")
    if failed is not None and failed.code == "denied" and not args.json:
        # A refused call did not run and is not spent: the plan can be applied again.
        sys.stderr.write(
            f"the refused call did not run and the plan is not spent: apply it again "
            f"(`ringfence plan apply {one_line(args.file)} --approve yes`, or on a terminal)\n"
        )
    return exit_code_for(failed) if failed else 0
