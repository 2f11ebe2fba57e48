"""Checkpoints: every change set kept outside the workspace, listable, showable, undoable.

Where: ``$RINGFENCE_HOME/checkpoints/<workspace id>/`` (the id is the first
16 hex digits of the sha256 of the roots' real paths), holding ``blobs/``
(file contents and link targets, named by their sha256, written once) and
``sets/<id>.json`` (one manifest per change set, written to a temporary name
and renamed, so a manifest is whole or absent). Ids sort by creation time.

Retention (:class:`Retention`, checked when a store opens and every 32
change sets after): keep at most ``keep`` change sets (default 500,
``$RINGFENCE_CHECKPOINTS_KEEP``), none older than ``max_age_days`` (default
30, ``$RINGFENCE_CHECKPOINTS_DAYS``), and blobs totalling at most
``max_mib`` (default 1024, ``$RINGFENCE_CHECKPOINTS_MIB``); the oldest change
sets go first (the newest is always kept), then blobs no set names (unless
stored in the last hour: a manifest naming them may still be on its way).

Durability: blobs and manifests are renamed into place (never half-written
under their name) but not fsynced, so a crash of ringfence loses nothing and
a power loss may lose the last change sets or leave a blob torn; every blob
is checked against its digest when read, so a torn one is refused, never
restored. ``$RINGFENCE_CHECKPOINTS_FSYNC=1`` fsyncs both (about 0.3 ms more
per write on ext4 here).

Who records: ``write_file`` and ``edit_file`` through :func:`recorded`
(before-image, after-image, directories the call made; stored before the
write is visible, the manifest dropped again if the write fails), and
``undo`` (the images it found before restoring). Not recorded: writes
outside the roots under the ``unrestricted`` posture, and shell commands
(until their overlay capture lands, see issue 15).

This module opens one path string, the store directory (outside every
root); everything below it is reached by descriptor.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from ..runtime import (
    CallContext,
    Consequence,
    InvalidArguments,
    Kernel,
    NotFound,
    ToolError,
    ToolSpec,
)
from ..runtime._files import ringfence_home
from ._changes import Change, ChangeSet, Image, image_at, merge_changes
from ._names import escape_name
from ._resolver import Place
from ._workspace import Workspace
from ._writer import _current_umask

__all__ = [
    "CheckpointStore",
    "Retention",
    "recorded",
    "register_undo_tool",
    "undo",
    "workspace_id",
]

_PRUNE_EVERY = 32
# An unreferenced blob younger than this is kept: a recorder stores blobs before its manifest.
_BLOB_GRACE_SECONDS = 3600


@dataclass(frozen=True)
class Retention:
    """How many change sets a store keeps (see the module docstring)."""

    keep: int = 500
    max_age_days: float = 30.0
    max_mib: float = 1024.0
    fsync: bool = False

    @classmethod
    def from_env(cls) -> Retention:
        def read(name: str, default: float) -> float:
            raw = os.environ.get(name)
            if raw is None:
                return default
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if value <= 0:
                raise InvalidArguments(
                    f"${name} must be a positive number, not {raw!r}", field=name
                )
            return value

        return cls(
            keep=int(read("RINGFENCE_CHECKPOINTS_KEEP", cls.keep)),
            max_age_days=read("RINGFENCE_CHECKPOINTS_DAYS", cls.max_age_days),
            max_mib=read("RINGFENCE_CHECKPOINTS_MIB", cls.max_mib),
            fsync=os.environ.get("RINGFENCE_CHECKPOINTS_FSYNC") == "1",
        )


def workspace_id(workspace: Workspace) -> str:
    """The store's name for a workspace: a digest of its roots' real paths, in order."""
    joined = "\0".join(str(p) for p in workspace.roots)
    return hashlib.sha256(os.fsencode(joined)).hexdigest()[:16]


class CheckpointStore:
    """The change sets of one workspace (thread-safe; see the module docstring)."""

    def __init__(self, workspace: Workspace, *, retention: Retention | None = None) -> None:
        self.workspace = workspace
        self.retention = retention or Retention.from_env()
        self.path = ringfence_home() / "checkpoints" / workspace_id(workspace)
        self._lock = threading.Lock()
        self._since_prune = 0
        fd = _open_store(str(self.path))
        try:
            self._blobs_fd = _subdir(fd, "blobs")
            self._sets_fd = _subdir(fd, "sets")
        finally:
            os.close(fd)
        self.prune()

    def close(self) -> None:
        for fd in (self._blobs_fd, self._sets_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- blobs -------------------------------------------------------------------------

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        try:
            os.stat(digest, dir_fd=self._blobs_fd)
            return digest  # content-addressed: already there
        except FileNotFoundError:
            pass
        _write_atomic(self._blobs_fd, digest, data, sync=self.retention.fsync)
        return digest

    def put_fd(self, fd: int) -> tuple[str, int]:
        """Copy an open file into the store as it is read (digest, size); no full copy in memory."""
        temp = f".in.{secrets.token_hex(6)}"
        out = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=self._blobs_fd
        )
        h, size = hashlib.sha256(), 0
        try:
            try:
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
                    size += len(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
                if self.retention.fsync:
                    os.fsync(out)
            finally:
                os.close(out)
            digest = h.hexdigest()
            os.replace(temp, digest, src_dir_fd=self._blobs_fd, dst_dir_fd=self._blobs_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._blobs_fd)
            raise
        return digest, size

    def get(self, digest: str) -> bytes:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise InvalidArguments(f"{digest!r} is not a sha256 digest", field="digest")
        try:
            fd = os.open(digest, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._blobs_fd)
        except FileNotFoundError:
            raise NotFound(f"blob {digest} is missing from {self.path} (pruned?)") from None
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != digest:
            # Not fsynced by default: after a power loss a blob can be empty or torn.
            raise ToolError(f"blob {digest} in {self.path} is damaged; it is not used")
        return data

    # -- change sets -------------------------------------------------------------------

    def new_id(self) -> str:
        return f"{time.time_ns() // 1000:014x}{secrets.token_hex(3)}"

    def save(self, cs: ChangeSet) -> None:
        data = json.dumps(cs.to_json(), separators=(",", ":")).encode()
        _write_atomic(self._sets_fd, f"{cs.id}.json", data, sync=self.retention.fsync)
        with self._lock:
            self._since_prune += 1
            due = self._since_prune >= _PRUNE_EVERY
        if due:
            self.prune()

    def drop(self, set_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{set_id}.json", dir_fd=self._sets_fd)

    def ids(self) -> list[str]:
        """Every change set's id, oldest first."""
        return sorted(n[:-5] for n in os.listdir(self._sets_fd) if n.endswith(".json"))

    def load(self, set_id: str) -> ChangeSet:
        if not set_id or not set_id.isalnum():
            raise InvalidArguments(f"{set_id!r} is not a change set id", field="id")
        try:
            fd = os.open(f"{set_id}.json", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._sets_fd)
        except FileNotFoundError:
            raise NotFound(
                f"no change set {set_id} (see `ringfence checkpoints list`)", field="id"
            ) from None
        with os.fdopen(fd, "rb") as f:
            return ChangeSet.from_json(json.loads(f.read()))

    def list(self) -> list[dict[str, Any]]:
        """A summary of each change set, newest first: id, created, tool, paths, undone_by."""
        sets = [self.load(i) for i in self.ids()]
        undone = {s.undoes: s.id for s in sets if s.undoes}
        return [
            {
                "id": s.id,
                "created": s.created,
                "tool": s.tool,
                "paths": sorted({escape_name(c.path) for c in s.changes}),
                "undoes": s.undoes,
                "undone_by": undone.get(s.id),
            }
            for s in reversed(sets)
        ]

    def diff(self, set_id: str) -> str:
        """The change set as a unified diff (binary or non-UTF-8 content is named, not shown)."""
        out: list[str] = []
        for c in self.load(set_id).changes:
            name = escape_name(c.path)
            old, new = self._text(c.before), self._text(c.after)
            if old is None or new is None:
                out.append(f"Binary or special entry {name} changed\n")
                continue
            before = f"a/{name}" if c.before is not None else "/dev/null"
            after = f"b/{name}" if c.after is not None else "/dev/null"
            out.extend(
                difflib.unified_diff(
                    old.splitlines(keepends=True), new.splitlines(keepends=True), before, after
                )
            )
        return "".join(line if line.endswith("\n") else line + "\n" for line in out)

    def _text(self, image: Image | None) -> str | None:
        if image is None or image.kind == "dir":
            return ""
        if image.kind == "symlink" and image.digest:
            return f"-> {os.fsdecode(self.get(image.digest))}\n"
        if image.kind != "file" or image.digest is None:
            return None
        data = self.get(image.digest)
        try:
            return None if b"\0" in data else data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    # -- retention ---------------------------------------------------------------------

    def prune(self) -> None:
        """Apply the retention policy: oldest change sets first, then unreferenced blobs."""
        with self._lock:
            self._since_prune = 0
            ids = self.ids()
            sets: dict[str, set[str]] = {}
            for i in ids:
                with contextlib.suppress(Exception):
                    cs = self.load(i)
                    sets[i] = {
                        im.digest
                        for c in cs.changes
                        for im in (c.before, c.after)
                        if im is not None and im.digest
                    }
            sizes: dict[str, int] = {}
            young: set[str] = set()  # stored in the last hour: maybe a manifest still to come
            for name in os.listdir(self._blobs_fd):
                with contextlib.suppress(OSError):
                    st = os.stat(name, dir_fd=self._blobs_fd)
                    sizes[name] = st.st_size
                    if st.st_mtime > time.time() - _BLOB_GRACE_SECONDS:
                        young.add(name)
            limit = self.retention.max_mib * (1 << 20)
            oldest_kept = (time.time() - self.retention.max_age_days * 86400) * 1e6
            order = sorted(sets)

            def total() -> int:
                live = set().union(*sets.values()) if sets else set()
                return sum(sizes.get(d, 0) for d in live)

            for i in order[:-1]:  # the newest is always kept
                too_old = int(i[:14], 16) < oldest_kept
                if len(sets) > self.retention.keep or too_old or total() > limit:
                    del sets[i]
                    self.drop(i)
            live = set().union(*sets.values()) if sets else set()
            for name in sizes:
                if name not in live and name not in young and not name.startswith("."):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=self._blobs_fd)


