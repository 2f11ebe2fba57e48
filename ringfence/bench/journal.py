"""What the write journal costs (issue 35), and how long a recovery takes.

* capture + merge of a shell command touching 100 files on the confined
  ``local`` backend, with the journal (``B``/``E`` lines around the merge)
  against the same with the store's journal switched off, interleaved, on
  two workspaces. Timed: the capture and merge alone. Goal: at most 1.1x.
* a checkpointed ``write_file`` (2 KiB, replacing a file) through the
  workspace's writer and the checkpoint recorder, with and without the
  journal, interleaved. Goal: at most 1.1x.
* recovery of an interrupted 2,500-entry merge (2,000 rewrites, 200
  creations, 100 deletions, 100 renames, 50 into a new directory): the whole
  set applied, then its journal left as a killed process leaves it, then
  ``recover``. Informational.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ringfence.workspace._workspace import Workspace
from ringfence.workspace.changes._journal import recover
from ringfence.workspace.changes._merge import merge_changes
from ringfence.workspace.changes._model import Change, ChangeSet, Image
from ringfence.workspace.changes._store import CheckpointStore
from ringfence.workspace.changes._undo import _Recorder

from ._harness import Samples, interleave_async
from ._suite import Row, Scenario, Skip

GOAL = 1.1


class _NoJournal:
    """A journal that writes nothing: the arm the journal's cost is measured against."""

    def begin(self, set_id: str, *, sync: bool = False) -> None:
        pass

    def end(self, set_id: str) -> None:
        pass

    @contextlib.contextmanager
    def writing(self, set_id: str, *, sync: bool = False) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass


class _Context:
    """What the recorder and merge_or_stage read of a call's context."""

    class tool:
        name = "write_file"

    call_id = "bench"

    def emit(self, kind: str, /, **data: Any) -> None:
        pass


async def _capture(quick: bool) -> Row:
    from ringfence.backends._changesets import merge_or_stage
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.confined._session import start_confined as start_local

    if shutil.which("bwrap") is None:
        raise Skip("bubblewrap is not installed")
    rounds = 5 if quick else 15
    command = "for i in $(seq 100); do echo $i-$$ > f$i; done"
    timed = {"on": Samples("capture + merge, journal"), "off": Samples("capture + merge, none")}
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        sessions: dict[str, Any] = {}
        stores: dict[str, CheckpointStore] = {}
        workspaces: list[Workspace] = []
        try:
            for arm in ("on", "off"):
                root = Path(tmp) / arm
                root.mkdir()
                ws = Workspace([root])
                workspaces.append(ws)
                stores[arm] = CheckpointStore(ws)
                if arm == "off":
                    stores[arm].journal = _NoJournal()  # type: ignore[assignment]
                sessions[arm] = await start_local(SessionSpec(roots=(root,), change_sets=True))

            def runner(arm: str) -> Any:
                root = Path(tmp) / arm

                async def run() -> None:
                    result = await sessions[arm].run(
                        command, cwd=root, env={}, timeout=60, output_cap=1 << 16
                    )
                    start = time.perf_counter()
                    await merge_or_stage(
                        result,
                        {},
                        _Context(),  # type: ignore[arg-type]
                        stores[arm],
                        roots=[Path(os.path.realpath(root))],
                        merge_rest=True,
                        staging=False,
                    )
                    timed[arm].per_op.append(time.perf_counter() - start)

                return run

            await interleave_async(
                runner("off"), runner("on"), rounds=rounds, batch=1, names=("a", "b"), warmup=1
            )
        finally:
            for session in sessions.values():
                await session.aclose()
            for store in stores.values():
                store.close()
            for ws in workspaces:
                ws.close()
    for samples in timed.values():
        samples.per_op[:] = samples.per_op[1:]  # the warm-up's
    ratio = timed["on"].median / timed["off"].median
    return Row(
        "journal",
        "run_shell change set of 100 files: capture + merge with the journal vs without",
        timed["on"],
        timed["off"],
        f"<= {GOAL:g}x",
        ratio <= GOAL,
    )


