"""A command's change set: its overlay upper directories read, saved, merged or staged.

``run_shell`` (:mod:`._run_shell`) hands over a finished command's
:class:`~._types.ShellResult` whose ``uppers`` hold everything it wrote
(any backend that honours ``SessionSpec.change_sets``). Here they become one
change set in the checkpoint store and reach the workspace only through the
guarded writer; see :func:`merge_or_stage` for the contract.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..runtime import CallContext, GitMetadata, InvalidArguments, RingfenceError, ToolError
from ..workspace import Change, ChangeSet, CheckpointStore
from ..workspace._names import escape_name
from ..workspace.changes._collector import collector_paused
from ..workspace.changes._model import Image, UpperSource, UpperTree
from ._mounts import LAYERS_DIR_VARIABLE
from ._types import ShellResult, Upper

if TYPE_CHECKING:
    from ..workspace import MergeReport
    from ..workspace.changes._store import PackWriter
    from ..workspace.changes._upper import UpperFiles

__all__ = ["MAX_REPORTED", "merge_or_stage"]

# Entries named in a result, an event or an error (the rest are counted).
MAX_REPORTED = 200
_SHOWN_IN_MESSAGE = 5


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

    ``pause_collector``: the process's cyclic garbage collector is held off
    while the set is read, saved and merged (the caller owns the process and
    said so: :mod:`ringfence.workspace.changes._collector`).
    """
    if not any(_has_entries(u.path) for u in result.uppers):
        return {**out, "changes": None}
    notices: list[str] = []  # said by the merge's thread, emitted here
    cs, report = await trio.to_thread.run_sync(
        lambda: _capture(result, ctx, store, roots, merge_rest, staging, notices, pause_collector)
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
        raise _refused(refused, result, "the merge", rest, changes)
    return {**out, "changes": changes}


def _refused(
    refused: list[dict[str, Any]],
    result: ShellResult,
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
        f"the command ran (exit code {result.exit_code}); refused at {where}: "
        f"{shown}{more}; none of these reached the workspace; {rest}",
        field="command",
        changes=changes,
        exit_code=result.exit_code,
    )


def _capture(
    result: ShellResult,
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
    to move (``UpperTree``) one rename for everything in it. With
    ``pause_collector`` the cyclic collector is paused meanwhile
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
            uppers: dict[int, tuple[int, dict[str, UpperSource], dict[str, UpperTree]]] = {}
            known: dict[tuple[int, str], tuple[tuple[int, ...], Image]] = {}
            for upper in result.uppers:
                fd = os.open(upper.path, flags)
                fds.append(fd)
                sources: dict[str, UpperSource] = {}
                trees: dict[str, UpperTree] = {}
                root, read = _read_upper(upper, fd, roots, store, pack, sources, trees, known)
                changes += read
                uppers[root] = (fd, sources, trees)
            pack.commit()  # before the manifest that names its blobs
            from ..workspace.changes._upper import (
                UpperFiles,  # loaded by the first command that wrote
            )

            sources = UpperFiles(uppers, known)
            return _save_and_merge(
                result, ctx, store, changes, merge_rest, staging, sources, notices
            )
        finally:
            pack.abort()
            for fd in fds:
                os.close(fd)


def _save_and_merge(
    result: ShellResult,
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
    from ..workspace import merge_changes  # the change-set writer, loaded by the first merge

    if staging:  # nothing written: no journal (see _merge_journaled)
        store.save(cs)
        # A dry run stages only what applying would merge: judged now, nothing merged.
        try:
            judged = merge_changes(
                store.workspace, changes, store, atomic=not merge_rest, judge_only=True
            )
        except RingfenceError as exc:
            raise exc.with_(
                message=f"the command ran (exit code {result.exit_code}) but its changes "
                f"cannot be staged: {exc.message}; they are kept as change set {cs.id}",
                details={**exc.details, "changes": {"id": cs.id, "files": 0, "staged": True}},
            ) from exc.__cause__
        if judged.refused:
            kept = {"id": cs.id, "files": 0, "refused": list(judged.refused[:MAX_REPORTED])}
            raise _refused(
                list(judged.refused),
                result,
                "staging",
                f"nothing was staged; the command's changes are kept as change set {cs.id}",
                {**kept, "staged": True},
            )
        return cs, None
    # Journaled: a process killed from here on is rolled back at the next start (_journal).
    with store.journal.writing(cs.id):
        store.save(cs)  # before anything is merged: every before-image is kept
        return _merge_saved(result, store, cs, merge_rest, sources, notices)


def _merge_saved(
    result: ShellResult,
    store: CheckpointStore,
    cs: ChangeSet,
    merge_rest: bool,
    sources: UpperFiles,
    notices: list[str],
) -> tuple[ChangeSet | None, MergeReport | None]:
    """Merge the saved set ``cs``; its manifest ends as what was applied (or staged, or gone)."""
    from ..workspace import merge_changes

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
            message=f"the command ran (exit code {result.exit_code}) but its changes were not "
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
            f"set ${LAYERS_DIR_VARIABLE} (the local backend) or $RINGFENCE_HOME (docker) to a "
            "directory on the workspace's mount, outside it"
        )
    if report.applied != cs.changes and report.applied:
        store.save(replace(cs, changes=report.applied))  # what was merged, as it was found
    elif not report.applied:
        store.drop(cs.id)
    return cs, report


def _read_upper(
    upper: Upper,
    upper_fd: int,
    roots: list[Path],
    store: CheckpointStore,
    pack: PackWriter,
    sources: dict[str, UpperSource],
    trees: dict[str, UpperTree],
    known: dict[tuple[int, str], tuple[tuple[int, ...], Image]],
) -> tuple[int, list[Change]]:
    """(the root's number, the changes its upper directory ``upper_fd`` holds)."""
    from ..workspace import changes_from_upper  # loaded by the first command that wrote

    real = Path(os.path.realpath(upper.root))
    if real not in roots:
        raise ToolError(f"the backend reported an upper directory for {upper.root}, not a root")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    lower_fd = os.open(real, flags)
    try:
        index = roots.index(real)
        read = changes_from_upper(
            upper_fd, lower_fd, index, store, pack=pack, sources=sources, trees=trees, known=known
        )
        return index, read
    finally:
        os.close(lower_fd)


def _has_entries(path: Path) -> bool:
    with os.scandir(path) as it:
        return next(it, None) is not None


def _paths(changes: tuple[Change, ...]) -> list[str]:
    return [escape_name(c.path) for c in changes[:MAX_REPORTED]]
