"""What change sets cost (issue 15): a checkpointed write, and undoing many files.

* ``write_file`` through the Gate with a checkpoint (before- and after-image
  stored, the manifest written and fsynced) against the same call in a
  session without change sets, interleaved. Goal: at most 1.3x.
* ``undo`` of a change set of 1,000 files (each a 1 KiB file replaced),
  merged through the guarded writer with its conflict check, and recorded
  as a change set of its own. Goal: under 1 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from ringfence import create_kernel
from ringfence.workspace import (
    Change,
    ChangeSet,
    CheckpointStore,
    Image,
    Workspace,
    merge_changes,
    undo,
)

from ._harness import Samples, interleave_async
from ._suite import Row, Scenario

WRITE_GOAL = 1.3
UNDO_GOAL_SECONDS = 1.0


async def _writes(quick: bool) -> Row:
    rounds, batch = (5, 20) if quick else (15, 40)
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        plain, kept = Path(tmp) / "plain", Path(tmp) / "kept"
        plain.mkdir()
        kept.mkdir()
        content = "x" * 2048 + "\n"
        options = {"posture": "allow-reversible"}
        async with (
            create_kernel(roots=[plain], checkpoints=False, **options) as k_plain,
            create_kernel(roots=[kept], **options) as k_kept,
        ):
            counter = [0]

            async def write(kernel: object) -> None:
                counter[0] += 1
                out = await kernel.invoke(  # type: ignore[attr-defined]
                    "write_file", {"path": f"f{counter[0] % 50}.txt", "content": content}
                )
                assert out.error is None, out.error

            base, subject = await interleave_async(
                lambda: write(k_plain),
                lambda: write(k_kept),
                rounds=rounds,
                batch=batch,
                names=("write_file", "write_file + checkpoint"),
                warmup=1,
            )
    ratio = subject.median / base.median
    return Row(
        "changesets",
        "write_file (2 KiB, replacing a file) with a checkpoint vs without",
        subject,
        base,
        f"<= {WRITE_GOAL:g}x",
        ratio <= WRITE_GOAL,
    )


def _undo(quick: bool) -> Row:
    rounds, files = (3, 1000) if quick else (7, 1000)
    samples = Samples("undo 1,000 files")
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        for i in range(files):
            sub = root / f"d{i // 100:02}"
            sub.mkdir(exist_ok=True)
            (sub / f"f{i:04}.txt").write_bytes(b"o" * 1024)
        with Workspace([root]) as ws:
            store = CheckpointStore(ws)
            try:
                for r in range(rounds):
                    new = store.put(f"round {r}\n".encode() * 100)
                    changes = [
                        Change(0, f"d{i // 100:02}/f{i:04}.txt", None, Image("file", 0o644, new, 0))
                        for i in range(files)
                    ]
                    applied = merge_changes(ws, changes, store, force=True).applied
                    cs = ChangeSet(store.new_id(), time.time(), "bench", applied)
                    store.save(cs)
                    start = time.perf_counter()
                    undo(store, ids=[cs.id])
                    samples.per_op.append(time.perf_counter() - start)
            finally:
                store.close()
    return Row(
        "changesets",
        f"undo of {files:,} files (merge with conflict check, recorded)",
        samples,
        None,
        f"< {UNDO_GOAL_SECONDS:g} s",
        samples.median < UNDO_GOAL_SECONDS,
    )


async def run(quick: bool) -> list[Row]:
    return [await _writes(quick), _undo(quick)]


SCENARIO = Scenario(
    "changesets",
    "change sets: a checkpointed write_file, and undo of 1,000 files",
    f"write_file with a checkpoint <= {WRITE_GOAL:g}x without; undo of 1,000 files < 1 s",
    run,
)
SCENARIOS = [SCENARIO]
