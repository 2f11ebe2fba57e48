"""A writable confined process's writes: on overlays, read frozen after each call, merged.

For an MCP stdio server with ``sandbox = "local"`` and ``sandbox_writable =
true`` (:func:`~._exec.confine_exec`): the roots are read-only in its
sandbox and the supervisor mounts an overlay on each, once, for the
server's whole life (:func:`~._supervisor.run_exec`); every write lands in
the overlays' upper directories, outside every root. The whole sandbox
runs in a cgroup of its own (:func:`ringfence._proc.cgroup_entry`).

After each call the host makes to the server, :meth:`ExecWrites.settle`
freezes that cgroup (``cgroup.freeze``, then ``frozen 1`` in
``cgroup.events``: no process of the sandbox runs, writes or forks), reads
the upper directories into the call's change set, saves it with every
before-image and merges it through the guarded writer
(:func:`~ringfence.backends._changesets.merge_uppers`: every refusal,
the resulting-tree check, the write journal), then thaws the cgroup.
Calls to one server take turns (:attr:`ExecWrites.lock`), so a set holds
what the server wrote up to the end of its call: during it, and since the
previous call's capture (writes between calls join the next call's set).

What holds, and what does not:

- The roots change only through the merge: the overlay never writes its
  lower layer, the upper directories are bound where Landlock grants the
  server no write, and the kernel reads them from outside the sandbox.
- The upper directories stay mounted, so the merge writes copies from the
  store (nothing is renamed out of them) and an entry read before in the
  same state is no change again (:class:`~ringfence.backends._changesets.LiveUppers`):
  a refused write is reported once, at the call that made it, and the
  server keeps seeing it (it stays in its upper directory) for the rest of
  its life; a file the host changes after the server wrote it keeps the
  host's bytes, and the server keeps seeing its own.
- The merge writes the overlays' lower layers while they are mounted,
  which the kernel's overlayfs documentation leaves undefined ("will not
  result in a crash or deadlock"): what the server then sees of the roots
  outside its own writes may be stale. Its own writes are in the upper
  directories and win.
- What the server writes after its last call is never read: when its
  process ends (the session closes, it crashes, the connection breaks),
  its upper directories are removed with their cgroup.
- A call that is cancelled reads nothing; its writes join the next call's set.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ...runtime._calls import CallContext
from ...runtime._errors import ToolError
from .._changesets import LiveUppers, merge_uppers, wrote
from .._trees import remove_tree
from .._types import Upper

if TYPE_CHECKING:
    from ..._confine.cgroup import Cgroup
    from ...workspace.changes._store import CheckpointStore

__all__ = ["FREEZE_LIMIT", "ExecChanges", "ExecWrites"]

FREEZE_LIMIT = 10.0  # how long a sandbox may take to freeze before its call fails
_POLL = 0.0005


def _never() -> bool:
    return False


@dataclass(frozen=True)
class ExecChanges:
    """Where a writable process's writes go: ``store`` keeps each call's change set (None:
    nothing is ever merged, the writes are discarded with the process: ``mcp inspect``);
    ``merge_rest`` merges what was not refused (else a refusal refuses the set whole);
    ``staging()`` says whether the session is a dry run (the set is then staged, as
    ``run_shell``'s is); ``spool_dir`` holds the upper directories (swept when a kernel
    that died left them)."""

    store: CheckpointStore | None
    merge_rest: bool = True
    staging: Callable[[], bool] = _never
    spool_dir: Path | None = None


class ExecWrites:
    """One writable process's overlays and cgroup, read after each call (see the module)."""

    def __init__(
        self, roots: list[Path], layers: Path, claim: int, group: Cgroup, changes: ExecChanges
    ) -> None:
        self._roots = roots
        self._layers = layers
        self._claim = claim  # marks the layers in use (``_plan.claimed_layers``); ours to close
        self._group = group
        self._changes = changes
        self._live = LiveUppers()
        # The uppers' modes before the process started (its roots'; _plan._empty_uppers).
        self._made = [
            stat.S_IMODE(os.stat(layers / str(i) / "upper").st_mode) for i in range(len(roots))
        ]
        self._closed = False
        self.lock = trio.Lock()  # one call (and its capture) at a time

    @property
    def uppers(self) -> list[Upper]:
        return [
            Upper(r, self._layers / str(i) / "upper", made_mode=mode)
            for i, (r, mode) in enumerate(zip(self._roots, self._made, strict=True))
        ]

    async def settle(self, ctx: CallContext, out: dict[str, Any]) -> dict[str, Any]:
        """``out`` with ``changes``: what the process wrote until now, merged as this call's
        change set (or staged, under a dry run). Hold :attr:`lock` from before the call.

        Raises what :func:`~ringfence.backends._changesets.merge_uppers`
        raises (a refused entry's ``git_metadata``/``invalid_arguments``
        naming every refused path, after the rest was merged; a conflict),
        and ToolError when the sandbox does not freeze within
        :data:`FREEZE_LIMIT` (nothing is read then).
        """
        store = self._changes.store
        if self._closed or store is None:
            return {**out, "changes": None}
        if not any(wrote(u) for u in self.uppers):
            return {**out, "changes": None}  # nothing written yet: no freeze
        await self._freeze()
        try:
            return await merge_uppers(
                self.uppers,
                out,
                ctx,
                store,
                roots=self._roots,
                merge_rest=self._changes.merge_rest,
                staging=self._changes.staging(),
                ran=f"{ctx.tool.name} ran",
                live=self._live,
                field=None,
            )
        finally:
            with contextlib.suppress(OSError):  # gone with its process: nothing to thaw
                self._group.thaw()

    async def _freeze(self) -> None:
        """Freeze the sandbox's cgroup and wait until every member is frozen."""
        why = f"it did not freeze within {FREEZE_LIMIT:g}s"
        try:
            self._group.freeze()
            with trio.move_on_after(FREEZE_LIMIT):
                while not self._group.frozen():
                    await trio.sleep(_POLL)
                return
        except OSError as exc:
            why = f"its cgroup could not be frozen: {exc.strerror or exc}"
        except BaseException:
            with contextlib.suppress(OSError):
                self._group.thaw()
            raise
        with contextlib.suppress(OSError):
            self._group.thaw()
        raise ToolError(
            f"what the server's sandbox wrote was not read ({why}); it is read after its next call"
        )

    async def aclose(self) -> None:
        """Once the process is gone: its cgroup (anything left in it killed) and its upper
        directories removed; a capture under way ends first. Idempotent."""
        async with self.lock:
            if self._closed:
                return
            self._closed = True
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._remove)

    def _remove(self) -> None:
        try:
            self._group.destroy()
            remove_tree(self._layers)
        finally:
            os.close(self._claim)
