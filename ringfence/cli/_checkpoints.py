"""``ringfence checkpoints list|show ID`` and ``ringfence undo [ID | --last N] [--force]``.

``checkpoints`` reads the workspace's change sets (nothing is changed, no
session is opened); ``undo`` is a call of the ``undo`` tool through a
session's Gate, so it is decided, evented and itself undoable.
"""

from __future__ import annotations

import argparse
import datetime
import sys

from ..runtime._render import one_line
from ..workspace._workspace import Workspace
from ..workspace.changes._store import CheckpointStore
from ._output import error_line, print_error, print_ok
from ._session import add_session_options, kernel_from_args
from ._verbs import add_verb_parser, add_workspace_option


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "checkpoints")
    psub = p.add_subparsers(dest="checkpoints_verb", required=True, metavar="ACTION")
    for name, help_, func in (
        ("list", "the change sets, newest first", run_list),
        ("show", "one change set as a unified diff", run_show),
    ):
        q = psub.add_parser(name, help=help_)
        if name == "show":
            q.add_argument("id", metavar="ID", help="a change set id (see `checkpoints list`)")
        add_workspace_option(q)
        q.add_argument("--json", action="store_true", help="print one JSON object")
        q.set_defaults(func=func)
    r = add_verb_parser(sub, "recover")
    add_workspace_option(r)
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(func=run_recover)
    u = add_verb_parser(sub, "undo")
    u.add_argument("id", nargs="?", metavar="ID", help="the change set to undo")
    u.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="undo the last N change sets not undone (default: the last one)",
    )
    u.add_argument(
        "--force", action="store_true", help="also restore files that changed since the change set"
    )
    add_session_options(u, dry_run=False)
    u.set_defaults(func=run_undo)


def _store(args: argparse.Namespace) -> tuple[Workspace, CheckpointStore]:
    workspace = Workspace(args.settings.roots(args.workspace))
    try:
        return workspace, CheckpointStore(workspace, retention=args.settings.retention())
    except BaseException:
        workspace.close()
        raise


async def run_recover(args: argparse.Namespace) -> int:
    """Every store's start rolls back what a killed process left half-written (the journal):
    this verb does only that, and says what it did."""
    workspace, store = _store(args)
    with workspace:
        recovered = store.recovered
        store.close()
    if args.json:
        return print_ok(recovered.to_dict(), True)
    for kept in recovered.unreadable:
        lines = "; ".join(one_line(line) for line in kept["lines"])
        sys.stdout.write(f"{one_line(kept['journal'])}: {kept['message']} (e.g. {lines})\n")
    if not recovered.sets and not recovered.unreadable:
        sys.stdout.write("nothing to recover: no operation was left half-written\n")
        return 0
    for done in recovered.sets:
        left = (
            f"; left as found: {', '.join(one_line(p) for p in done['left'])}"
            if done["left"]
            else ""
        )
        for refused in done.get("refused", ()):
            left += f"; refused {one_line(refused['path'])}: {one_line(refused['message'])}"
        sys.stdout.write(
            f"{one_line(done['id'])}: rolled back {done['undone']} change(s), record "
            f"{done['record']}{left}\n"
        )
    return 0


async def run_list(args: argparse.Namespace) -> int:
    workspace, store = _store(args)
    with workspace:
        sets = store.list()
        store.close()
    if args.json:
        return print_ok(sets, True)
    if not sets:
        roots = ", ".join(one_line(str(r)) for r in workspace.roots)
        sys.stderr.write(f"no change sets for the workspace {roots}\n")
        return 0
    for s in sets:
        when = datetime.datetime.fromtimestamp(s["created"]).isoformat(timespec="seconds")
        note = f" (undoes {one_line(s['undoes'])})" if s["undoes"] else ""
        note += f" (undone by {one_line(s['undone_by'])})" if s["undone_by"] else ""
        note += " (staged, not applied)" if s.get("staged") else ""
        note += f" ({error_line(s['damaged'])})" if s.get("damaged") else ""
        # Names as the agent made them, through the one renderer (runtime._render).
        paths = " ".join(one_line(p) for p in s["paths"])
        sys.stdout.write(f"{one_line(s['id'])}  {when}  {one_line(s['tool'])}{note}  {paths}\n")
    return 0


async def run_show(args: argparse.Namespace) -> int:
    workspace, store = _store(args)
    with workspace:
        try:
            diff = store.diff(args.id)
        finally:
            store.close()
    if args.json:
        return print_ok({"id": args.id, "diff": diff}, True)
    sys.stdout.write(diff)  # rendered: every name and line through runtime._render
    return 0


async def run_undo(args: argparse.Namespace) -> int:
    arguments: dict = {"force": args.force}
    if args.id is not None:
        arguments["id"] = args.id
    if args.last is not None:
        arguments["last"] = args.last
    async with kernel_from_args(args) as kernel:
        outcome = await kernel.invoke("undo", arguments, origin="cli")
    if outcome.error is not None:
        return print_error(outcome.error, args.json)
    return print_ok(outcome.value, args.json)