async def _writes(quick: bool) -> Row:
    rounds, batch = (5, 20) if quick else (15, 40)
    content = "x" * 2048 + "\n"
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        arms: dict[str, tuple[Workspace, CheckpointStore]] = {}
        for arm in ("on", "off"):
            root = Path(tmp) / arm
            root.mkdir()
            ws = Workspace([root])
            store = CheckpointStore(ws)
            if arm == "off":
                store.journal = _NoJournal()  # type: ignore[assignment]
            arms[arm] = (ws, store)
        counter = [0]

        def writer(arm: str) -> Any:
            ws, store = arms[arm]

            async def write() -> None:
                counter[0] += 1
                rec = _Recorder(store, _Context())  # type: ignore[arg-type]
                ws.write_text(f"f{counter[0] % 50}.txt", content, record=rec)
                assert rec.saved is not None
                store.journal.end(rec.saved.id)

            return write

        try:
            base, subject = await interleave_async(
                writer("off"),
                writer("on"),
                rounds=rounds,
                batch=batch,
                names=("write_file + checkpoint", "write_file + checkpoint + journal"),
                warmup=1,
            )
        finally:
            for ws, store in arms.values():
                store.close()
                ws.close()
    return Row(
        "journal",
        "write_file (2 KiB, replacing a file) with a checkpoint: with the journal vs without",
        subject,
        base,
        f"<= {GOAL:g}x",
        subject.median / base.median <= GOAL,
    )


def _entries(root: Path) -> None:
    for sub, count in (("r", 2000), ("d", 100), ("m", 100)):
        (root / sub).mkdir()
        for i in range(count):
            (root / sub / f"f{i}").write_text(f"old {sub} {i}\n")


def _recovery(quick: bool) -> Row:
    rounds = 2 if quick else 5
    samples = Samples("recovery of 2,500 entries")
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
            root = Path(tmp) / "ws"
            root.mkdir()
            _entries(root)
            with Workspace([root]) as ws:
                store = CheckpointStore(ws)
                new = store.put(b"new\n")
                changes: list[Change] = []
                for i in range(2000):
                    before = Image("file", 0o644, store.put(f"old r {i}\n".encode()), 0)
                    changes.append(Change(0, f"r/f{i}", before, Image("file", 0o644, new, 4)))
                for i in range(200):
                    changes.append(Change(0, f"c{i}", None, Image("file", 0o644, new, 4)))
                for i in range(100):
                    before = Image("file", 0o644, store.put(f"old d {i}\n".encode()), 0)
                    changes.append(Change(0, f"d/f{i}", before, None))
                changes.append(Change(0, "ren2", None, Image("dir", 0o755)))
                for i in range(100):
                    image = Image("file", 0o644, store.put(f"old m {i}\n".encode()), 0)
                    changes.append(Change(0, f"m/f{i}", image, None))
                    where = f"ren2/f{i}" if i < 50 else f"m/g{i}"
                    changes.append(Change(0, where, None, image))
                cs = ChangeSet(store.new_id(), time.time(), "run_shell", tuple(changes))
                store.save(cs)
                merge_changes(ws, cs.changes, store, durable=False)
                # What a process killed mid-merge leaves: an unended B line nobody holds.
                journal = store.journal_fd_if_any(create=True)
                assert journal is not None
                fd = os.open("1-000000000000.log", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=journal)
                os.write(fd, f"B {cs.id}\n".encode())
                os.close(fd)
                start = time.perf_counter()
                done = recover(store)
                samples.per_op.append(time.perf_counter() - start)
                assert done.sets and done.sets[0]["undone"] == len(changes), done
                store.close()
    return Row(
        "journal",
        "recovery of an interrupted 2,500-entry merge (rolled back whole)",
        samples,
        None,
        "informational",
        None,
    )


async def run(quick: bool) -> list[Row]:
    return [await _capture(quick), await _writes(quick), _recovery(quick)]


SCENARIO = Scenario(
    "journal",
    "the write journal: its cost on a shell command's capture + merge and on a checkpointed "
    "write_file, and the recovery of an interrupted merge",
    f"capture + merge of 100 files and a checkpointed write_file each <= {GOAL:g}x without the "
    "journal; recovery informational",
    run,
)
SCENARIOS = [SCENARIO]
