"""The write journal: what a killed process leaves is found, reported and rolled back.

A journal line ``B <set>`` nobody holds is what a process killed mid-merge
leaves (the crash oracle in ``tests/backends/test_backends_crash.py`` kills
real processes; here the state is made directly, so every case is exact).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state

from ringfence.cli._main import main
from ringfence.workspace import Change, ChangeSet, CheckpointStore, Workspace
from ringfence.workspace.changes._journal import pending
from ringfence.workspace.changes._merge import merge_changes
from ringfence.workspace.changes._model import Image


def _half_merged(root: Path) -> tuple[dict, str]:
    """A 3-change set applied in part under a journal nobody holds: (the before state, set id)."""
    (root / "a.txt").write_text("old a\n")
    (root / "b.txt").write_text("old b\n")
    before = exact_state(root)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        old_a, old_b = store.put(b"old a\n"), store.put(b"old b\n")
        new = store.put(b"new\n")
        changes = (
            Change(0, "a.txt", Image("file", 0o644, old_a, 6), Image("file", 0o644, new, 4)),
            Change(0, "made", None, Image("dir", 0o755)),
            Change(0, "made/c.txt", None, Image("file", 0o644, new, 4)),
            Change(0, "b.txt", Image("file", 0o644, old_b, 6), None),
        )
        cs = ChangeSet(store.new_id(), time.time(), "run_shell", changes)
        store.save(cs)
        merge_changes(ws, changes[:3], store)  # killed before the deletion
        (root / "made" / ".ringfence-0123456789abcdef.tmp").write_bytes(b"half")
        journal = store.journal_fd_if_any(create=True)
        assert journal is not None
        fd = os.open("99999-00000000abcd.log", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=journal)
        os.write(fd, f"B {cs.id}\n".encode())
        os.close(fd)
        store.close()
    return before, cs.id


def test_a_store_s_start_rolls_back_what_a_dead_process_left(
    tmp_path: Path, ringfence_home: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before, set_id = _half_merged(root)
    assert exact_state(root) != before
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        done = store.recovered.sets
        assert [(d["id"], d["undone"], d["left"], d["record"]) for d in done] == [
            (set_id, 3, [], "staged")
        ]
        assert exact_state(root) == before  # the temporary file went too
        assert pending(store) == []
        [listed] = store.list()
        assert listed["id"] == set_id and listed["staged"]  # kept: apply_changes merges it again
        store.close()


def test_a_journal_a_live_process_holds_is_left_alone(tmp_path: Path, ringfence_home: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before, _ = _half_merged(root)
    half = exact_state(root)
    with Workspace([root]) as ws:
        reader = CheckpointStore(ws, recover=False)
        journal = reader.journal_fd_if_any()
        assert journal is not None
        held = os.open("99999-00000000abcd.log", os.O_RDONLY, dir_fd=journal)
        fcntl.flock(held, fcntl.LOCK_EX)  # its writer is alive
        try:
            store = CheckpointStore(ws)
            assert store.recovered.sets == ()
            assert exact_state(root) == half
            store.close()
        finally:
            os.close(held)
        reader.close()
    assert half != before


def test_doctor_reports_it_and_recover_rolls_it_back(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before, set_id = _half_merged(root)
    monkeypatch.chdir(root)
    main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    checks = report.get("result", report.get("error", {}).get("details", {}))["checks"]
    [journal] = [c for c in checks if c["name"] == "interrupted writes"]
    assert journal["ok"] is False and set_id in journal["detail"]
    assert exact_state(root) != before  # doctor only reads
    code, out = cli_json(capsys, "recover", "--workspace", str(root))
    assert code == 0 and out["result"]["sets"][0]["id"] == set_id
    assert exact_state(root) == before
    code, out = cli_json(capsys, "recover", "--workspace", str(root))
    assert code == 0 and out["result"]["sets"] == []
