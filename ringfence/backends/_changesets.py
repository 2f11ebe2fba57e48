"""A command's change set: its overlay upper directories read, saved, merged or staged.

``run_shell`` (:mod:`._run_shell`) hands over a finished command's
:class:`~._types.ShellResult` whose ``uppers`` hold everything it wrote
(any backend that honours ``SessionSpec.change_sets``). Here they become one
change set in the checkpoint store and reach the workspace only through the
guarded writer; see :func:`merge_or_stage` for the contract. A writable
confined MCP server's uppers, still mounted, are read the same way after each
of its calls (:func:`merge_uppers` with a :class:`LiveUppers`:
``confined._writes``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..runtime._calls import CallContext
from ..runtime._errors import (
    GitMetadata,
    InvalidArguments,
    RingfenceError,
    ToolError,
    Unavailable,
)
from ..workspace._names import escape_name
from ..workspace._writelock import writing
from ..workspace.changes._collector import collector_paused
from ..workspace.changes._model import Change, ChangeSet, Image, UpperSource, UpperTree
from ..workspace.changes._store import CheckpointStore
from ._mounts import LAYERS_DIR_FIELD
from ._types import ShellResult, Upper

if TYPE_CHECKING:
    from ..workspace.changes._merge import MergeReport
    from ..workspace.changes._store import PackWriter
    from ..workspace.changes._upper import UpperFiles, UpperState

__all__ = ["MAX_REPORTED", "LiveUppers", "merge_or_stage", "merge_uppers", "wrote"]

# Entries named in a result, an event or an error (the rest are counted).
MAX_REPORTED = 200
_SHOWN_IN_MESSAGE = 5


class LiveUppers:
    """Upper directories still under a live overlay, read again and again (a writable
    MCP server's, after each call): nothing is renamed out of them (the merge writes
    copies from the store), and an entry read before in the same state makes no
    change again (``changes_from_upper``'s ``state``). Only what reads them (one
    capture at a time) touches ``states``."""

    def __init__(self) -> None:
        self.states: dict[int, UpperState] = {}  # root -> what its last read found


async def merge_or_stage(
    result: ShellResult,
    out: dict[str, Any],
    ctx: CallContext,
    store: CheckpointStore,
    *,
    roots: list[Path],
    merge_rest: bool,
    staging: bool,
    pause_collector: bool = False,
) -> dict[str, Any]:
    """A finished command's uppers merged or staged: :func:`merge_uppers` for ``run_shell``."""
    return await merge_uppers(
        result.uppers,
        out,
        ctx,
        store,
        roots=roots,
        merge_rest=merge_rest,
        staging=staging,
        ran=f"the command ran (exit code {result.exit_code})",
        facts={"exit_code": result.exit_code},
        pause_collector=pause_collector,
    )


