"""The checkpoint store's packs: many small blobs in one file, read back checked, pruned whole."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ringfence.runtime import NotFound, ToolError
from ringfence.workspace import Change, ChangeSet, CheckpointStore, Workspace
from ringfence.workspace.changes._model import Image


def packed_set(store: CheckpointStore, blobs: list[bytes]) -> tuple[ChangeSet, list[str]]:
    pack = store.pack()
    digests = [pack.add(b) for b in blobs]
    pack.commit()
    changes = tuple(
        Change(0, f"f{i}", None, Image("file", 0o644, d, len(b)))
        for i, (d, b) in enumerate(zip(digests, blobs, strict=True))
    )
    cs = ChangeSet(store.new_id(), time.time(), "run_shell", changes)
    store.save(cs)
    return cs, digests


def test_packed_blobs_read_back_and_a_damaged_one_is_refused(
    tmp_path: Path, ringfence_home: Path
) -> None:
    with Workspace([tmp_path]) as ws:
        store = CheckpointStore(ws)
        try:
            _, digests = packed_set(store, [b"one\n", b"two\n", b"one\n"])
            assert digests[0] == digests[2]  # content-addressed: stored once
            assert [store.get(d) for d in digests] == [b"one\n", b"two\n", b"one\n"]
            (pack,) = ringfence_home.glob("checkpoints/*/packs/*.pack")
            assert pack.read_bytes() == b"one\ntwo\n"
            pack.write_bytes(b"one\ntwX\n")  # torn by a power loss
            fresh = CheckpointStore(ws)  # a new reader, nothing cached
            try:
                with pytest.raises(ToolError, match="damaged"):
                    fresh.get(digests[1])
                assert fresh.get(digests[0]) == b"one\n"
            finally:
                fresh.close()
        finally:
            store.close()


def test_a_pack_no_set_names_is_pruned_whole_and_a_named_one_kept(
    tmp_path: Path, ringfence_home: Path
) -> None:
    with Workspace([tmp_path]) as ws:
        store = CheckpointStore(ws)
        try:
            old, (gone,) = packed_set(store, [b"old\n"])
            _, (kept,) = packed_set(store, [b"new\n"])
            store.drop(old.id)
            hour_ago = time.time() - 7200  # past the grace for blobs no manifest names yet
            for p in ringfence_home.glob("checkpoints/*/packs/*"):
                os.utime(p, (hour_ago, hour_ago))
            store.prune()
            left = sorted(p.name for p in ringfence_home.glob("checkpoints/*/packs/*"))
            stems = {name.rsplit(".", 1)[0] for name in left}
            assert len(left) == 2 and len(stems) == 1  # one pack (+ its index) left
            assert store.get(kept) == b"new\n"
            fresh = CheckpointStore(ws)
            try:
                with pytest.raises(NotFound):
                    fresh.get(gone)
            finally:
                fresh.close()
        finally:
            store.close()


def test_prune_sees_a_set_another_store_rewrote_and_keeps_what_it_names(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """Prune caches what it read; a manifest rewritten since (by another kernel, as run_shell
    rewrites its set with what the merge applied) is read again, so its blobs stay."""
    with Workspace([tmp_path]) as ws:
        store, other = CheckpointStore(ws), CheckpointStore(ws)
        try:
            old = store.put(b"first before-image\n")
            cs = ChangeSet(
                store.new_id(),
                time.time(),
                "run_shell",
                (Change(0, "f", Image("file", 0o644, old, 19), None),),
            )
            store.save(cs)
            hour_ago = time.time() - 7200  # past the grace for blobs no manifest names yet
            os.utime(next(ringfence_home.glob(f"checkpoints/*/blobs/{old}")), (hour_ago, hour_ago))
            store.prune()  # caches the set as naming `old`, and `old` as an old blob
            new = other.put(b"the before-image the merge found\n")
            found = Image("file", 0o644, new, 33)
            other.save(ChangeSet(cs.id, cs.created, "run_shell", (Change(0, "f", found, None),)))
            os.utime(next(ringfence_home.glob(f"checkpoints/*/blobs/{new}")), (hour_ago, hour_ago))
            store.prune()
            assert store.get(new) == b"the before-image the merge found\n"
            with pytest.raises(NotFound):
                store.get(old)  # named by no set any more: pruned
        finally:
            store.close()
            other.close()


def test_prune_drops_the_oldest_sets_until_every_limit_holds(
    tmp_path: Path, ringfence_home: Path
) -> None:
    from ringfence.workspace import Retention

    with Workspace([tmp_path]) as ws:
        # 3 sets of 600 KiB each against a 1 MiB limit: only the newest fits.
        store = CheckpointStore(ws, retention=Retention(keep=10, max_mib=1.0))
        try:
            ids = []
            for i in range(3):
                digest = store.put(bytes([i]) * (600 << 10))
                cs = ChangeSet(
                    store.new_id(),
                    time.time(),
                    "write_file",
                    (Change(0, f"f{i}", None, Image("file", 0o644, digest, 600 << 10)),),
                )
                store.save(cs)
                ids.append(cs.id)
            store.prune()
            assert store.ids() == ids[-1:]
        finally:
            store.close()


def test_saves_check_retention_often_enough_to_hold_the_count_near_keep(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """The check runs every 32 saves, or every quarter of the sets held when that is more:
    however many sets are saved, the store never holds much more than ``keep``."""
    from ringfence.workspace import Retention

    with Workspace([tmp_path]) as ws:
        store = CheckpointStore(ws, retention=Retention(keep=200))
        try:
            digest = store.put(b"x\n")
            most = 0
            for i in range(1200):
                change = Change(0, f"f{i}", None, Image("file", 0o644, digest, 2))
                store.save(ChangeSet(store.new_id(), time.time(), "write_file", (change,)))
                most = max(most, len(os.listdir(store.path / "sets")))
            assert 200 < most <= 200 + 200 // 4 + 32 + 1, most
            assert len(store.ids()) <= 200 + 200 // 4 + 32
        finally:
            store.close()


@pytest.mark.parametrize(
    "name",
    ["plain/name.txt", "back\\slash.txt", os.fsdecode(b"not-utf8-\xff.txt"), "caf\u00e9.txt"],
    ids=["plain", "backslash", "undecodable", "utf8"],
)
def test_a_manifest_keeps_every_name_exactly(
    tmp_path: Path, ringfence_home: Path, name: str
) -> None:
    """Saved and loaded back, the set is the same, whatever bytes its names hold (a manifest
    writes names in the escaped form: a plain set is written without escaping each)."""
    with Workspace([tmp_path]) as ws:
        store = CheckpointStore(ws)
        try:
            digest = store.put(b"x\n")
            image = Image("file", 0o644, digest, 2)
            changes = (Change(0, "plain.txt", None, image), Change(0, name, image, None))
            cs = ChangeSet(store.new_id(), time.time(), "run_shell", changes)
            store.save(cs)
            assert store.load(cs.id) == cs
        finally:
            store.close()
