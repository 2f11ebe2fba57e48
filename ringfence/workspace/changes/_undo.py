"""The file tools' recorder and ``undo``: change sets made, linked to their call, undone.

:func:`recorded` wraps ``write_file``/``edit_file``: the writer calls the
recorder with the before- and after-image just before its rename, the
change set is saved then (so it exists before the write is visible), and
dropped again if the write fails; the call's result gets ``"checkpoint"``
and its events a ``checkpoint`` record. :func:`undo` merges a change set's
inverse through :func:`~._model.merge_changes` and saves what it did as a
change set of its own; :func:`register_undo_tool` makes it a gated tool.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import trio

from ...runtime._calls import CallContext
from ...runtime._errors import InvalidArguments, NotFound, RingfenceError, ToolError, Unavailable
from ...runtime._kernel import Kernel
from ...runtime._tools import Consequence, ToolSpec
from .._names import escape_name
from .._resolver import Place
from .._writelock import writing
from .._writer import _current_umask
from ._model import Change, ChangeSet, Image, image_at
from ._store import CheckpointStore

__all__ = ["apply_change_set", "recorded", "register_undo_tool", "undo"]

_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


# -- recording a file tool's write -------------------------------------------------------


class _Recorder:
    """The writer's ``record`` callback for one call: saves a one-write change set.

    One set id for the whole write, journaled (``B``) before the first thing of it
    reaches the disk: the first directory it makes, else its file. Each call saves the
    manifest again as it now stands (the directories made so far, the one about to be
    made, then the file), so a kill at any point leaves a manifest naming everything
    written: a directory not made yet is absent, which its rollback passes over.
    """

    def __init__(self, store: CheckpointStore, ctx: CallContext) -> None:
        self.store = store
        self.ctx = ctx
        self.saved: ChangeSet | None = None

    def _dirs(self, made: list[tuple[int, list[str]]], root: int) -> list[Change]:
        mode = 0o777 & ~_current_umask()
        return [
            Change(index, "/".join(names), None, Image("dir", mode))
            for index, names in made
            if index == root
        ]

    def _save(self, changes: list[Change]) -> None:
        if self.saved is None:
            cs = ChangeSet(
                id=self.store.new_id(),
                created=time.time(),
                tool=self.ctx.tool.name,
                changes=(),
                call_id=self.ctx.call_id,
            )
            # Journaled before the manifest exists: a write killed from here on is rolled
            # back (and its set dropped) at the next start; ``recorded`` ends it.
            self.store.journal.begin(cs.id)
        else:
            cs = self.saved
        self.saved = replace(cs, changes=tuple(changes))
        self.store.save(self.saved)

    def making(self, place: Place, name: str, made: list[tuple[int, list[str]]]) -> None:
        """Before the write makes directory ``name`` in ``place``: journaled and saved first."""
        root = place.root
        if root.is_host:
            return  # outside the roots (unrestricted posture): not checkpointed
        self._save(self._dirs([*made, (root.index, [*place.names, name])], root.index))

    def __call__(self, place: Place, data: bytes, made: list[tuple[int, list[str]]]) -> None:
        root = place.root
        if root.is_host or place.leaf is None:
            return  # outside the roots (unrestricted posture): not checkpointed
        changes = self._dirs(made, root.index)
        self._within_limit(place, len(data))
        before = image_at(place.dir_fd, place.leaf, self.store)
        special = before is not None and before.mode & _SPECIAL_BITS
        if before is not None and (special or _capable(place)):
            what = f"mode {before.mode:04o}" if special else "file capabilities"
            # Kept on the new bytes, the bit would make them the host's set-id program, and
            # the set could not be undone: an undo never writes a set-id or sticky bit.
            raise InvalidArguments(
                f"{escape_name(place.display())} has {what}: a set-uid, set-gid, sticky or "
                "capability-bearing file is not written by the file tools (an undo could not "
                "put it back); it was left as it is",
                field="path",
            )
        mode = before.mode if before is not None else 0o666 & ~_current_umask()
        after = Image("file", mode, self.store.put(data), len(data))
        changes.append(Change(root.index, "/".join([*place.names, place.leaf]), before, after))
        # Called again (the walk followed a leaf that became a link after the first call):
        # the same set, saved as it now stands.
        self._save(changes)

    def _within_limit(self, place: Place, size: int) -> None:
        """Refuse a write whose set would hold more than the store keeps
        (``RINGFENCE_CHECKPOINTS_MIB``), before a byte of it is stored, as a shell command's
        set is: ``write_file`` over a 30 MB file copied all of it into a 1 MiB store (a
        sparse file of terabytes, all its holes, until the disk was full)."""
        limit = int(self.store.retention.max_mib * (1 << 20))
        try:
            st = os.stat(place.leaf or ".", dir_fd=place.dir_fd, follow_symlinks=False)
            held = st.st_size if stat.S_ISREG(st.st_mode) else 0
        except OSError:
            held = 0  # absent: nothing to keep (a link's text is short)
        if held + size > limit:
            kept = f"its before-image ({held:,} bytes) and " if held else ""
            raise Unavailable(
                f"the change set of this write is larger than the checkpoint store keeps "
                f"({limit / (1 << 20):g} MiB, $RINGFENCE_CHECKPOINTS_MIB): the set of "
                f"{escape_name(place.display())} holds {kept}the {size:,} new bytes; it was "
                "refused, nothing was changed; raise the limit to write it",
                limit_bytes=limit,
                field="path",
            )


def _capable(place: Place) -> bool:
    """Does the file at ``place`` carry file capabilities (``security.capability``)? Copied
    onto the new bytes they would make them a privileged program, like a set-id bit."""
    try:
        names = os.listxattr(f"/proc/self/fd/{place.dir_fd}/{place.leaf}", follow_symlinks=False)
    except OSError:
        return False  # absent, or a file system without extended attributes
    return "security.capability" in names


async def recorded(
    ctx: CallContext,
    store: CheckpointStore | None,
    write: Callable[[_Recorder | None], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """Run ``write(record)``; link the change set it saved to the call (result and event).

    The result gets ``"checkpoint": <id>`` and the call's events a
    ``checkpoint`` record; if the write fails its manifest is dropped.
    Without a store the write runs unrecorded.
    """
    if store is None:
        return await write(None)
    rec = _Recorder(store, ctx)
    try:
        result = await write(rec)
    except BaseException as exc:
        if rec.saved is None:
            raise
        if isinstance(exc, RingfenceError) and exc.details.get("written"):
            # In the workspace already (only its directory's fsync failed): its set is the
            # record of that write, kept so that `undo` can give the old bytes back.
            store.journal.end(rec.saved.id)
            ctx.emit("checkpoint", id=rec.saved.id,
                     paths=[escape_name(c.path) for c in rec.saved.changes])  # fmt: skip
            raise exc.with_(
                message=f"{exc.message} (change set {rec.saved.id}: `ringfence undo` puts "
                "the old bytes back)",
                details={**exc.details, "checkpoint": rec.saved.id},
            ) from None
        store.drop(rec.saved.id)
        store.journal.end(rec.saved.id)
        raise
    if rec.saved is None:
        return result
    store.journal.end(rec.saved.id)
    ctx.emit("checkpoint", id=rec.saved.id, paths=[escape_name(c.path) for c in rec.saved.changes])
    return {**result, "checkpoint": rec.saved.id}


# -- undo --------------------------------------------------------------------------------


def undo(
    store: CheckpointStore,
    *,
    ids: list[str] | None = None,
    last: int | None = None,
    force: bool = False,
    tool: str = "undo",
    call_id: str | None = None,
    since: str | None = None,
) -> list[dict[str, Any]]:
    """Restore the before-images of change sets ``ids`` (or the ``last`` N not yet undone).

    Newest first; each undo is merged through :func:`merge_changes` (a path
    that no longer has its after-image is a conflict, unless ``force``) and
    saved as a change set of its own (``undoes`` names the one it undid), so
    an undo can be undone. Returns ``[{"undone", "checkpoint", "paths"}]``.
    Stops at the first refusal; the sets undone before it stay undone.

    ``since``: the newest change set the undo was confirmed against (the review page
    sends the newest set of the view a person confirmed it from); a set newer than it
    over any path of the sets to undo, other than this undo's own, refuses the undo
    whole, force or not, checked before each set's merge: a write made while the undo
    waited for its approval is never overwritten unseen.
    """
    if (ids is None) == (last is None):
        raise InvalidArguments("give change set ids or --last N, not both or neither", field="id")
    if ids is None:
        assert last is not None
        if last < 1:
            raise InvalidArguments("--last must be at least 1", field="last")
        summary = store.list()
        ids = [
            s["id"]
            for s in summary
            if not (s["undone_by"] or s["undoes"] or s["staged"] or s.get("damaged"))
        ][:last]
        if not ids:
            raise NotFound("there is no change set to undo", field="last")
    sets = sorted((store.load(i) for i in ids), key=lambda s: s.id, reverse=True)

    out: list[dict[str, Any]] = []
    # One operation in the journal, under one hold of the writers' lock: killed between two
    # sets, the next start rolls back the ones undone before too (it rolled back only the
    # set in flight, and left a tree that was neither before nor after the undo).
    with writing(store.workspace._resolver), store.journal.grouped() as group:
        for cs in sets:
            planned = ChangeSet(
                id=store.new_id(),
                created=time.time(),
                tool=tool,
                changes=tuple(cs.inverse_changes()),
                call_id=call_id,
                undoes=cs.id,
            )
            own = {item["checkpoint"] for item in out}
            # Checked under the writers' lock, right before the merge (until 2026-12-07 it
            # ran before the lock was taken: a writer holding the lock then saved its set
            # and wrote the file while this undo waited for it, and a forced undo
            # overwrote that write).
            check = (
                (lambda own=own: _unchanged_since(store, sets, since, own))
                if since is not None
                else None
            )
            try:
                done = _journaled(
                    store, planned, atomic=True, force=force, check=check, group=group
                )
            except RingfenceError as exc:
                if not out:
                    raise
                if exc.details.get("half_written"):  # every set of it rolled back next start
                    undone = ", ".join(item["undone"] for item in out)
                    raise exc.with_(
                        message=f"{exc.message}; that start rolls back with it the change "
                        f"sets this undo undid before it ({undone}), leaving the workspace as "
                        "it was before the undo",
                        details={**exc.details, "undone_before": out},
                    ) from exc.__cause__
                raise _after_some(exc, cs.id, out) from exc.__cause__
            out.append(
                {
                    "undone": cs.id,
                    "checkpoint": done.id,
                    "paths": sorted({escape_name(c.path) for c in cs.changes}),
                }
            )
    return out


def _after_some(exc: RingfenceError, failed: str, out: list[dict[str, Any]]) -> RingfenceError:
    """``exc`` (the undo of set ``failed`` refused) said with the sets undone before it, which
    stay undone: it said "nothing was changed" beside a workspace where ``undo --last 2``
    had undone the newer set (its file gone), and named no set."""
    undone = ", ".join(f"{item['undone']} (as {item['checkpoint']})" for item in out)
    message = exc.message.replace(
        "nothing was changed", f"nothing of change set {failed} was changed"
    )
    return exc.with_(
        message=f"{message}; the change sets undone before it stay undone: {undone}",
        details={**exc.details, "undone": out, "refused_set": failed},
    )


def _unchanged_since(
    store: CheckpointStore, sets: list[ChangeSet], since: str, own: set[str]
) -> None:
    """Raise ToolError (a conflict) when a change set newer than ``since``, not one of
    ``sets`` nor of ``own`` (this undo's), changed a path of ``sets``."""
    ids = {cs.id for cs in sets}
    paths = {escape_name(c.path) for cs in sets for c in cs.changes}
    for s in store.list():
        if s["id"] <= since or s["id"] in ids or s["id"] in own:
            continue
        shared = sorted(paths.intersection(s["paths"]))
        if shared:
            raise ToolError(
                f"conflict: change set {s['id']} ({s['tool']}) changed "
                + ", ".join(shared[:5])
                + (f" and {len(shared) - 5} more" if len(shared) > 5 else "")
                + f" after {since}, the newest change set this undo was confirmed against: "
                "nothing more was undone; look again",
                field="since",
                conflicts=shared[:50],
            )


def apply_change_set(
    store: CheckpointStore,
    set_id: str,
    *,
    atomic: bool = True,
    tool: str = "apply_changes",
    call_id: str | None = None,
) -> dict[str, Any]:
    """Merge a stored change set (a dry run's staged one) into the workspace.

    Through :func:`merge_changes`: a path that no longer has its
    before-image is a conflict naming the files and nothing is changed;
    refusals (git metadata, …) refuse the whole set when ``atomic``, else
    the rest is merged and they are listed. What was applied is saved as a
    change set of its own (undoable). Returns ``{"applied", "checkpoint",
    "files", "refused"}``.
    """
    cs = store.load(set_id)
    planned = ChangeSet(
        id=store.new_id(), created=time.time(), tool=tool, changes=cs.changes, call_id=call_id
    )
    refused: list[dict[str, Any]] = []
    done = _journaled(store, planned, atomic=atomic, refused=refused)
    return {
        "applied": cs.id,
        "checkpoint": done.id if done.changes else None,
        "files": len(done.changes),
        "refused": refused,
    }


def _journaled(
    store: CheckpointStore,
    planned: ChangeSet,
    *,
    atomic: bool,
    force: bool = False,
    refused: list[dict[str, Any]] | None = None,
    check: Callable[[], None] | None = None,
    group: list[str] | None = None,
) -> ChangeSet:
    """Merge ``planned`` durably under the journal: its manifest saved first (what a killed
    merge is rolled back from), then rewritten as what was applied (or dropped if nothing).

    ``check`` runs once the writers' lock is held, before anything is saved or merged: what
    it checks of the store (no newer set over these files) holds until the merge is done,
    since every writer saves its set and writes under that lock. It raises to refuse.
    ``group``: the journal group (:meth:`~._journal.Journal.grouped`) whose end is this one's."""
    from ._merge import merge_changes  # the change-set writer, loaded on first use

    # The writers' lock before the journal's turn, as every writer takes them (_writelock).
    with writing(store.workspace._resolver):
        if check is not None:
            check()
        # Its id made under the lock, so ids sort as sets are committed (``since`` relies
        # on it: a set committed after a newer one had an older id, passed for one seen).
        planned = replace(planned, id=store.new_id())
        with store.journal.writing(planned.id, sync=True, group=group):
            store.save(planned)
            try:
                report = merge_changes(
                    store.workspace, planned.changes, store, atomic=atomic, force=force
                )
            except BaseException as exc:
                if not (isinstance(exc, RingfenceError) and exc.details.get("half_written")):
                    store.drop(planned.id)  # nothing applied (the merge puts back what it wrote)
                # else kept, its journal open: what the next start rolls back from
                raise
            done = replace(planned, changes=report.applied)
            if not (report.applied or planned.undoes):  # an undo is recorded even when empty
                store.drop(planned.id)
            elif done != planned:  # else the manifest saved first says it already
                try:
                    store.save(done)
                except RingfenceError as exc:
                    _put_back(store, planned, exc)
    if refused is not None:
        refused.extend(report.refused)
    return done


def _put_back(store: CheckpointStore, planned: ChangeSet, exc: RingfenceError) -> None:
    """The merge is written but its manifest's final form could not be saved (the store's
    file system full): roll the merge back now, under the same turn, and raise ``exc``, which
    then says truly that nothing was changed. Before, the error said "nothing was changed"
    beside a workspace holding the whole undo. A rollback that fails too is ``half_written``:
    the set stays in flight for the next start (see :meth:`~._journal.Journal.writing`)."""
    from ._merge import roll_back

    try:
        _, left, refused = roll_back(store.workspace, planned.changes, store)
    except RingfenceError as again:
        left, refused = [again.message], []
    if left or refused:
        raise exc.with_(
            message=f"{exc.message}; the workspace was written before that, and putting it "
            f"back failed too ({', '.join(left[:10])}): it is half-written until the next "
            "start of ringfence (or `ringfence recover`) rolls it back",
            details={**exc.details, "half_written": left[:100]},
        ) from None
    store.drop(planned.id)
    raise exc


# The most change sets one ``undo`` call names (``id`` a list; ``last``'s bound too).
MAX_UNDO_IDS = 10000
# A change set's id, as ``undo`` takes it (one, or each of a list).
_SET_ID: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": "^[0-9a-f]+$"}


def register_undo_tool(
    kernel: Kernel, store: CheckpointStore, *, atomic_apply: bool = False
) -> None:
    """Register ``undo`` and ``apply_changes``: gated, evented, ``reversible`` calls (their own
    change sets are kept). ``atomic_apply``: ``apply_changes`` refuses a whole set when any
    entry is refused (else it merges the rest)."""

    async def apply(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        result = await trio.to_thread.run_sync(
            lambda: apply_change_set(store, args["id"], atomic=atomic_apply, call_id=ctx.call_id)
        )
        if result["checkpoint"]:
            ctx.emit("checkpoint", id=result["checkpoint"], applies=result["applied"])
        return result

    kernel.register(
        ToolSpec(
            "apply_changes",
            "Merge a stored change set into the workspace (what `plan apply` does with a dry "
            "run's staged shell command): only if every touched file still has its "
            "before-image, else a conflict naming the files and nothing changes. Git "
            "metadata, devices, FIFOs, set-id bits and links leaving the workspace are refused.",
            {
                "type": "object",
                "properties": {"id": {"type": "string", "minLength": 1, "pattern": "^[0-9a-f]+$"}},
                "required": ["id"],
                "additionalProperties": False,
            },
            apply,
            consequence=Consequence.REVERSIBLE,
        )
    )

    async def run(args: dict[str, Any], ctx: CallContext) -> list[dict[str, Any]]:
        given = args.get("id")
        # One id, or several: undone as one operation (killed midway, rolled back whole).
        ids = [given] if isinstance(given, str) else list(given) if given is not None else None
        last = args.get("last", None if ids else 1)
        result = await trio.to_thread.run_sync(
            lambda: undo(
                store,
                ids=ids,
                last=last,
                force=args.get("force", False),
                call_id=ctx.call_id,
                since=args.get("since"),
            )
        )
        for item in result:
            ctx.emit(
                "checkpoint", id=item["checkpoint"], undoes=item["undone"], paths=item["paths"]
            )
        return result

    kernel.register(
        ToolSpec(
            "undo",
            "Undo file changes: restore the before-images of change set 'id' (see `ringfence "
            "checkpoints list`; a list of ids: those sets, newest first, as one operation), or "
            "of the last 'last' change sets not yet undone (default 1). "
            "A file that changed since is refused unless 'force'; with 'since' (a change set id), "
            "a newer change set over the same files refuses it, force or not. The undo is "
            "itself a change set, so it can be undone.",
            {
                "type": "object",
                "properties": {
                    "id": {
                        "anyOf": [
                            dict(_SET_ID),
                            {
                                "type": "array",
                                "items": dict(_SET_ID),
                                "minItems": 1,
                                "maxItems": MAX_UNDO_IDS,
                                "uniqueItems": True,
                            },
                        ]
                    },
                    "last": {"type": "integer", "minimum": 1, "maximum": MAX_UNDO_IDS},
                    "force": {"type": "boolean"},
                    "since": {"type": "string", "minLength": 1, "pattern": "^[0-9a-f]+$"},
                },
                "additionalProperties": False,
            },
            run,
            consequence=Consequence.REVERSIBLE,
        )
    )