async def merge_uppers(
    uppers: Sequence[Upper],
    out: dict[str, Any],
    ctx: CallContext,
    store: CheckpointStore,
    *,
    roots: list[Path],
    merge_rest: bool,
    staging: bool,
    ran: str,
    facts: Mapping[str, Any] | None = None,
    live: LiveUppers | None = None,
    field: str | None = "command",
    pause_collector: bool = False,
) -> dict[str, Any]:
    """``out`` (the call's result) with ``changes: {id, files, refused}``, after the merge.

    Nothing written: ``changes`` is None (checked without a thread hop).
    Otherwise the uppers are read into a change set that is saved with every
    before-image *before* anything is merged, then merged through
    :func:`~ringfence.workspace.merge_changes`: refused entries (git
    metadata, special files, set-id bits, links leaving the roots) are left
    out and the rest merged (``merge_rest``), or the whole set is refused.
    The saved set is rewritten with what was applied (dropped if nothing
    was), and a ``checkpoint`` event names it. A refusal raises the first
    refused entry's error (``git_metadata``, ``invalid_arguments``) after the
    rest was merged, with ``details["changes"]``; a conflict (a touched file
    changed meanwhile) raises ``tool_error`` naming the files, nothing merged
    (then, as when the whole set is refused, the set stays in the store as
    ``staged``, named in the error: what the command wrote is not lost).

    ``staging`` (a dry run): the set is saved as ``staged``, nothing is
    merged, and a nested ``apply_changes`` call for it is made, which the
    Gate stages into the plan; ``changes`` says ``staged``.

    ``ran`` opens every error's message (what ran, e.g. ``the command ran (exit
    code 1)``); ``facts`` go into its details; a refusal names ``field``.
    ``live``: the uppers are still mounted (see :class:`LiveUppers`).
    ``pause_collector``: the process's cyclic garbage collector is held off
    while the set is read, saved and merged (the caller owns the process and
    said so: :mod:`ringfence.workspace.changes._collector`).
    """
    if not any(wrote(u) for u in uppers):
        return {**out, "changes": None}
    notices: list[str] = []  # said by the merge's thread, emitted here
    how = _How(ran, dict(facts or {}), live, field)
    cs, report = await trio.to_thread.run_sync(
        lambda: _capture(
            uppers, how, ctx, store, roots, merge_rest, staging, notices, pause_collector
        )
    )
    for message in notices:
        ctx.emit("notice", message=message)
    if cs is None:
        return {**out, "changes": None}
    if report is None:  # staged
        outcome = await ctx.invoke("apply_changes", {"id": cs.id})
        if outcome.error is not None:
            raise outcome.error
        ctx.emit("checkpoint", id=cs.id, staged=True, paths=_paths(cs.changes))
        changes = {"id": cs.id, "files": len(cs.changes), "refused": [], "staged": True}
        return {**out, "changes": changes}
    refused = list(report.refused)
    changes = {
        "id": cs.id if report.applied else None,
        "files": len(report.applied),
        "refused": refused[:MAX_REPORTED],
    }
    ctx.emit(
        "checkpoint", id=changes["id"], paths=_paths(report.applied), refused=refused[:MAX_REPORTED]
    )
    if refused:
        rest = (
            f"the rest ({changes['files']} entries) was merged as change set {cs.id}"
            if report.applied
            else "nothing else was changed"
        )
        raise _refused(refused, how, "the merge", rest, changes)
    return {**out, "changes": changes}


@dataclass(frozen=True)
class _How:
    """What ran (for messages), the facts its errors carry, and whether the uppers are live."""

    ran: str
    facts: dict[str, Any]
    live: LiveUppers | None
    field: str | None = "command"


def _refused(
    refused: list[dict[str, Any]],
    how: _How,
    where: str,
    rest: str,
    changes: dict[str, Any],
) -> RingfenceError:
    """The error naming the entries refused at ``where`` (the first one's code)."""
    error = GitMetadata if refused[0]["code"] == "git_metadata" else InvalidArguments
    shown = ", ".join(f"{r['path']} ({r['code']})" for r in refused[:_SHOWN_IN_MESSAGE])
    extra = len(refused) - _SHOWN_IN_MESSAGE
    more = f" and {extra} more (details.changes.refused)" if extra > 0 else ""
    return error(
        f"{how.ran}; refused at {where}: {shown}{more}; none of these reached the workspace; "
        f"{rest}",
        field=how.field,
        changes=changes,
        **how.facts,
    )


