"""The checkpoint store's packs: many small blobs in one file, read back checked, pruned whole."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ringfence.runtime import NotFound, ToolError
from ringfence.workspace import Change, ChangeSet, CheckpointStore, Image, Workspace


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