def _open_store(path: str) -> int:
    """The store directory (outside every root), made 0700 if missing; a descriptor to it."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _subdir(fd: int, name: str) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=fd)
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)


def _write_atomic(dir_fd: int, name: str, data: bytes, *, sync: bool) -> None:
    temp = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


# -- recording a file tool's write -------------------------------------------------------


class _Recorder:
    """The writer's ``record`` callback for one call: saves a one-write change set."""

    def __init__(self, store: CheckpointStore, ctx: CallContext) -> None:
        self.store = store
        self.ctx = ctx
        self.saved: ChangeSet | None = None

    def __call__(self, place: Place, data: bytes, made: list[tuple[int, list[str]]]) -> None:
        root = place.root
        if root.is_host or place.leaf is None:
            return  # outside the roots (unrestricted posture): not checkpointed
        changes = [
            Change(index, "/".join(names), None, Image("dir", 0o777 & ~_current_umask()))
            for index, names in made
            if index == root.index
        ]
        before = image_at(place.dir_fd, place.leaf, self.store)
        mode = before.mode if before is not None else 0o666 & ~_current_umask()
        after = Image("file", mode, self.store.put(data), len(data))
        changes.append(Change(root.index, "/".join([*place.names, place.leaf]), before, after))
        cs = ChangeSet(
            id=self.store.new_id(),
            created=time.time(),
            tool=self.ctx.tool.name,
            changes=tuple(changes),
            call_id=self.ctx.call_id,
        )
        if self.saved is not None:
            # Called again: the walk followed a leaf that became a link after the first call.
            self.store.drop(self.saved.id)
        self.store.save(cs)
        self.saved = cs


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
    except BaseException:
        if rec.saved is not None:
            store.drop(rec.saved.id)
        raise
    if rec.saved is None:
        return result
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
) -> list[dict[str, Any]]:
    """Restore the before-images of change sets ``ids`` (or the ``last`` N not yet undone).

    Newest first; each undo is merged through :func:`merge_changes` (a path
    that no longer has its after-image is a conflict, unless ``force``) and
    saved as a change set of its own (``undoes`` names the one it undid), so
    an undo can be undone. Returns ``[{"undone", "checkpoint", "paths"}]``.
    Stops at the first refusal; the sets undone before it stay undone.
    """
    if (ids is None) == (last is None):
        raise InvalidArguments("give change set ids or --last N, not both or neither", field="id")
    if ids is None:
        assert last is not None
        if last < 1:
            raise InvalidArguments("--last must be at least 1", field="last")
        summary = store.list()
        ids = [s["id"] for s in summary if not s["undone_by"] and not s["undoes"]][:last]
        if not ids:
            raise NotFound("there is no change set to undo", field="last")
    sets = sorted((store.load(i) for i in ids), key=lambda s: s.id, reverse=True)
    out = []
    for cs in sets:
        report = merge_changes(
            store.workspace, cs.inverse_changes(), store, atomic=True, force=force
        )
        done = ChangeSet(
            id=store.new_id(),
            created=time.time(),
            tool=tool,
            changes=report.applied,
            call_id=call_id,
            undoes=cs.id,
        )
        store.save(done)
        out.append(
            {
                "undone": cs.id,
                "checkpoint": done.id,
                "paths": sorted({escape_name(c.path) for c in cs.changes}),
            }
        )
    return out


def register_undo_tool(kernel: Kernel, store: CheckpointStore) -> None:
    """Register ``undo``: a gated, evented, ``reversible`` call (its own change set is kept)."""

    async def run(args: dict[str, Any], ctx: CallContext) -> list[dict[str, Any]]:
        ids = [args["id"]] if "id" in args else None
        last = args.get("last", None if ids else 1)
        result = await trio.to_thread.run_sync(
            lambda: undo(
                store,
                ids=ids,
                last=last,
                force=args.get("force", False),
                call_id=ctx.call_id,
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
            "checkpoints list`), or of the last 'last' change sets not yet undone (default 1). "
            "A file that changed since is refused unless 'force'. The undo is itself a change "
            "set, so it can be undone.",
            {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "minLength": 1, "pattern": "^[0-9a-f]+$"},
                    "last": {"type": "integer", "minimum": 1, "maximum": 10000},
                    "force": {"type": "boolean"},
                },
                "additionalProperties": False,
            },
            run,
            consequence=Consequence.REVERSIBLE,
        )
    )