def _capture(
    uppers: Sequence[Upper],
    how: _How,
    ctx: CallContext,
    store: CheckpointStore,
    roots: list[Path],
    merge_rest: bool,
    staging: bool,
    notices: list[str],
    pause_collector: bool,
) -> tuple[ChangeSet | None, MergeReport | None]:
    """Read, save, then merge (unless ``staging``): (the set, the merge report or None).

    The files' bytes go into one pack in the store; the merge then renames
    the upper files into the workspace (``UpperFiles``), so a command's new
    file costs one new inode (its own), not three, and a new directory fit
    to move (``UpperTree``) one rename for everything in it (live uppers: none,
    the merge writes copies). With ``pause_collector`` the cyclic collector is
    paused meanwhile
    (:func:`~ringfence.workspace.changes._collector.collector_paused`).
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds: list[int] = []
    paused = collector_paused() if pause_collector else contextlib.nullcontext()
    with paused:  # ~60,000 objects, none in a cycle: see _collector
        # A set larger than the store keeps is refused whole as it is read (nothing stored).
        pack = store.pack(limit_bytes=int(store.retention.max_mib * (1 << 20)))
        try:
            changes: list[Change] = []
            read_uppers: dict[int, tuple[int, dict[str, UpperSource], dict[str, UpperTree]]] = {}
            known: dict[tuple[int, str], tuple[tuple[int, ...], Image]] = {}
            states: dict[int, UpperState] = {}
            since_ns = time.time_ns()  # nothing writes the uppers now (see UpperState)
            for upper in uppers:
                fd = os.open(upper.path, flags)
                fds.append(fd)
                sources: dict[str, UpperSource] = {}
                trees: dict[str, UpperTree] = {}
                root, read = _read_upper(
                    upper, fd, roots, store, pack, sources, trees, known, how.live, states, since_ns
                )
                changes += read
                read_uppers[root] = (fd, sources, trees)
            pack.commit()  # before the manifest that names its blobs
            if how.live is not None:  # read whole: next time, what is read again is no change
                how.live.states = states
            from ..workspace.changes._upper import (
                UpperFiles,  # loaded by the first command that wrote
            )

            files = UpperFiles(read_uppers, known)
            return _save_and_merge(how, ctx, store, changes, merge_rest, staging, files, notices)
        finally:
            pack.abort()
            for fd in fds:
                os.close(fd)


def _save_and_merge(
    how: _How,
    ctx: CallContext,
    store: CheckpointStore,
    changes: list[Change],
    merge_rest: bool,
    staging: bool,
    sources: UpperFiles,
    notices: list[str],
) -> tuple[ChangeSet | None, MergeReport | None]:
    if not changes:
        return None, None
    cs = ChangeSet(
        id=store.new_id(),
        created=time.time(),
        tool=ctx.tool.name,
        changes=tuple(changes),
        call_id=ctx.call_id,
        staged=staging,
    )
    from ..workspace.changes._merge import merge_changes

    if staging:  # nothing written: no journal (see _merge_journaled)
        store.save(cs)
        # A dry run stages only what applying would merge: judged now, nothing merged.
        try:
            judged = merge_changes(
                store.workspace, changes, store, atomic=not merge_rest, judge_only=True
            )
        except RingfenceError as exc:
            raise exc.with_(
                message=f"{how.ran} but its changes "
                f"cannot be staged: {exc.message}; they are kept as change set {cs.id}",
                details={**exc.details, "changes": {"id": cs.id, "files": 0, "staged": True}},
            ) from exc.__cause__
        if judged.refused:
            kept = {"id": cs.id, "files": 0, "refused": list(judged.refused[:MAX_REPORTED])}
            raise _refused(
                list(judged.refused),
                how,
                "staging",
                f"nothing was staged; the command's changes are kept as change set {cs.id}",
                {**kept, "staged": True},
            )
        return cs, None
    # Journaled: a process killed from here on is rolled back at the next start (_journal).
    try:
        # The writers' lock before the journal's turn, as every writer takes them (_writelock).
        with writing(store.workspace._resolver):
            # Its id made under the lock: ids sort as sets are committed, which an undo
            # confirmed against the newest set a person saw relies on (``undo``'s ``since``).
            # Made before the wait, a set committed after a newer one was shown passed for
            # one the person had seen, and a forced undo overwrote its write.
            cs = replace(cs, id=store.new_id())
            with store.journal.writing(cs.id):
                store.save(cs)  # before anything is merged: every before-image is kept
                return _merge_saved(how, store, cs, merge_rest, sources, notices)
    except Unavailable as exc:
        if not exc.details.get("busy"):
            raise
        # Another process's writes held the workspace too long: kept staged, not lost.
        store.save(replace(cs, staged=True))
        raise exc.with_(
            message=f"{how.ran} but its changes were not merged: {exc.message}; they are "
            f"kept as the staged change set {cs.id}",
            details={**exc.details, "changes": {"id": cs.id, "files": 0, "staged": True}},
        ) from None


def _merge_saved(
    how: _How,
    store: CheckpointStore,
    cs: ChangeSet,
    merge_rest: bool,
    sources: UpperFiles,
    notices: list[str],
) -> tuple[ChangeSet | None, MergeReport | None]:
    """Merge the saved set ``cs``; its manifest ends as what was applied (or staged, or gone)."""
    from ..workspace.changes._merge import merge_changes

    changes = cs.changes
    try:
        report = merge_changes(
            store.workspace,
            changes,
            store,
            atomic=not merge_rest,
            durable=False,
            sources=sources,
        )
    except RingfenceError as exc:
        # Nothing was merged; the set stays in the store, staged, so what the command wrote
        # is not lost with its upper directories (`checkpoints show`, `apply_changes`).
        store.save(replace(cs, staged=True))
        raise exc.with_(
            message=f"{how.ran} but its changes were not "
            f"merged: {exc.message}; they are kept as the staged change set {cs.id}",
            details={**exc.details, "changes": {"id": cs.id, "files": 0, "staged": True}},
        ) from exc.__cause__
    except BaseException:
        store.drop(cs.id)
        raise
    if sources.disabled:  # EXDEV: the uppers are on another mount than the workspace
        notices.append(
            "this command's files were copied into the workspace, not renamed: its overlay's "
            "upper directory is on another mount than the workspace (slower for many files); "
            f"set {LAYERS_DIR_FIELD} ($RINGFENCE_LAYERS_DIR; the local backend) or the home "
            "($RINGFENCE_HOME; docker) to a directory on the workspace's mount, outside it"
        )
    if report.applied != cs.changes and report.applied:
        try:
            store.save(replace(cs, changes=report.applied))  # what was merged, as it was found
        except RingfenceError as exc:
            raise _unrecorded(how, store, cs, exc) from None
    elif not report.applied:
        store.drop(cs.id)
    return cs, report


def _unrecorded(how: _How, store: CheckpointStore, cs: ChangeSet, exc: RingfenceError) -> Exception:
    """The merge is written but the store could not save what it applied (full): the set on
    disk still names its refused entries too, so its undo would meet a conflict for good, and
    the error said "nothing was changed" beside the merged files. The merge is rolled back
    now, and the set left in flight (``half_written``: no ``E`` line), so the next start,
    with room in the store, finds it in place and keeps it staged (``apply_changes``)."""
    from ..workspace.changes._merge import roll_back

    try:
        _, left, refused = roll_back(store.workspace, cs.changes, store)
    except RingfenceError as again:
        left, refused = [again.message], []
    shown = [r["path"] for r in refused]
    if left or refused:
        state = (
            "putting back what was merged failed too "
            f"({', '.join([*left, *shown][:10])}): the workspace is half-written until the "
            "next start of ringfence (or `ringfence recover`) rolls it back"
        )
    else:
        state = (
            "what was merged is put back, nothing was changed; the next start of ringfence "
            "(or `ringfence recover`), with room in the store, keeps the changes as a staged "
            f"change set {cs.id}"
        )
    message = exc.message.split(": nothing was changed")[0]
    return exc.with_(
        message=f"{how.ran} but the store could not record its merge ({message}): {state}",
        details={**exc.details, "half_written": [*left, *shown] or [cs.id]},
    )


def _read_upper(
    upper: Upper,
    upper_fd: int,
    roots: list[Path],
    store: CheckpointStore,
    pack: PackWriter,
    sources: dict[str, UpperSource],
    trees: dict[str, UpperTree],
    known: dict[tuple[int, str], tuple[tuple[int, ...], Image]],
    live: LiveUppers | None,
    states: dict[int, UpperState],
    since_ns: int,
) -> tuple[int, list[Change]]:
    """(the root's number, the changes its upper directory ``upper_fd`` holds).

    ``live``: nothing of it may be renamed, and entries read before in the same
    state are no change (their new states go into ``states``)."""
    from ..workspace.changes._upper import changes_from_upper

    real = Path(os.path.realpath(upper.root))
    if real not in roots:
        raise ToolError(f"the backend reported an upper directory for {upper.root}, not a root")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    lower_fd = os.open(real, flags)
    try:
        index = roots.index(real)
        if live is not None:
            from ..workspace.changes._upper import UpperState

            state = states[index] = UpperState(since_ns)
            read = changes_from_upper(
                upper_fd,
                lower_fd,
                index,
                store,
                pack=pack,
                known=known,
                previous=live.states.get(index),
                state=state,
                made_mode=upper.made_mode,
            )
            return index, read
        read = changes_from_upper(
            upper_fd,
            lower_fd,
            index,
            store,
            pack=pack,
            sources=sources,
            trees=trees,
            known=known,
            made_mode=upper.made_mode,
        )
        return index, read
    finally:
        os.close(lower_fd)


def wrote(upper: Upper) -> bool:
    """Whether a command (or a writable process) left anything in ``upper``: an entry, or
    a mode other than the one it was made with (``Upper.made_mode``: the root's own
    ``chmod``). A few system calls, cheap enough for the event loop; an upper directory
    that is gone holds nothing."""
    try:
        with os.scandir(upper.path) as it:
            if next(it, None) is not None:
                return True
        if upper.made_mode is None:
            return False
        mode = stat.S_IMODE(os.stat(upper.path).st_mode)
    except FileNotFoundError:
        return False
    return mode != upper.made_mode


def _paths(changes: tuple[Change, ...]) -> list[str]:
    return [escape_name(c.path) for c in changes[:MAX_REPORTED]]
